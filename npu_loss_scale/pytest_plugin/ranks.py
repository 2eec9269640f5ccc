"""The ``npu_ranks`` fixture's N emulated ranks (:class:`NPURanks`): N processes with an Ascend
launch's environment, HCCL and the loss-scale agreement working across them; run as
``python -m npu_loss_scale.pytest_plugin.ranks SPEC``, a rank calls the function ``SPEC``
names."""
import importlib
import importlib.util
import os
import pickle
import sys

from npu_loss_scale.pytest_plugin.device import SAT_MODES, _BACKEND_ENV, _check_sat_mode


class RankFailed(AssertionError):
    """A rank of :class:`NPURanks` exited non-zero, raised, or outlived the timeout."""


class RanksResult:
    """What an N-rank run left: per rank ``returncodes``, ``stdout``, ``stderr`` and, for a
    function, ``values`` (its return value; None for a rank that failed)."""

    def __init__(self, what, returncodes, stdout, stderr, values, timed_out):
        self.what = what
        self.returncodes = returncodes
        self.stdout = stdout
        self.stderr = stderr
        self.values = values
        self.timed_out = timed_out

    @property
    def ok(self):
        return not self.timed_out and all(code == 0 for code in self.returncodes)

    def failed_ranks(self):
        return [rank for rank, code in enumerate(self.returncodes)
                if code != 0 or rank in self.timed_out]

    def describe_failure(self, tail=3000):
        lines = []
        for rank in self.failed_ranks():
            if rank in self.timed_out:
                why = "was still running at the timeout and was killed"
            else:
                why = "exited with code %s" % self.returncodes[rank]
            lines.append("rank %d of %d (%s) %s; its stderr ends with:\n%s"
                         % (rank, len(self.returncodes), self.what, why,
                            self.stderr[rank][-tail:]))
        return "\n".join(lines)

    def check(self):
        """Raises :class:`RankFailed` naming every rank that failed; returns self."""
        __tracebackhide__ = True  # pylint: disable=unused-variable
        if not self.ok:
            raise RankFailed(self.describe_failure())
        return self


def _emulate_options(sat_mode, saturate_every_op, precision_mode, tf1):
    options = []
    if sat_mode is not None:
        options += ["--sat-mode", str(SAT_MODES[_check_sat_mode(sat_mode)])]
    if saturate_every_op:
        options.append("--saturate-every-op")
    if precision_mode is not None:
        options += ["--precision-mode", precision_mode]
    if tf1:
        options.append("--tf1")
    return options


class NPURanks:
    """Runs functions and scripts in N emulated ranks; the ``npu_ranks`` fixture.

    ``npu_ranks(n, target, *args, timeout=120, check=True, sat_mode=None,
    saturate_every_op=False, precision_mode=None, tf1=False, env=None, **kwargs)``:

    * ``target`` a function: it must be defined at the top level of an importable module (a
      test file is fine); each rank imports it and calls ``target(*args, **kwargs)``, which must
      return something picklable. The rank's identity is in ``os.environ["RANK_ID"]``.
    * ``target`` a path (``str`` or ``os.PathLike``) of a script: each rank runs it as
      ``python -m npu_loss_scale.emulate [options] script *args``.

    Every rank runs under ``python -m npu_loss_scale.emulate`` (npu_bridge shim, HCCL over TF
    collective ops, sessions on the rank's server) with the emulation backend. Returns a
    :class:`RanksResult`. With ``check=True`` (default) a rank that exits non-zero (or raises)
    fails the test with :class:`RankFailed`, naming the rank and showing its output; after
    ``timeout`` seconds every rank still running is killed and reported.
    """

    def __init__(self, tmp_dir):
        self._tmp_dir = tmp_dir
        self._runs = 0

    def __call__(self, n, target, *args, timeout=120.0, check=True, sat_mode=None,
                 saturate_every_op=False, precision_mode=None, tf1=False, env=None, **kwargs):
        __tracebackhide__ = True  # pylint: disable=unused-variable
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("npu_ranks: n must be an int >= 1 (the number of ranks); got %r"
                             % (n,))
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError("npu_ranks: timeout must be a number of seconds > 0; got %r"
                             % (timeout,))
        self._runs += 1
        run_dir = os.path.join(self._tmp_dir, "npu_ranks_%d" % self._runs)
        os.makedirs(run_dir)
        options = _emulate_options(sat_mode, saturate_every_op, precision_mode, tf1)
        if callable(target) and not isinstance(target, (str, os.PathLike)):
            what = "%s.%s" % (target.__module__, target.__qualname__)
            spec_path = os.path.join(run_dir, "call.pkl")
            with open(spec_path, "wb") as f:
                pickle.dump({"module": target.__module__, "qualname": target.__qualname__,
                             "file": _defining_file(target), "args": args, "kwargs": kwargs},
                            f)
            child = options + ["-m", __name__, spec_path]
        elif isinstance(target, (str, os.PathLike)):
            if kwargs:
                raise TypeError("npu_ranks: keyword arguments %s go to functions only; a "
                                "script takes its arguments as strings" % sorted(kwargs))
            script = os.path.abspath(os.fspath(target))
            if not os.path.isfile(script):
                raise FileNotFoundError("npu_ranks: script %r does not exist (resolved to %s)"
                                        % (os.fspath(target), script))
            what = script
            spec_path = None
            child = options + [script] + [str(a) for a in args]
        else:
            raise TypeError("npu_ranks: target must be a function or the path of a script; "
                            "got %r (type %s)" % (target, type(target).__name__))
        return self._launch(n, child, what, run_dir, spec_path, timeout, env, check)

    @staticmethod
    def _launch(n, child, what, run_dir, spec_path, timeout, env, check):
        __tracebackhide__ = True  # pylint: disable=unused-variable
        from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
        base = dict(os.environ)
        base.pop("TF_CONFIG", None)
        base.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        base[_BACKEND_ENV] = "emulation"
        # the parent's import path, so the ranks import the same package and test modules
        base["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        base.update(env or {})
        files = []

        def streams(rank):
            out = open(os.path.join(run_dir, "rank%d.out" % rank), "w+")
            err = open(os.path.join(run_dir, "rank%d.err" % rank), "w+")
            files.append((out, err))
            return out, err

        procs = ranks.start_ranks(n, child, streams, base_env=base, cwd=run_dir)
        codes, _, timed_out = ranks.wait_ranks(procs, timeout=timeout, grace=10.0,
                                               poll_seconds=0.1, kill=True)
        stdout, stderr = [], []
        for out, err in files:
            for f, sink in ((out, stdout), (err, stderr)):
                f.seek(0)
                sink.append(f.read())
                f.close()
        values = [None] * n
        if spec_path is not None:
            for rank in range(n):
                path = "%s.rank%d.result" % (spec_path, rank)
                if codes[rank] == 0 and os.path.exists(path):
                    with open(path, "rb") as f:
                        values[rank] = pickle.load(f)
                elif codes[rank] == 0:   # exited 0 without a result: say so
                    codes[rank] = -1
                    stderr[rank] += "\nnpu_ranks: rank %d exited without a result\n" % rank
        result = RanksResult(what, codes, stdout, stderr, values, timed_out)
        if check:
            result.check()
        return result


def _defining_file(fn):
    module = sys.modules.get(fn.__module__)
    path = getattr(module, "__file__", None)
    if fn.__module__ == "__main__" or path is None:
        raise ValueError("npu_ranks: function %r must be defined in an importable module (a "
                         "test file will do), not in %r" % (fn.__qualname__, fn.__module__))
    if "<locals>" in fn.__qualname__:
        raise ValueError("npu_ranks: function %r is defined inside another function; the "
                         "ranks can only import top-level functions" % fn.__qualname__)
    return os.path.abspath(path)


def _rank_main(spec_path):
    """In a rank: import the function named in ``spec_path``, call it, pickle its value."""
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    module = None
    try:
        module = importlib.import_module(spec["module"])
        if os.path.abspath(getattr(module, "__file__", "") or "") != spec["file"]:
            module = None
    except ImportError:
        module = None
    if module is None:   # a test file not importable by name: load it from its file
        loaded = importlib.util.spec_from_file_location(spec["module"], spec["file"])
        module = importlib.util.module_from_spec(loaded)
        sys.modules[spec["module"]] = module
        loaded.loader.exec_module(module)
    fn = module
    for part in spec["qualname"].split("."):
        fn = getattr(fn, part)
    value = fn(*spec["args"], **spec["kwargs"])
    from npu_loss_scale._internal import env as rank_env  # pylint: disable=import-outside-toplevel
    with open("%s.rank%d.result" % (spec_path, rank_env.rank_id()), "wb") as f:
        pickle.dump(value, f)


if __name__ == "__main__":   # a rank of npu_ranks running a function
    _rank_main(sys.argv[1])


__all__ = ["NPURanks", "RankFailed", "RanksResult"]
