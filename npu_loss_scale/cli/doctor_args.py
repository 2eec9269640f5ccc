"""The arguments of ``npu-loss-scale doctor`` (:mod:`npu_loss_scale.cli.doctor`): the parser
and the checks that refuse a bad value, or a report folder that cannot be written, before the
script starts. Building or printing the parser imports no TensorFlow."""
import argparse
import os

from npu_loss_scale.cli.emulate_args import (  # the checks emulate applies too
    _precision_mode, parse_script, script_parser)
from npu_loss_scale.tools.doctor.report import MODES

__all__ = ["PROG", "build_parser", "parse", "DEFAULT_STEPS", "DEFAULT_OUT"]

PROG = "npu-loss-scale doctor"
DEFAULT_STEPS = 20
DEFAULT_OUT = "doctor-report"

_EPILOG = """\
examples:
  # 20 loss-scale steps in saturation and in INF/NaN mode, fixes verified, report in ./doctor-report
  %(prog)s train.py --batch_size=32

  # 50 steps, saturation mode only, the device's float16 matmuls, no re-runs
  %(prog)s --steps 50 --modes saturation --precision-mode allow_mix_precision --no-verify train.py

Writes DIR/doctor.json (schema npu-loss-scale/doctor-report, version 1), DIR/doctor.html when
the [doctor] extra's libraries are installed, one log per run, and prints a summary.
"""


def _steps(value):
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid int value: %r (the number of loss-scale "
                                         "steps to run, an int >= 1)" % value) from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be an int >= 1 (the number of loss-scale steps "
                                         "to run); got %d" % number)
    return number


def _modes(value):
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in MODES]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            "invalid value %r: a comma-separated list of distinct modes from %s (e.g. "
            "saturation,inf_nan)" % (value, ", ".join(MODES)))
    return names


def _timeout(value):
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid float value: %r (seconds per run, > 0)"
                                         % value) from None
    if not number > 0:
        raise argparse.ArgumentTypeError("must be a number of seconds > 0; got %r" % value)
    return number


def build_parser(prog=PROG):
    """The command's argument parser."""
    parser = script_parser(
        prog, "Run a training script on the emulated device for a few loss-scale steps, once "
              "per overflow mode, and say for every overflow whether it can change the update, "
              "with a fix checked by a re-run.", _EPILOG)
    parser.add_argument("--steps", type=_steps, default=DEFAULT_STEPS, metavar="N",
                        help="stop each run after N loss-scale steps (default %d)"
                        % DEFAULT_STEPS)
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help="the report's folder (default ./%s)" % DEFAULT_OUT)
    parser.add_argument("--modes", type=_modes, default=list(MODES), metavar="MODE[,MODE]",
                        help="the overflow modes to run: saturation, inf_nan or both "
                             "(default saturation,inf_nan)")
    parser.add_argument("--precision-mode", type=_precision_mode, default=None, metavar="MODE",
                        help="the device's precision_mode for the runs (as npu-emulate's "
                             "--precision-mode; default: none, the script's dtypes as written)")
    parser.add_argument("--no-verify", action="store_true",
                        help="do not re-run the script to verify the fixes")
    parser.add_argument("--tf1", action="store_true",
                        help="TF1 mode for the script's `import tensorflow as tf` (as "
                             "npu-emulate --tf1)")
    parser.add_argument("--timeout", type=_timeout, default=None, metavar="SECONDS",
                        help="stop a run that takes longer (its outcome: stopped)")
    return parser


def _check_out(parser, out):
    """Refuses a report folder that cannot be made or written, before the script starts."""
    path = os.path.abspath(out)
    if os.path.exists(path) and not os.path.isdir(path):
        parser.error("--out must be a folder the report can be written to; %r is a file" % out)
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".doctor-write-check")
        with open(probe, "w", encoding="utf-8"):
            pass
        os.remove(probe)
    except OSError as err:
        parser.error("--out must be a folder the report can be written to; %r cannot be "
                     "written (%s)" % (out, err.strerror or err))
    return path


def parse(argv, prog=PROG):
    """The parsed options; refuses bad values, a missing script and an unwritable --out."""
    parser = build_parser(prog)
    args = parse_script(parser, argv,
                        missing="the script to run is missing (script.py or -m module)")
    if not args.as_module and not os.path.isfile(args.script):
        parser.error("no such script: %r (give a Python file, or -m and a module name)"
                     % args.script)
    args.out = _check_out(parser, args.out)
    return args
