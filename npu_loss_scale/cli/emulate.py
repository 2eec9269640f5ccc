"""Run an unmodified Ascend TensorFlow script on a CPU, with the NPU emulated.

Usage::

    npu-emulate [options] script.py [script args ...]
    npu-emulate [options] -m package.module [module args ...]

(``npu-emulate`` is ``python -m npu_loss_scale.emulate``.) Everything after the script or the
module's name is the script's own, as with ``python`` and ``torchrun``. ``--help`` lists every
option and accepted value; docs/cli.md has them with examples. Options (before the script):

``--version``
    The package's version.
``--sat-mode {saturation,inf_nan}``
    The emulated device's overflow mode: ``saturation`` (default, as on an Atlas training device) or
    ``inf_nan``; the device's numbers 0 and 1 are accepted too. Sets ``NPU_LOSS_SCALE_SAT_MODE`` for
    the script (and its children); a script's own ``npu_plugin.set_device_sat_mode`` call still
    wins.
``--saturate-every-op``
    Saturate every float16 op the script builds into a graph (see
    :func:`npu_loss_scale.device.saturation.saturate_every_op`): overflow becomes ±65504 and only the
    emulated float-status register knows, as on the device. Without it, overflow on the CPU stays
    IEEE inf/NaN, which the emulation backend detects as well.
``--saturate-dtypes float16[,float32...]``
    The dtypes ``--saturate-every-op`` saturates (default: float16).
``--precision-mode MODE``
    One of :data:`PRECISION_MODES`: the device's ``precision_mode`` for sessions whose config sets
    none (a config's ``parameter_map["precision_mode"]`` or ``NPURunConfig(precision_mode=...)`` is
    always honoured); without ``--tf1`` also for TF2 code: every eligible op the script builds in a
    ``tf.function`` or Keras model, or runs eagerly (as ``npu_device.global_options()`` does); see
    :mod:`npu_loss_scale.device.precision`.
``--report FILE``
    At exit, write to FILE a JSON summary of the shim's ``NPULossScaleOptimizer``s: how many
    were built, how many train ops they built and how many steps those applied and skipped (it
    sets ``NPU_LOSS_SCALE_EMULATE_REPORT``; see the shim's ``npu_loss_scale_optimizer`` module).
    Off by default.
``--overflow-report FILE``
    Overflow localisation (:mod:`npu_loss_scale.device.localisation`): one JSON line per overflowed
    step in FILE — which ops saturated, forward or backward, dtype, magnitude, in execution
    order, the first marked.
``--advise FILE`` [``--advise-loss-scale S``]
    Loss-scale advisor (:mod:`npu_loss_scale.tools.advisor`): observe every saturation site while
    the script runs (at its *fixed* loss scale S, default 1), then print the advice and write
    it as JSON to FILE.
``--ranks N`` (or ``-np N``)
    Run the script as N emulated ranks: N processes with the environment Ascend launchers set
    and HCCL (npu_bridge's ``hccl_ops``, npu_device's ``distribute``) over TensorFlow collective
    ops between them; see :mod:`npu_loss_scale.ascend.ranks`. Each line a rank prints starts
    with ``[<rank>] `` (as ``mpirun --tag-output`` marks them). If a rank fails, the others are
    stopped.
``--tf1``
    TF1 mode: ``import tensorflow as tf`` in the script's own files gives TF1 behaviour; see
    :mod:`npu_loss_scale.ascend.tf1`. Without it the script's own files still get the Keras
    module paths that moved since TF 2.6 (``keras.backend_config``,
    ``keras.utils.control_flow_util``, ``tensorflow.python.keras.*``: see
    :func:`npu_loss_scale.ascend.tf1.moved_keras_module`). In both modes the TF 2.4 names
    later TensorFlow dropped are added back (``Graph._last_id``, which copies of the adapter's
    ``npu_ops.py`` read, ``tf.keras.mixed_precision.experimental``, which model-garden code
    sets its policy through): :mod:`npu_loss_scale.ascend.tf24`. On TensorFlow 1.x ``--tf1``
    is accepted and changes nothing: the script's ``tensorflow`` is TF1 itself, with the real
    ``tensorflow.contrib``, so no name is mapped in either mode and sessions, ranks and
    ``--precision-mode`` behave as in TF1 mode.

When no real ``npu_bridge`` is importable, the folder of the CPU shim (packages ``npu_bridge``,
``hccl``, ``npu_device``, and ``moxing``, ModelArts' file library on local paths) is appended to
the *end* of ``sys.path``, so

    from npu_bridge.npu_init import *
    from npu_bridge.estimator.npu.npu_loss_scale_optimizer import NPULossScaleOptimizer
    from npu_bridge.estimator.npu.npu_loss_scale_manager import (
        FixedLossScaleManager, ExponentialUpdateLossScaleManager)

resolve to :mod:`npu_loss_scale` (see the shim's package docstring for every name provided).
A real ``npu_bridge`` is never shadowed: when one is importable the shim is not installed at all
(a note says so on stderr), and being last on ``sys.path`` it cannot win over one anyway.

Example::

    python -m npu_loss_scale.emulate --saturate-every-op run_pretraining.py --npu_bert_loss_scale=0
"""
import argparse
import contextlib
import os
import runpy
import sys

from npu_loss_scale import __version__
from npu_loss_scale.ascend.shim import (  # noqa: F401  (public here too)
    NOT_EMULATED_TOPS, SHIM_DIR, SHIM_PACKAGES, install_shim, real_npu_bridge_origin,
    uninstall_shim)
from npu_loss_scale.device.precision_modes import PRECISION_MODES

_PROG = "python -m npu_loss_scale.emulate"

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

  # where overflows start, and a loss-scale advice, for a module run as `python -m`
  %(prog)s --overflow-report overflow.jsonl --advise advice.json -m models.bert.train

Everything after the script (or after -m MODULE) is the script's own: options of this command
go before it. `--` may separate them explicitly. Environment: NPU_LOSS_SCALE_SAT_MODE,
NPU_LOSS_SCALE_BACKEND, NPU_LOSS_SCALE_FUSED_UNSCALE (see docs/cli.md).
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


def build_parser(prog=_PROG):
    """The command's argument parser (no TensorFlow is imported to build or print it)."""
    parser = argparse.ArgumentParser(
        prog=prog, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] script.py [script args ...]\n"
              "       %(prog)s [options] -m module [module args ...]",
        description="Run an unmodified Ascend TensorFlow script on CPU, with the NPU's "
                    "float-status register, saturation mode and precision_mode emulated and "
                    "npu_bridge / npu_device / hccl / moxing provided by a CPU stand-in.",
        epilog=_EPILOG)
    parser.add_argument("--version", action="version",
                        version="%(prog)s (npu-loss-scale) " + __version__)
    parser.add_argument("-m", dest="as_module", action="store_true",
                        help="run a module as `python -m` does (the first positional is its "
                             "name)")
    parser.add_argument("script", nargs="?", metavar="script.py",
                        help="the script (or, with -m, the module) to run")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="script args",
                        help="the script's own arguments, passed to it unchanged")

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


def _parse(argv, prog=_PROG):
    """The parsed options; ``script``/``module`` and ``script_args`` say what to run."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.script is None:
        parser.error("-m needs a module name to run (-m package.module [args ...])"
                     if args.as_module else "the script to run is missing")
    args.script_args = argv[_script_position(argv, args) + 1:]
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
    args.module = args.script if args.as_module else None
    if args.as_module:
        args.script = None
    return args


def _without_ranks(argv):
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


def _invoked_as():
    """The program name for messages: ``npu-emulate`` when run through that console script."""
    name = os.path.basename(sys.argv[0] if sys.argv else "")
    return "npu-emulate" if name.startswith("npu-emulate") else _PROG


def main(argv=None, prog=None):
    """Entry point of ``npu-emulate`` and ``python -m npu_loss_scale.emulate``; returns the exit
    code (or raises SystemExit as the script does). ``prog`` names the command in messages."""
    prog = prog or (_invoked_as() if argv is None else _PROG)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv, prog)
    from npu_loss_scale._internal.messages import (  # pylint: disable=import-outside-toplevel
        logged_to_stderr)
    with logged_to_stderr():  # the package's INFO messages (a kernel build, files written)
        return _run(args, argv, prog)


def _run(args, argv, prog):
    """Runs what :func:`main` parsed; the exit code."""
    if args.ranks is not None and args.ranks > 1:
        from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
        return ranks.launch(args.ranks, _without_ranks(argv))
    if args.sat_mode is not None:
        os.environ["NPU_LOSS_SCALE_SAT_MODE"] = str(args.sat_mode)
    if args.report is not None:
        os.environ["NPU_LOSS_SCALE_EMULATE_REPORT"] = os.path.abspath(args.report)

    if args.script is not None:
        script = os.path.abspath(args.script)
        if not os.path.exists(script):
            print("%s: no such script: %s" % (prog, args.script), file=sys.stderr)
            return 2
        sys.argv = [args.script] + args.script_args
        sys.path[0] = os.path.dirname(script)  # as `python script.py` does
    else:
        sys.argv = [args.module] + args.script_args
        sys.path[0] = os.getcwd()  # as `python -m module` does

    from npu_loss_scale._internal.compat.scripts import (  # imports TensorFlow  pylint: disable=import-outside-toplevel
        NATIVE_TF1)
    if args.tf1 and NATIVE_TF1:
        print("%s: --tf1 changes nothing on TensorFlow 1.15 (its API is TF1's)" % prog,
              file=sys.stderr)
    tf1_mode = args.tf1 or NATIVE_TF1
    shim_in_use = install_shim()
    if not shim_in_use:
        print("%s: using the real npu_bridge at %s; the CPU shim is not installed"
              % (prog, real_npu_bridge_origin()), file=sys.stderr)

    if shim_in_use:  # the device applies precision_mode itself; the emulation does it on CPU
        from npu_loss_scale.device import (  # imports TensorFlow  pylint: disable=import-outside-toplevel
            precision)
        precision.set_default_precision_mode(args.precision_mode)
        precision.install_session_hook()
        if args.precision_mode is not None and not tf1_mode:
            precision.install_op_precision(args.precision_mode)
        from npu_loss_scale.ascend import ranks  # pylint: disable=import-outside-toplevel
        # a rank of `--ranks N`: sessions run on this task's server; in TF2 mode that is the
        # eager context's, which joins before the script can create a variable
        ranks.join(eager=not tf1_mode)

    if not NATIVE_TF1:  # on TensorFlow 1.x the script's TensorFlow is TF1 itself: nothing to map
        from npu_loss_scale.ascend import tf1  # pylint: disable=import-outside-toplevel
        if args.tf1:
            tf1.enable([sys.path[0]])
        else:
            # TF2 scripts of the same corpus import Keras modules from their TF 2.6 locations
            tf1.enable_keras_paths([sys.path[0]])  # and TF 2.4's names

    if args.saturate_every_op:
        from npu_loss_scale.device import saturation  # imports TensorFlow
        dtypes = tuple(d.strip() for d in args.saturate_dtypes.split(",") if d.strip())
        context = saturation.saturate_every_op(dtypes)
    else:
        context = contextlib.nullcontext()
    tools = contextlib.nullcontext()
    if args.overflow_report is not None or args.advise is not None:
        from npu_loss_scale.cli import (  # imports TensorFlow  pylint: disable=import-outside-toplevel
            report_files)
        tools = report_files.entry_point_tools(args.overflow_report, args.advise,
                                               args.advise_loss_scale)
    with tools, context:
        if args.script is not None:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    return 0


__all__ = [
    "SHIM_DIR", "SHIM_PACKAGES", "real_npu_bridge_origin", "NOT_EMULATED_TOPS", "install_shim",
    "uninstall_shim", "SAT_MODES", "SATURATE_DTYPES", "build_parser", "main",
]


if __name__ == "__main__":
    sys.exit(main())
