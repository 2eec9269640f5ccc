"""One run of ``npu-loss-scale doctor``: the script under ``npu-emulate``, in a process of its
own, with every loss-scale step recorded and the run stopped after the requested number.

The parent (:mod:`npu_loss_scale.cli.doctor`) starts ``python -m npu_loss_scale.cli.doctor_run
RESULT.json CONFIG.json -- <npu-emulate arguments>``. Around the emulation this module:

* records each step of an ``NPULossScaleOptimizer`` (TF1 ``Session`` loops and Estimators): a
  host callback after the train op reads the step's report (the scale used, the next scale,
  finite) and its loss; a ``GradScaler``'s ``update()`` records its iteration the same way;
* takes each step's overflowed sites from the localisation record the step closed
  (:mod:`npu_loss_scale.device.localisation`, on through ``--overflow-report``);
* decides each site's verdict (:mod:`npu_loss_scale.tools.doctor.verdicts`) once the steps are
  done (or when the script closes its session), replaying with the feeds of the last step, so
  that no replay touches the emulated register between two steps of the run;
* records the manager's or scaler's settings as the script passes them, and replaces those the
  config's ``settings`` names (the doctor's manager-setting fix: the script is not edited);
* stops the script with an exception no ``except Exception`` catches once the steps are done
  (outcome ``step_limit``), and writes RESULT.json after every step and at the end, whatever
  the end was (``completed``, ``crashed``, ``stopped`` by SIGINT/SIGTERM).
"""
import inspect
import json
import math
import os
import re
import signal
import sys
import threading
import traceback

__all__ = ["main"]


class _StepLimit(BaseException):
    """Raised once the requested steps ran: ends the script past its ``except Exception``."""


class _Stopped(BaseException):
    """SIGTERM, as SIGINT's KeyboardInterrupt."""


def _number(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else ("nan" if math.isnan(value) else
                                               ("inf" if value > 0 else "-inf"))


class _Recorder:  # pylint: disable=too-many-instance-attributes
    """What the run saw, written to the result file as it goes."""

    def __init__(self, result_path, config):
        self.result_path = result_path
        self.steps_wanted = int(config["steps"])
        self.settings = config.get("settings") or {}
        self.lock = threading.RLock()
        self.steps = []
        self.front_end = None
        self.scaler = {"kind": None, "settings": {}}
        self.sat_mode_calls = []
        self.verdicts = {}
        self.targets = {}      # graph -> (loss, applied gradients)
        self.last_feeds = {}   # graph -> the feeds of its last step
        self.pending = []      # sites seen and not yet judged: (op_name, direction, dtype)
        self.limit_reached = False
        self.in_replay = False
        self.outcome, self.detail = None, ""

    # -- the result file ---------------------------------------------------------------------
    def write(self):
        with self.lock:
            from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
            body = {"outcome": self.outcome, "outcome_detail": self.detail, "stack": _stack(),
                    "front_end": self.front_end, "scaler": self.scaler, "steps": self.steps,
                    "sat_mode_calls": self.sat_mode_calls, "verdicts": self.verdicts,
                    "effective_sat_mode": register.get_device_sat_mode()}
            tmp = self.result_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump(body, out)
            os.replace(tmp, self.result_path)

    # -- one step -------------------------------------------------------------------------------
    def step(self, loss_scale, next_loss_scale, finite, loss):
        from npu_loss_scale.device import localisation  # pylint: disable=import-outside-toplevel
        with self.lock:
            record = localisation.last_record()
            sites = []
            if record is not None and record.step == localisation.steps_seen():
                for site in record.sites:
                    sites.append(site.op_name)
                    key = _site_key(site.op_name, site.direction)
                    if key not in self.verdicts and (site.op_name, site.direction) not in \
                            [p[:2] for p in self.pending]:
                        self.pending.append((site.op_name, site.direction, site.dtype,
                                             site.magnitude,
                                             [s.op_name for s in record.sites[:site.order]],
                                             _scalar(loss_scale)))
            self.steps.append({
                "step": len(self.steps) + 1, "loss_scale": _number(loss_scale),
                "next_loss_scale": _number(next_loss_scale),
                "skipped": None if finite is None else not bool(finite),
                "loss": _number(loss), "sites": sites})
            if len(self.steps) >= self.steps_wanted:
                self.limit_reached = True
            self.write()


def _stack():
    """The versions the run imported (TensorFlow is imported by then; Keras only if the script
    imported it)."""
    import platform  # pylint: disable=import-outside-toplevel
    tf = sys.modules.get("tensorflow")
    keras = sys.modules.get("keras")
    return {"tensorflow": getattr(tf, "__version__", None), "python": platform.python_version(),
            "keras": getattr(keras, "__version__", None)}


def _site_key(op_name, direction):
    return "%s|%s" % (op_name, direction)


_recorder = {}


def _scalar(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# -- NPULossScaleOptimizer -----------------------------------------------------------------------
def _in_estimator():
    return any("estimator" in (frame.filename or "") and "tensorflow_estimator" in frame.filename
               for frame in inspect.stack(context=0))


def _patch_optimizer(rec):
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from npu_loss_scale._internal.compat import py_func  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.optimizers import loss_scale  # pylint: disable=import-outside-toplevel
    cls = loss_scale.NPULossScaleOptimizer
    compute, apply = cls.compute_gradients, cls.apply_gradients

    def compute_gradients(self, loss, *args, **kwargs):
        if isinstance(loss, tf.Tensor):
            self._doctor_loss = loss  # pylint: disable=protected-access
        return compute(self, loss, *args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if rec.front_end is None:
            rec.front_end = "Estimator" if _in_estimator() else "NPULossScaleOptimizer"
        train_op = apply(self, grads_and_vars, global_step=global_step, name=name)
        if tf.executing_eagerly():
            return train_op
        try:
            report = self.step_report
        except RuntimeError:
            return train_op
        loss = getattr(self, "_doctor_loss", None)
        grads = [getattr(g, "values", g) for g, _ in grads_and_vars if g is not None]
        try:
            scale = self.loss_scale_manager.get_loss_scale()   # the graph's one scale tensor
        except Exception:  # pylint: disable=broad-except  # a user's manager
            scale = None
        rec.targets[tf.compat.v1.get_default_graph()] = (
            loss, grads, scale if isinstance(scale, tf.Tensor) else None)
        keys = ("loss_scale", "next_loss_scale", "finite")
        inputs = [tf.cast(report[k], tf.float64) if k in report else tf.constant(np.nan, tf.float64)
                  for k in keys]
        inputs.append(tf.cast(tf.reduce_mean(loss), tf.float64) if loss is not None
                      else tf.constant(np.nan, tf.float64))
        present = [k in report for k in keys] + [loss is not None]

        def note(scale, next_scale, finite, value):
            vals = [v if ok else None for v, ok in zip((scale, next_scale, finite, value),
                                                       present)]
            rec.step(vals[0], vals[1], None if vals[2] is None else bool(vals[2]), vals[3])
            return np.int64(len(rec.steps))

        with tf.control_dependencies([train_op]):
            noted = py_func.numpy_function(note, inputs, tf.int64, stateful=True,
                                           name="doctor_step")
        return tf.group(train_op, noted, name="doctor_train_op")

    cls.compute_gradients, cls.apply_gradients = compute_gradients, apply_gradients


def _patch_session(rec):
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    original, original_close = session.BaseSession.run, session.BaseSession.close

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        if rec.in_replay:
            return original(self, fetches, feed_dict, options, run_metadata)
        before = len(rec.steps)
        out = original(self, fetches, feed_dict, options, run_metadata)
        if len(rec.steps) > before:
            rec.last_feeds[self.graph] = feed_dict
        if rec.limit_reached:
            _judge(rec, self)
            raise _StepLimit()
        return out

    def close(self):
        if not rec.in_replay and not getattr(self, "_closed", True):
            _judge(rec, self)
        return original_close(self)

    session.BaseSession.run, session.BaseSession.close = run, close


def _op_type(graph, op_name):
    try:
        return graph.get_operation_by_name(op_name).type
    except (KeyError, ValueError):
        return None


def _judge(rec, sess):
    """The verdicts of the sites seen so far, in this session's graph, replayed with the feeds
    of its last step. Made once the steps are done or when the session closes, so that no
    replay touches the emulated register between two steps of the run."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools.advisor import layer_of  # pylint: disable=import-outside-toplevel
    from npu_loss_scale.tools.doctor import verdicts  # pylint: disable=import-outside-toplevel
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    if not rec.pending or sess.graph not in rec.targets:
        return
    loss, grads, scale = rec.targets[sess.graph]
    feed_dict = rec.last_feeds.get(sess.graph)
    pending, rec.pending = rec.pending, []
    targets = ([loss] if loss is not None else []) + grads
    rec.in_replay = True
    try:
        for op_name, direction, dtype, magnitude, earlier, step_scale in pending:
            path = verdicts.reaches(sess.graph, op_name, targets)
            entry = {"op_name": op_name, "direction": direction, "dtype": dtype,
                     "magnitude": _number(magnitude),
                     "fed_by": verdicts.fed_by(sess.graph, op_name, earlier, layer_of)}
            entry["op_type"] = _op_type(sess.graph, op_name)
            rounded = re.match(r"^(.*)_precision/[^/]+$", op_name)  # precision_mode's casts
            if rounded and _op_type(sess.graph, rounded.group(1)):
                entry["rounded_op"] = {"op_name": rounded.group(1),
                                       "op_type": _op_type(sess.graph, rounded.group(1))}
            if path is None:
                entry.update(verdict="unknown", method="reachability",
                             evidence="no op named %s in the train op's graph" % op_name)
            elif not path:
                entry.update(verdict="benign", method="reachability",
                             evidence="no path from %s to the loss or any applied gradient"
                             % op_name)
            else:
                op = sess.graph.get_operation_by_name(op_name)
                dmax = float(np.finfo(dtype).max) if dtype in ("float16", "float32",
                                                               "float64") else None
                try:
                    verdict, evidence = verdicts.replay(
                        lambda f, d: session.BaseSession.run(sess, f, feed_dict=d), op, loss,
                        grads, feed_dict, dmax,
                        None if scale is None else (scale, step_scale))
                except Exception as err:  # pylint: disable=broad-except
                    verdict, evidence = "unknown", "the replay failed: %s" % str(err)[:300]
                entry.update(verdict=verdict, method="reachability+replay",
                             evidence="a path leads from %s to the update; %s"
                             % (op_name, evidence))
            rec.verdicts[_site_key(op_name, direction)] = entry
    finally:
        rec.in_replay = False
    rec.write()


# -- managers, GradScaler, the mode ------------------------------------------------------------------
_KERAS_MODULES = ("npu_loss_scale.frontends._keras3", "npu_loss_scale.frontends._keras2")
_MANAGER_KINDS = {"ExponentialUpdateLossScaleManager": "ascend_exponential",
                  "FixedLossScaleManager": "ascend_fixed"}


def _wrap_init(rec, cls, kind, front_end=None):
    original = cls.__init__
    signature = inspect.signature(original)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        settings = dict(bound.arguments)
        settings.pop("self", None)
        for key, value in rec.settings.items():
            if key in settings:
                settings[key] = value
        if front_end is not None and rec.front_end is None:
            rec.front_end = front_end
        if rec.scaler["kind"] is None:
            rec.scaler = {"kind": kind, "settings": {
                k: v for k, v in settings.items() if isinstance(v, (int, float, bool))}}
        original(self, **settings)

    cls.__init__ = __init__


def _patch_scalers(rec):
    from npu_loss_scale.scaling import managers  # pylint: disable=import-outside-toplevel
    for name, kind in _MANAGER_KINDS.items():
        _wrap_init(rec, getattr(managers, name), kind)
    from npu_loss_scale.frontends import grad_scaler  # pylint: disable=import-outside-toplevel
    cls = grad_scaler.GradScaler
    _wrap_init(rec, cls, "grad_scaler", front_end="GradScaler")
    update = cls.update

    def update_and_record(self, new_scale=None):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        eager = tf.executing_eagerly()
        scale = _scalar(self.get_scale()) if eager else None
        report = getattr(self, "step_report", None) if eager else None
        out = update(self, new_scale)
        if eager:
            overflow = None if report is None else report.get("overflow")
            rec.step(scale, _scalar(self.get_scale()),
                     None if overflow is None else not bool(overflow), None)
            if rec.limit_reached:
                raise _StepLimit()
        return out

    cls.update = update_and_record


def _patch_sat_mode(rec):
    from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
    original = register.set_device_sat_mode

    def set_device_sat_mode(mode):
        caller = inspect.stack(context=0)[1]
        rec.sat_mode_calls.append({"mode": mode, "file": os.path.basename(caller.filename),
                                   "line": caller.lineno})
        return original(mode)

    register.set_device_sat_mode = set_device_sat_mode


def _on_sigterm(signum, frame):  # pylint: disable=unused-argument
    raise _Stopped()


def main(argv=None):
    """``python -m npu_loss_scale.cli.doctor_run RESULT CONFIG -- emulate-args``; exit code 0
    whatever the script did (the result file says it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    result_path, config_path, emulate_argv = argv[0], argv[1], argv[3:]
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    rec = _Recorder(result_path, config)
    _recorder["current"] = rec
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        _patch_optimizer(rec)
        _patch_session(rec)
        _patch_scalers(rec)
        _patch_sat_mode(rec)
        from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
        code = emulate.main(emulate_argv, prog="npu-loss-scale doctor")
        rec.outcome = "completed" if not code else "crashed"
        rec.detail = "the script ended" + ("" if not code else " with exit code %s" % code)
    except _StepLimit:
        rec.outcome, rec.detail = "step_limit", "stopped after %d steps" % len(rec.steps)
    except (KeyboardInterrupt, _Stopped) as err:
        rec.outcome = "stopped"
        rec.detail = "stopped by %s after %d steps" % (
            "SIGINT" if isinstance(err, KeyboardInterrupt) else "SIGTERM", len(rec.steps))
    except SystemExit as err:
        ok = err.code in (None, 0)
        rec.outcome = "completed" if ok else "crashed"
        rec.detail = "the script called sys.exit(%r)" % (err.code,)
    except BaseException:  # pylint: disable=broad-except
        rec.outcome = "crashed"
        rec.detail = "".join(traceback.format_exc().splitlines(True)[-6:])
    for op_name, direction, dtype, magnitude, _, _ in rec.pending:  # never seen in a Session
        rec.verdicts[_site_key(op_name, direction)] = {
            "op_name": op_name, "direction": direction, "dtype": dtype, "op_type": None,
            "magnitude": _number(magnitude), "verdict": "unknown", "method": "reachability",
            "evidence": "the step ran outside a TF1 Session (eager, tf.function or Keras): "
                        "the doctor decides by graph and replay in a Session only"}
    if rec.front_end is None and any(name in sys.modules for name in _KERAS_MODULES):
        rec.front_end = "NpuLossScaleOptimizer (Keras)"   # built; its steps are not recorded
        rec.detail += "; the Keras optimizer's steps are not recorded by the doctor"
    if rec.outcome == "completed" and not rec.steps and rec.front_end is None:
        rec.outcome = "no_loss_scale_optimizer"
        rec.detail = "the script ended without building a loss-scale optimizer or scaler"
    rec.write()
    sys.stdout.flush()
    os._exit(0)  # pylint: disable=protected-access  # no atexit work of the stopped script


if __name__ == "__main__":
    main()
