"""pytest plugin: test Ascend training code on CPU with an emulated NPU.

Installing ``npu-loss-scale`` registers this module with pytest (entry point ``pytest11``,
name ``npu_loss_scale``); nothing has to be imported or listed in a ``conftest.py``. Loading it
costs nothing for tests that do not use it: TensorFlow and the package's modules are imported by
the fixtures and helpers when they run, and no fixture is ``autouse``.

Fixtures:

``npu_device``
    An emulated Ascend device for one test (:class:`NPUDevice`): the emulated float-status
    register starts empty, the overflow mode is saturation (the Atlas-training default) or the
    one asked for, the ``emulation`` detection backend is selected, and on request every float16
    op is saturated or a ``precision_mode`` is applied (to the sessions and the TF2 ops of the
    test). All of it is undone when the test ends. Choose per test with the marker::

        @pytest.mark.npu_device(sat_mode="inf_nan", saturate_every_op=True)

    or parametrise (``@pytest.mark.parametrize("npu_device", ["saturation", "inf_nan"],
    indirect=True)``), or change it inside the test (``npu_device.sat_mode = "inf_nan"``).
    ``npu_device.run_script(path, *args)`` runs an unmodified Ascend script (``from
    npu_bridge.npu_init import *``) in the test's process; ``npu_device.load_script(path)``
    imports one as a module so the test can call its functions.

``npu_ranks``
    Runs a function or a script in N emulated ranks: N processes with the environment Ascend
    launch scripts set (``RANK_ID``, ``RANK_SIZE``, ``DEVICE_ID``, ...) whose HCCL calls and
    distributed loss-scale agreement work across the processes, as with ``python -m
    npu_loss_scale.emulate --ranks N``. Returns each rank's exit code, output and (for a
    function) return value; a rank that fails or outlives the timeout fails the test with an
    error naming it. See :class:`NPURanks`.

Assertion helpers (import them: ``from npu_loss_scale.pytest_plugin import ...``):

:func:`assert_step_skipped`, :func:`assert_no_overflow`
    Take one training step's outcome as each front end reports it — the dict of
    ``sess.run(opt.step_report)`` (NPULossScaleOptimizer, fetched with the train op), a
    :class:`~npu_loss_scale.LossScaleHook` (its last step) or one record of its ``history``, the
    Keras ``NpuLossScaleOptimizer`` after a step, a :class:`~npu_loss_scale.GradScaler` after
    ``step()`` and before ``update()``, or a localisation ``StepOverflowRecord``.
:func:`overflow_sites`
    The overflow sites (op, direction, dtype, ...) of the last step, from
    :mod:`npu_loss_scale.device.localisation`.

Example (a test of an Ascend script ``train.py`` whose ``main(steps)`` returns the per-step
``opt.step_report`` values)::

    from npu_loss_scale.pytest_plugin import assert_no_overflow, assert_step_skipped

    def test_the_scale_backs_off_then_training_proceeds(npu_device):
        train = npu_device.load_script("train.py")
        steps = train.main(steps=4)
        assert_step_skipped(steps[0])
        assert_no_overflow(steps[-1])
"""
import contextlib
import importlib
import importlib.util
import os
import pickle
import sys
import types

import pytest

SAT_MODES = {"saturation": 0, "inf_nan": 1}
_MARKER = "npu_device"
_BACKEND_ENV = "NPU_LOSS_SCALE_BACKEND"
_SAT_MODE_ENV = "NPU_LOSS_SCALE_SAT_MODE"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "npu_device(sat_mode='saturation', saturate_every_op=False, "
                   "precision_mode=None): how the npu_device fixture sets up the emulated "
                   "Ascend device for this test (npu_loss_scale plugin)")


# -- the emulated device -------------------------------------------------------------------------
def _check_sat_mode(value, name="sat_mode"):
    if isinstance(value, str) and value in SAT_MODES:
        return value
    if not isinstance(value, bool) and value in (0, 1):
        return "saturation" if value == 0 else "inf_nan"
    raise ValueError("%s must be 'saturation' (or 0) or 'inf_nan' (or 1); got %r"
                     % (name, value))


class NPUDevice:
    """The emulated Ascend device of one test; made by the ``npu_device`` fixture.

    Attributes and methods:

    * ``sat_mode``: ``"saturation"`` or ``"inf_nan"``; assigning it switches the mode (as
      ``set_device_sat_mode`` does; build the model after switching).
    * ``saturate_every_op(dtypes=("float16",))``: a context manager in which every op of those
      dtypes built is saturated (:func:`npu_loss_scale.device.saturation.saturate_every_op`). With the
      marker's ``saturate_every_op=True`` it is on for the whole test.
    * ``precision_mode``: the ``precision_mode`` applied to sessions whose config names none
      and to TF2 ops built or run eagerly while it is set (:mod:`npu_loss_scale.device.precision`),
      None for float32 as written.
    * ``status(session=None)``: the eight words of the emulated register (0 = nothing since the
      last clear), read in ``session`` (TF1 graph) or eagerly; ``clear(session=None)`` clears it.
    * ``run_script(path, *args)``, ``load_script(path)``: an Ascend script in this process.
    """

    def __init__(self, sat_mode="saturation", saturate_every_op=False, precision_mode=None):
        self._stack = contextlib.ExitStack()
        self._closed = False
        self._sat_mode = None
        self._precision_mode = None
        self._hook_installed = False
        try:
            self._setup(sat_mode, saturate_every_op, precision_mode)
        except BaseException:
            self.close()     # a refused option leaves nothing changed
            raise

    # -- set-up and tear-down -----------------------------------------------------------------
    def _setup(self, sat_mode, saturate_every_op, precision_mode):
        from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
            register as emulation)
        sat_mode = _check_sat_mode(sat_mode)
        if not isinstance(saturate_every_op, bool):
            raise TypeError("saturate_every_op must be True or False; got %r"
                            % (saturate_every_op,))
        saved_env = {k: os.environ.get(k) for k in (_BACKEND_ENV, _SAT_MODE_ENV)}
        self._stack.callback(_restore_env, saved_env)
        os.environ[_BACKEND_ENV] = "emulation"
        os.environ.pop(_SAT_MODE_ENV, None)
        previous = emulation.set_device_sat_mode(SAT_MODES[sat_mode])
        self._stack.callback(emulation.set_device_sat_mode, previous)
        self._sat_mode = sat_mode
        emulation.reset_register()
        self._stack.callback(emulation.reset_register)
        if saturate_every_op:
            self._stack.enter_context(self.saturate_every_op())
        if precision_mode is not None:
            self.precision_mode = precision_mode

    def close(self):
        """Undoes everything the device changed (the fixture calls it when the test ends)."""
        if not self._closed:
            self._closed = True
            self._stack.close()

    # -- overflow mode ---------------------------------------------------------------------------
    @property
    def sat_mode(self):
        return self._sat_mode

    @sat_mode.setter
    def sat_mode(self, value):
        from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
            register as emulation)
        value = _check_sat_mode(value)
        emulation.set_device_sat_mode(SAT_MODES[value])
        self._sat_mode = value

    # -- saturation of every op ----------------------------------------------------------------
    def saturate_every_op(self, dtypes=("float16",)):
        from npu_loss_scale.device import saturation  # pylint: disable=import-outside-toplevel
        return saturation.saturate_every_op(dtypes)

    # -- precision mode ------------------------------------------------------------------------
    @property
    def precision_mode(self):
        return self._precision_mode

    @precision_mode.setter
    def precision_mode(self, mode):
        from npu_loss_scale.device import precision  # pylint: disable=import-outside-toplevel
        if mode is not None:
            precision.check_precision_mode(mode)
        self._ensure_precision_hook()
        precision.set_default_precision_mode(mode)
        if mode is None:
            precision.uninstall_op_precision()
        else:
            precision.install_op_precision(mode)   # TF2 code: eager ops and tf.function graphs
        self._precision_mode = mode

    def _ensure_precision_hook(self):
        """Sessions created from now on apply their config's precision_mode (else the default).

        The hook is process-wide and idempotent (importing the shim's ``npu_init`` installs it
        too): one installed here is removed at the end of the test, one found is left in place;
        the default mode is restored either way.
        """
        from npu_loss_scale.device import precision  # pylint: disable=import-outside-toplevel
        if self._hook_installed:
            return
        self._hook_installed = True
        self._stack.callback(precision.set_default_precision_mode,
                             precision._default_mode[0])  # pylint: disable=protected-access
        previous = precision.op_precision_mode()
        self._stack.callback(lambda: precision.install_op_precision(previous)
                             if previous is not None else precision.uninstall_op_precision())
        if not precision._patched:  # pylint: disable=protected-access
            precision.install_session_hook()
            self._stack.callback(precision.uninstall_session_hook)
        precision.set_default_precision_mode(None)

    # -- the register ----------------------------------------------------------------------------
    def status(self, session=None):
        """The emulated register's eight words as a list of ints (not cleared by reading)."""
        from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
            register as emulation)
        if session is None:
            return [int(v) for v in emulation.npu_get_float_status_v2().numpy()]
        with session.graph.as_default():
            op = emulation.npu_get_float_status_v2()
        return [int(v) for v in session.run(op)]

    def clear(self, session=None):
        """Clears the emulated register (all reader slots), in ``session`` or eagerly."""
        from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
            register as emulation)
        if session is None:
            emulation.npu_clear_float_status_v2()
            return
        with session.graph.as_default():
            op = emulation.npu_clear_float_status_v2()
        session.run(op)

    # -- Ascend scripts in this process ------------------------------------------------------------
    def _install_shim(self):
        from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
        if emulate.install_shim():
            self._stack.callback(emulate.uninstall_shim)
            self._ensure_precision_hook()   # as emulate does: a config's precision_mode counts
            return
        raise RuntimeError("npu_device: a real npu_bridge is importable (%s); the emulated "
                           "device runs scripts against the CPU shim only"
                           % emulate.real_npu_bridge_origin())

    @staticmethod
    def _script_path(path):
        script = os.path.abspath(os.fspath(path))
        if not os.path.isfile(script):
            raise FileNotFoundError("npu_device: script %r does not exist (resolved to %s)"
                                    % (os.fspath(path), script))
        return script

    def run_script(self, path, *args):
        """Runs an Ascend script as ``python -m npu_loss_scale.emulate path *args`` would, in
        this process, on this device; returns the script's globals (a namespace).

        ``npu_bridge`` resolves to the CPU shim, ``sys.argv`` is ``[path, *args]`` and the
        script's folder is first on ``sys.path`` while it runs. A ``SystemExit`` with a non-zero
        code fails the test, naming the script and the code.
        """
        import runpy  # pylint: disable=import-outside-toplevel
        script = self._script_path(path)
        self._install_shim()
        saved_argv, saved_path = list(sys.argv), list(sys.path)
        sys.argv = [script] + [str(a) for a in args]
        sys.path.insert(0, os.path.dirname(script))
        try:
            namespace = runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise AssertionError("script %s exited with code %r" % (script, exc.code)) \
                    from exc
            namespace = {}
        finally:
            sys.argv[:] = saved_argv
            sys.path[:] = saved_path
        return types.SimpleNamespace(**namespace)

    def load_script(self, path, name=None):
        """Imports an Ascend script as a module (its ``if __name__ == "__main__"`` part does not
        run) with ``npu_bridge`` resolving to the CPU shim; returns the module."""
        script = self._script_path(path)
        self._install_shim()
        name = name or os.path.splitext(os.path.basename(script))[0]
        spec = importlib.util.spec_from_file_location(name, script)
        module = importlib.util.module_from_spec(spec)
        saved_path = list(sys.path)
        sys.path.insert(0, os.path.dirname(script))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path[:] = saved_path
        return module


def _restore_env(saved):
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def npu_device(request):
    """An emulated Ascend device for this test (see :class:`NPUDevice`)."""
    options = {}
    marker = request.node.get_closest_marker(_MARKER)
    if marker is not None:
        if marker.args:
            raise TypeError("@pytest.mark.npu_device takes keyword arguments only (sat_mode=, "
                            "saturate_every_op=, precision_mode=); got %r" % (marker.args,))
        unknown = set(marker.kwargs) - {"sat_mode", "saturate_every_op", "precision_mode"}
        if unknown:
            raise TypeError("@pytest.mark.npu_device: unknown argument(s) %s; accepted: "
                            "sat_mode, saturate_every_op, precision_mode" % sorted(unknown))
        options.update(marker.kwargs)
    param = getattr(request, "param", None)
    if param is not None:   # parametrize("npu_device", [...], indirect=True)
        if isinstance(param, dict):
            options.update(param)
        else:
            options["sat_mode"] = param
    device = NPUDevice(**options)
    try:
        yield device
    finally:
        device.close()


# -- N emulated ranks -------------------------------------------------------------------------------
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


@pytest.fixture
def npu_ranks(tmp_path):
    """Runs a function or a script in N emulated ranks (see :class:`NPURanks`)."""
    return NPURanks(str(tmp_path))


# -- assertion helpers --------------------------------------------------------------------------------
_ACCEPTED_STEPS = (
    "the dict of sess.run(opt.step_report) (NPULossScaleOptimizer; fetch it with the train op), "
    "a LossScaleHook or one record of its history, the Keras NpuLossScaleOptimizer after a "
    "step, a GradScaler after step() and before update(), a localisation StepOverflowRecord, "
    "or any StepReport (npu_loss_scale.StepReport)")


def _step_outcome(step, helper):
    """(overflowed, skipped, details) of one training step, from its
    :class:`~npu_loss_scale.StepReport` (or a plain dict of one, or an object with a
    ``step_report`` attribute).

    For every front end an overflowed step is a skipped one; only a localisation record tells
    the two apart (sites found, and whether the step was skipped).
    """
    report = _report_of(step, helper)
    if report.overflowed is None:
        if "finite" in report:
            raise ValueError("%s: the step has no overflow check (a FixedLossScaleManager "
                             "with enable_overflow_check=False): nothing to assert" % helper)
        raise ValueError("%s: the step has no overflow check (overflow is None): nothing to "
                         "assert" % helper)
    return report.overflowed, report.skipped, report.details


def _report_of(step, helper):
    """The StepReport ``step`` is or gives."""
    # imported here: loading the plugin imports none of the package
    from npu_loss_scale._internal.report import StepReport, of_record  # pylint: disable=import-outside-toplevel
    if isinstance(step, dict):
        if "finite" not in step and "overflow" not in step:
            raise TypeError("%s: a step dict needs a 'finite' key (sess.run(opt.step_report)) or "
                            "an 'overflow' key (LossScaleHook.history); got keys %s"
                            % (helper, sorted(step)))
        return step if isinstance(step, StepReport) else StepReport(step)
    if _is_graph_optimizer(step):   # its report is tensors, to fetch with the train op
        raise TypeError("%s: pass the step's report, not the optimizer: fetch it with the train "
                        "op, e.g. `_, report = sess.run([train_op, opt.step_report])`, then "
                        "%s(report)" % (helper, helper))
    if not hasattr(type(step), "step_report"):
        if hasattr(step, "sites") and hasattr(step, "skipped"):   # a localisation record
            return of_record(step)
        raise TypeError("%s: step must be %s; got %r (type %s)"
                        % (helper, _ACCEPTED_STEPS, step, type(step).__name__))
    try:
        return _report_of(step.step_report, helper)
    except ValueError as err:
        raise ValueError("%s: %s" % (helper, err)) from None


def _is_graph_optimizer(step):
    if "npu_loss_scale.optimizers.loss_scale" not in sys.modules:
        return False     # no NPULossScaleOptimizer was ever made in this process
    from npu_loss_scale.optimizers.loss_scale import NPULossScaleOptimizer  # pylint: disable=import-outside-toplevel
    return isinstance(step, NPULossScaleOptimizer)


def _describe(details):
    parts = []
    if "loss_scale" in details:
        scale = "loss scale %g" % details["loss_scale"]
        if "next_loss_scale" in details:
            scale += " -> %g" % details["next_loss_scale"]
        parts.append(scale)
    for key, label in (("scale", "scale"), ("skipped_steps", "skipped steps"),
                       ("global_step", "global step"), ("iteration", "iteration"),
                       ("step", "step"), ("sites", "overflow sites")):
        if details.get(key) is not None:
            parts.append("%s %s" % (label, details[key]))
    return ", ".join(parts)


def _sites_note():
    """The last recorded overflow sites, when localisation is available and has some."""
    try:
        localisation = importlib.import_module("npu_loss_scale.device.localisation")
        record = localisation.last_record()
    except Exception:  # pylint: disable=broad-except
        return ""      # the note is extra information only; the assertion stands without it
    if record is None or not getattr(record, "sites", None):
        return ""
    shown = ["%s (%s, %s)" % (s.op_name, s.direction, s.dtype) for s in record.sites[:5]]
    more = "" if len(record.sites) <= 5 else " and %d more" % (len(record.sites) - 5)
    return "; overflow sites: " + ", ".join(shown) + more


def assert_no_overflow(step):
    """Fails unless the training step ``step`` had no overflow (and so was applied).

    ``step``: the dict of ``sess.run(opt.step_report)`` (NPULossScaleOptimizer), a
    ``LossScaleHook`` or a record of its ``history``, the Keras ``NpuLossScaleOptimizer`` after
    a step, a ``GradScaler`` after ``step()`` and before ``update()``, or a localisation
    ``StepOverflowRecord``.
    """
    __tracebackhide__ = True  # pylint: disable=unused-variable
    overflowed, _, details = _step_outcome(step, "assert_no_overflow")
    if overflowed:
        described = _describe(details)
        raise AssertionError("the step overflowed (and was skipped)%s%s"
                             % (": " + described if described else "", _sites_note()))


def assert_step_skipped(step):
    """Fails unless the training step ``step`` overflowed and was skipped (not applied).

    ``step``: as for :func:`assert_no_overflow`.
    """
    __tracebackhide__ = True  # pylint: disable=unused-variable
    overflowed, skipped, details = _step_outcome(step, "assert_step_skipped")
    if not skipped:
        described = _describe(details)
        what = ("it overflowed but was applied anyway" if overflowed
                else "no overflow was detected")
        raise AssertionError("the step was applied: %s%s"
                             % (what, ": " + described if described else ""))


def overflow_sites():
    """The overflow sites of the last recorded step (``OverflowSite`` objects: ``op_name``,
    ``direction`` "forward"/"backward", ``dtype``, ``magnitude``, ``order``, ``first``).

    Comes from :func:`npu_loss_scale.device.localisation.last_record`. Raises RuntimeError when that
    module is not available or when no step has been recorded yet (never an empty list for
    "unknown"); an empty list means the last step had no overflow site.
    """
    try:
        localisation = importlib.import_module("npu_loss_scale.device.localisation")
    except ModuleNotFoundError as exc:
        if exc.name not in ("npu_loss_scale.device.localisation", "npu_loss_scale"):
            raise
        raise RuntimeError("overflow_sites() needs npu_loss_scale.device.localisation (overflow-site "
                           "localisation), which this installation of npu_loss_scale does not "
                           "have") from exc
    record = localisation.last_record()
    if record is None:
        raise RuntimeError("overflow_sites(): no training step has been recorded yet "
                           "(npu_loss_scale.device.localisation.last_record() is None)")
    return list(record.sites)


if __name__ == "__main__":   # a rank of npu_ranks running a function
    _rank_main(sys.argv[1])


# The fixtures (npu_device, npu_ranks) and hooks reach tests through the plugin's registration,
# not through imports.
__all__ = ["NPUDevice", "NPURanks", "RankFailed", "RanksResult", "assert_no_overflow",
           "assert_step_skipped", "overflow_sites", "SAT_MODES"]
