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
import json
import os
import sys
import traceback

from npu_loss_scale.cli import doctor_checkpoints, doctor_hooks, doctor_hooks_tf2, doctor_stop
from npu_loss_scale.cli.doctor_record import Recorder, StepLimit, Stopped, number, site_key

__all__ = ["main"]



def main(argv=None):
    """``python -m npu_loss_scale.cli.doctor_run RESULT CONFIG -- emulate-args``; exit code 0
    whatever the script did (the result file says it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    result_path, config_path, emulate_argv = argv[0], argv[1], argv[3:]
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    rec = Recorder(result_path, config)
    doctor_stop.install(rec)
    try:
        doctor_hooks.install(rec)
        doctor_checkpoints.install(rec, config)
        doctor_hooks_tf2.install(rec)
        from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
        code = emulate.main(emulate_argv, prog="npu-loss-scale doctor")
        rec.outcome = "completed" if not code else "crashed"
        rec.detail = "the script ended" + ("" if not code else " with exit code %s" % code)
    except StepLimit:
        rec.outcome, rec.detail = "step_limit", "stopped after %d steps" % len(rec.steps)
    except (KeyboardInterrupt, Stopped) as err:
        rec.outcome = "stopped"
        rec.detail = "stopped by %s after %d steps" % (
            rec.stop_requested or ("SIGINT" if isinstance(err, KeyboardInterrupt) else "SIGTERM"),
            len(rec.steps))
    except SystemExit as err:
        ok = err.code in (None, 0)
        rec.outcome = "completed" if ok else "crashed"
        rec.detail = "the script called sys.exit(%r)" % (err.code,)
    except BaseException:  # pylint: disable=broad-except
        rec.outcome = "crashed"
        rec.detail = "".join(traceback.format_exc().splitlines(True)[-6:])
    if rec.stop_requested and rec.outcome != "stopped":  # the script turned the stop into
        rec.outcome = "stopped"                           # an error or its own exit
        rec.detail = "stopped by %s after %d steps" % (rec.stop_requested, len(rec.steps))
    for op_name, direction, dtype, magnitude, _, _ in (rec.pending if rec.judge else []):
        # never seen in a Session (a fix's re-run judges nothing)
        entry = {"op_name": op_name, "direction": direction, "dtype": dtype,
                 "magnitude": number(magnitude)}
        entry.update(doctor_hooks_tf2.site_verdict(op_name, rec.front_end))
        rec.verdicts[site_key(op_name, direction)] = entry
    if rec.outcome == "completed" and not rec.steps and rec.front_end is None:
        rec.outcome = "no_loss_scale_optimizer"
        rec.detail = "the script ended without building a loss-scale optimizer or scaler"
    rec.detail += doctor_checkpoints.describe(rec.checkpoints_ignored)
    with rec.lock:
        rec.finished = True
        rec.write()
    sys.stdout.flush()
    os._exit(0)  # pylint: disable=protected-access  # no atexit work of the stopped script


if __name__ == "__main__":
    main()
