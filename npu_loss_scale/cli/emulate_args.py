"""The arguments of ``npu-emulate`` (``python -m npu_loss_scale.emulate``,
:mod:`npu_loss_scale.cli.emulate`): the parser, the checks of each option's value, and where the script's own arguments start.
Building or printing the parser imports no TensorFlow."""
import argparse

from npu_loss_scale import __version__
from npu_loss_scale.device.precision_modes import PRECISION_MODES

__all__ = ["PROG", "SAT_MODES", "SATURATE_DTYPES", "build_parser", "parse", "parse_script",
           "script_parser", "without_ranks"]

PROG = "python -m npu_loss_scale.emulate"

SAT_MODES = {"saturation": 0, "inf_nan": 1}
#: The floating dtypes --saturate-every-op can saturate (checked against TensorFlow when used).
SATURATE_DTYPES = ("float16", "bfloat16", "float32", "float64")

_EPILOG = """\
examples:
  # an unmodified Ascend training script, saturation emulated on every float16 op
  %(prog)s --saturate-every-op train.py --batch_size=32

  # the same in INF/NaN mode, TF1 semantics for `import tensorflow as tf`
  %(prog)s --sat-mode inf_nan --tf1 train.py

  # two emulated ranks (HCCL over TensorFlow collectives); output lines start with [rank]
  %(prog)s --ranks 2 train.py

  # the same script without the device's arithmetic: the baseline of the emulation's cost
  %(prog)s --plain --tf1 train.py

  # where overflows start, and a loss-scale advice, for a module run as `python -m`
  %(prog)s --overflow-report overflow.jsonl --advise advice.json -m models.bert.train

Everything after the script (or after -m MODULE) is the script's own: options of this command
go before it. `--` may separate them explicitly. Environment: NPU_LOSS_SCALE_SAT_MODE,
NPU_LOSS_SCALE_BACKEND, NPU_LOSS_SCALE_FUSED_UNSCALE, NPU_LOSS_SCALE_MODIFY_MIXLIST,
NPU_LOSS_SCALE_PLAIN (see docs/cli.md).
"""


def _sat_mode(value):
    """``--sat-mode``'s value: a mode's name or number, as the number the device uses."""
    name = value.strip().lower()
    if name in SAT_MODES:
        return SAT_MODES[name]
    if name in ("0", "1"):
        return int(name)
    raise argparse.ArgumentTypeError("invalid choice: %r (choose from saturation, inf_nan, or "
                                     "their numbers 0, 1)" % value)


def _precision_mode(value):
    if value not in PRECISION_MODES:
        raise argparse.ArgumentTypeError("invalid choice: %r (choose from %s)"
                                         % (value, ", ".join(PRECISION_MODES)))
    return value


def _ranks(value):
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid int value: %r" % value) from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be an int >= 1; got %d" % number)
    return number


def _loss_scale(value):
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid float value: %r" % value) from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive finite number; got %r" % value)
    return number


def script_parser(prog, description, epilog):
    """A parser for a command that runs a script (or ``-m module``) with the script's own
    arguments after it: the usage, ``-m``, ``script`` and ``script_args`` (``npu-emulate``'s and
    ``npu-loss-scale doctor``'s)."""
    parser = argparse.ArgumentParser(
        prog=prog, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] script.py [script args ...]\n"
              "       %(prog)s [options] -m module [module args ...]",
        description=description, epilog=epilog)
    parser.add_argument("-m", dest="as_module", action="store_true",
                        help="run a module as `python -m` does (the first positional is its "
                             "name)")
    parser.add_argument("script", nargs="?", metavar="script.py",
                        help="the script (or, with -m, the module) to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="script args",
                        help="the script's own arguments, passed to it unchanged")
    return parser


def build_parser(prog=PROG):
    """The command's argument parser (no TensorFlow is imported to build or print it)."""
    parser = script_parser(
        prog, "Run an unmodified Ascend TensorFlow script on CPU, with the NPU's float-status "
              "register, saturation mode and precision_mode emulated and npu_bridge / "
              "npu_device / hccl / moxing provided by a CPU stand-in.", _EPILOG)
    parser.add_argument("--version", action="version",
                        version="%(prog)s (npu-loss-scale) " + __version__)

    device = parser.add_argument_group("emulated device")
    device.add_argument("--sat-mode", type=_sat_mode, default=None, metavar="{saturation,inf_nan}",
                        help="overflow mode: saturation (results clamp to +-MAX, the Atlas "
                             "training default) or inf_nan (IEEE inf/NaN); 0 and 1 are "
                             "accepted too. A script's own set_device_sat_mode call still wins.")
    device.add_argument("--saturate-every-op", action="store_true",
                        help="saturate every float16 op the script builds into a graph, as the "
                             "device does (without it overflow stays IEEE inf/NaN on CPU)")
    device.add_argument("--saturate-dtypes", default="float16", metavar="DTYPE[,DTYPE...]",
                        help="the dtypes --saturate-every-op saturates, comma-separated, from "
                             "%s (default: float16)" % ", ".join(SATURATE_DTYPES))
    device.add_argument("--precision-mode", type=_precision_mode, default=None, metavar="MODE",
                        help="precision_mode for sessions whose config sets none and, without "
                             "--tf1, for TF2 code; one of: %s (the device's training default "
                             "is allow_fp32_to_fp16; default here: none, float32 as written)"
                             % ", ".join(PRECISION_MODES))
    device.add_argument("--modify-mixlist", default=None, metavar="FILE",
                        help="the device's modify_mixlist JSON (black-list/white-list/gray-list, "
                             "each with to-add/to-remove op types such as MatMulV2) for sessions "
                             "whose config names none and for TF2 code whose "
                             "npu_device.global_options() names none; it changes what a mixed "
                             "precision_mode (allow_mix_precision...) lowers to float16. Sets "
                             "NPU_LOSS_SCALE_MODIFY_MIXLIST for the script and its children")
    device.add_argument("--plain", action="store_true",
                        help="no device arithmetic: the stand-in names only, every session's "
                             "and npu_device's precision_mode ignored (float32 as written; "
                             "loss scaling and the register still run, overflow stays IEEE "
                             "inf/NaN). The baseline the emulation's cost is measured against; "
                             "not with --saturate-every-op, --precision-mode or "
                             "--modify-mixlist")

    scripts = parser.add_argument_group("script compatibility")
    scripts.add_argument("--tf1", action="store_true",
                         help="TF1 mode: the script's own `import tensorflow as tf` gives "
                              "tensorflow.compat.v1 with v2 behaviour off; on TensorFlow 1.x a "
                              "no-op")

    ranks = parser.add_argument_group("several ranks")
    ranks.add_argument("--ranks", "-np", dest="ranks", type=_ranks, default=None, metavar="N",
                       help="run the script as N emulated ranks: N processes with RANK_ID, "
                            "RANK_SIZE, DEVICE_ID set and HCCL over TensorFlow collective ops; "
                            "each output line starts with [rank]; if a rank fails the others "
                            "are stopped")

    diagnostics = parser.add_argument_group("diagnostics")
    diagnostics.add_argument("--report", default=None, metavar="FILE",
                             help="at exit, write a JSON summary of the NPULossScaleOptimizers "
                                  "built and the steps they applied and skipped to FILE")
    diagnostics.add_argument("--overflow-report", default=None, metavar="FILE",
                             help="write one JSON line per overflowed step to FILE: which ops "
                                  "saturated, forward or backward, dtype, magnitude")
    diagnostics.add_argument("--advise", default=None, metavar="FILE",
                             help="observe every saturation site while the script runs, then "
                                  "print a loss-scale advice and write it as JSON to FILE")
    diagnostics.add_argument("--advise-loss-scale", type=_loss_scale, default=1.0, metavar="S",
                             help="the fixed loss scale the observed script runs at (default 1)")
    return parser


def _script_position(argv, args):
    """Index in ``argv`` of the script (or module) name: the script's arguments follow it."""
    i = len(argv) - len(args.script_args) - 1
    while i >= 0 and argv[i] != args.script:  # argparse may have eaten a `--` after it
        i -= 1
    return i


def parse_script(parser, argv, missing="the script to run is missing"):
    """``parser``'s options from ``argv`` (a :func:`script_parser`), refusing a missing script or
    module (``missing`` says what to give); ``script_args`` are the script's own arguments as
    given."""
    args = parser.parse_args(argv)
    if args.script is None:
        parser.error("-m needs a module name to run (-m package.module [args ...])"
                     if args.as_module else missing)
    args.script_args = argv[_script_position(argv, args) + 1:]
    return args


def parse(argv, prog=PROG):
    """The parsed options; ``script``/``module`` and ``script_args`` say what to run."""
    parser = build_parser(prog)
    args = parse_script(parser, argv)
    if args.plain:
        given = [name for name, value in (("--saturate-every-op", args.saturate_every_op),
                                          ("--precision-mode", args.precision_mode),
                                          ("--modify-mixlist", args.modify_mixlist)) if value]
        if given:
            parser.error("--plain runs the script without the device's arithmetic; %s would "
                         "emulate it (give either --plain or the device's options)"
                         % " and ".join(given))
    if args.saturate_every_op:
        from npu_loss_scale.device import (  # imports TensorFlow  pylint: disable=import-outside-toplevel
            saturation)
        try:
            saturation._dtype_set(tuple(  # pylint: disable=protected-access
                d.strip() for d in args.saturate_dtypes.split(",") if d.strip()))
        except (TypeError, ValueError) as err:
            parser.error("--saturate-dtypes must be a comma-separated list of floating dtypes "
                         "(%s); got %r (%s)"
                         % (", ".join(SATURATE_DTYPES), args.saturate_dtypes, err))
    if args.modify_mixlist is not None:
        from npu_loss_scale.device import (  # no TensorFlow  pylint: disable=import-outside-toplevel
            precision_lists)
        try:
            precision_lists.load_modify_mixlist(args.modify_mixlist, "--modify-mixlist")
        except ValueError as err:
            parser.error(str(err))
    args.module = args.script if args.as_module else None
    if args.as_module:
        args.script = None
    return args


def without_ranks(argv):
    """``argv`` without emulate's own ``--ranks N`` (the script's arguments are kept as they
    are): what each rank runs."""
    own_end = _script_position(argv, build_parser().parse_args(argv))
    out, i = [], 0
    while i < own_end:
        token = argv[i]
        if token in ("--ranks", "-np"):
            i += 2
            continue
        if not token.startswith(("--ranks=", "-np=")):
            out.append(token)
        i += 1
    return out + argv[own_end:]
