"""What one run of ``npu-loss-scale doctor`` records (:mod:`npu_loss_scale.cli.doctor_run`): the
steps, the sites each step overflowed in, the scaler and the mode calls, written to the run's
result file after every step and at the end; and the two exceptions that end a run past the
script's own ``except Exception``."""
import json
import math
import os
import sys
import threading

__all__ = ["StepLimit", "Stopped", "Recorder", "number", "scalar", "site_key"]


class StepLimit(BaseException):
    """Raised once the requested steps ran: ends the script past its ``except Exception``."""


class Stopped(BaseException):
    """SIGTERM, as SIGINT's KeyboardInterrupt."""


def number(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else ("nan" if math.isnan(value) else
                                               ("inf" if value > 0 else "-inf"))


class Recorder:  # pylint: disable=too-many-instance-attributes
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
            body = {"outcome": self.outcome, "outcome_detail": self.detail, "stack": stack(),
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
                    key = site_key(site.op_name, site.direction)
                    if key not in self.verdicts and (site.op_name, site.direction) not in \
                            [p[:2] for p in self.pending]:
                        self.pending.append((site.op_name, site.direction, site.dtype,
                                             site.magnitude,
                                             [s.op_name for s in record.sites[:site.order]],
                                             scalar(loss_scale)))
            self.steps.append({
                "step": len(self.steps) + 1, "loss_scale": number(loss_scale),
                "next_loss_scale": number(next_loss_scale),
                "skipped": None if finite is None else not bool(finite),
                "loss": number(loss), "sites": sites})
            if len(self.steps) >= self.steps_wanted:
                self.limit_reached = True
            self.write()


def stack():
    """The versions the run imported (TensorFlow is imported by then; Keras only if the script
    imported it)."""
    import platform  # pylint: disable=import-outside-toplevel
    tf = sys.modules.get("tensorflow")
    keras = sys.modules.get("keras")
    return {"tensorflow": getattr(tf, "__version__", None), "python": platform.python_version(),
            "keras": getattr(keras, "__version__", None)}


def site_key(op_name, direction):
    return "%s|%s" % (op_name, direction)




def scalar(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
