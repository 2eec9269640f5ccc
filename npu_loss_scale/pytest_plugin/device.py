"""The ``npu_device`` fixture's emulated Ascend device (:class:`NPUDevice`): the register, the
overflow mode, the backend, saturation of every op and ``precision_mode`` for one test, all
undone when it ends."""
import contextlib
import importlib.util
import os
import sys
import types

SAT_MODES = {"saturation": 0, "inf_nan": 1}
_BACKEND_ENV = "NPU_LOSS_SCALE_BACKEND"
_SAT_MODE_ENV = "NPU_LOSS_SCALE_SAT_MODE"


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
        from npu_loss_scale._internal.compat.scripts import (  # pylint: disable=import-outside-toplevel
            NATIVE_TF1)
        if mode is not None:
            precision.check_precision_mode(mode)
        self._ensure_precision_hook()
        precision.set_default_precision_mode(mode)   # TF1 graphs: their sessions apply it
        if mode is None or NATIVE_TF1:
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


__all__ = ["NPUDevice", "SAT_MODES"]
