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
        self.judging = []      # the sites of the replay under way
        self.judge = config.get("judge", True)   # False: a fix's re-run, which replays nothing
        self.settings_precision = config.get("precision_mode")
        # a float16 op or a rounding to float16 in a train op's graph (not precision_mode's)
        self.float16_graph = False
        self.limit_reached = False
        self.in_replay = False
        self.finished = False        # the main thread's last write is under way
        self.stop_requested = None   # "SIGTERM" or "SIGINT" once the run is asked to end
        self.checkpoints_written, self.checkpoint_states, self.checkpoints_ignored = [], {}, []
        self.outcome, self.detail = None, ""

    # -- the result file ---------------------------------------------------------------------
    def write(self):
        with self.lock:
            from npu_loss_scale.device import register  # pylint: disable=import-outside-toplevel
            # copies: the stop watchdog writes while the main thread may still be replaying
            body = {"outcome": self.outcome, "outcome_detail": self.detail, "stack": stack(),
                    "front_end": self.front_end, "scaler": dict(self.scaler),
                    "steps": list(self.steps), "sat_mode_calls": list(self.sat_mode_calls),
                    "verdicts": dict(self.verdicts),
                    "effective_sat_mode": register.get_device_sat_mode(),
                    "checkpoints_written": list(self.checkpoints_written),
                    "checkpoint_states": dict(self.checkpoint_states),
                    "checkpoints_ignored": list(self.checkpoints_ignored),
                    "float16_graph": self.float16_graph}
            tmp = self.result_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump(body, out)
            os.replace(tmp, self.result_path)

    def mark_not_judged(self):
        """The sites of the replay under way that a stopped run did not judge: unknown."""
        for site in list(self.judging) + list(self.pending):
            key = site_key(site[0], site[1])
            if key not in self.verdicts:
                self.verdicts[key] = {
                    "op_name": site[0], "direction": site[1], "dtype": site[2],
                    "op_type": None, "magnitude": number(site[3]), "verdict": "unknown",
                    "method": "none",
                    "evidence": "not judged: the run was stopped (%s) before its replay "
                                "decided this site" % self.stop_requested}
        self.pending = []

    # -- one step -------------------------------------------------------------------------------
    def step(self, loss_scale, next_loss_scale, finite, loss, max_safe_scale=None):
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
            if max_safe_scale is not None:
                self.steps[-1]["max_safe_scale"] = number(max_safe_scale)
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
