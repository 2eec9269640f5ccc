"""The rank variables (RANK_SIZE, RANK_ID, ...) are parsed in one place, and every reader agrees.

TensorFlow-free except the readers' own tests, which import their modules.
"""
import ast
import os

import pytest

from npu_loss_scale._internal import env as rank_env

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "npu_loss_scale")
RANK_VARIABLES = ("RANK_SIZE", "RANK_ID", "LOCAL_RANK_SIZE", "LOCAL_RANK_ID", "DEVICE_ID")


@pytest.mark.parametrize("raw,expected", [(None, 7), ("", 7), ("  ", 7), ("4", 4), (" 4\n", 4),
                                          ("-1", -1), ("0", 0)])
def test_unset_or_blank_gives_the_default_and_an_integer_is_read(monkeypatch, raw, expected):
    if raw is None:
        monkeypatch.delenv("RANK_SIZE", raising=False)
    else:
        monkeypatch.setenv("RANK_SIZE", raw)
    assert rank_env.env_int("RANK_SIZE", 7) == expected


@pytest.mark.parametrize("raw", ["two", "2.0", "4x", "0x4"])
def test_a_value_that_is_not_an_integer_is_an_error_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("RANK_ID", raw)
    with pytest.raises(ValueError) as err:
        rank_env.rank_id()
    assert str(err.value) == "environment variable RANK_ID must be an integer; got %r" % raw


def test_rank_size_and_rank_id_default_to_a_single_process(monkeypatch):
    monkeypatch.delenv("RANK_SIZE", raising=False)
    monkeypatch.delenv("RANK_ID", raising=False)
    assert (rank_env.rank_size(), rank_env.rank_id()) == (1, 0)


def _reads_a_rank_variable(node):
    """Whether ``node`` reads one of the rank variables from the environment: a string constant
    naming one, as the first argument of ``.get``/``getenv`` or the subscript of ``environ``."""
    def names_one(arg):   # a str constant (ast.Str, with .s, on Python 3.7)
        return getattr(arg, "value", getattr(arg, "s", None)) in RANK_VARIABLES
    if isinstance(node, ast.Call) and node.args and names_one(node.args[0]):
        return getattr(node.func, "attr", getattr(node.func, "id", "")) in ("get", "getenv")
    if isinstance(node, ast.Subscript):
        index = node.slice.value if isinstance(node.slice, getattr(ast, "Index", ())) \
            else node.slice   # Python < 3.9 wraps the subscript in ast.Index
        return names_one(index) and "environ" in ast.dump(node.value)
    return False


def test_no_module_but_the_parser_reads_a_rank_variable_itself():
    readers = []
    for folder, dirs, names in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == rank_env.__file__.replace(".pyc", ".py"):
                continue
            with open(path) as source:
                tree = ast.parse(source.read(), path)
            readers += ["%s:%d" % (os.path.relpath(path, PACKAGE), node.lineno)
                        for node in ast.walk(tree) if _reads_a_rank_variable(node)]
    assert readers == []


# -- the readers agree (each keeps what it does with a malformed value) ---------------------------
def test_every_reader_sees_the_same_padded_values(monkeypatch):
    from npu_loss_scale.agreement import divergence
    from npu_loss_scale.device import localisation
    for var in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "TF_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK_SIZE", " 3 ")
    monkeypatch.setenv("RANK_ID", " 1 ")
    assert localisation._per_rank("out/r.jsonl") == "out/r.rank1.jsonl"  # pylint: disable=protected-access
    assert divergence.multi_worker_reason() == "RANK_SIZE=3"


def test_a_malformed_rank_size_is_refused_by_the_report_path_and_ignored_by_the_guesses(
        monkeypatch):
    from npu_loss_scale.agreement import divergence
    from npu_loss_scale.ascend import ranks
    from npu_loss_scale.device import localisation
    for var in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "TF_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK_SIZE", "two")
    with pytest.raises(ValueError, match="^environment variable RANK_SIZE must be an integer; "
                                         "got 'two'$"):
        localisation._per_rank("out/r.jsonl")  # pylint: disable=protected-access
    assert divergence.multi_worker_reason() is None   # no sign of several ranks
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
                                    '"task": {"type": "worker", "index": 0}}')
    monkeypatch.setattr(ranks, "_state", {})
    assert ranks.join() is None                       # not a rank of a --ranks run


def test_a_refused_rank_variable_leaves_localisation_as_it_was(monkeypatch, tmp_path):
    """--overflow-report with RANK_SIZE=two is refused before localisation is switched on (it
    stayed on, for the rest of the process, when the refusal came after the switch)."""
    from npu_loss_scale.cli import report_files  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
    monkeypatch.setenv("RANK_SIZE", "two")
    before = localisation.get_mode()
    with pytest.raises(ValueError, match="RANK_SIZE must be an integer"):
        with report_files.entry_point_tools(str(tmp_path / "overflow.jsonl")):
            pass
    assert localisation.get_mode() == before
    assert localisation.report_path() is None
