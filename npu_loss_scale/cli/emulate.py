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
    One of :data:`~npu_loss_scale.device.precision_modes.PRECISION_MODES`: the device's
    ``precision_mode`` for sessions whose config sets none (a config's ``parameter_map["precision_mode"]`` or ``NPURunConfig(precision_mode=...)`` is
    always honoured); without ``--tf1`` also for TF2 code: every eligible op the script builds in a
    ``tf.function`` or Keras model, or runs eagerly (as ``npu_device.global_options()`` does); see
    :mod:`npu_loss_scale.device.precision`.
``--modify-mixlist FILE``
    The device's ``modify_mixlist`` JSON for the whole run: for sessions whose config names none
    and TF2 code whose ``npu_device.global_options()`` names none, it changes which op types a
    mixed ``precision_mode`` (``allow_mix_precision`` and its ``_fp16``/``_bf16`` forms) lowers
    to float16 (checked before the script starts; it sets ``NPU_LOSS_SCALE_MODIFY_MIXLIST``, which
    the script's children inherit); see :mod:`npu_loss_scale.device.precision_lists`.
``--plain``
    No device arithmetic: the CPU stand-in's names only. No ``precision_mode`` is applied, neither
    a session config's, ``NPURunConfig``'s nor ``npu_device.global_options()``'s (the script's
    float32 runs as written); loss scaling and the float-status register still run, and an
    overflow stays IEEE inf/NaN. The baseline the emulated device's cost is measured against
    (``scripts/try_ascend_scripts.py --compare-plain``); it sets ``NPU_LOSS_SCALE_PLAIN``, which
    the script's children inherit. Refused with ``--saturate-every-op``, ``--precision-mode``
    and ``--modify-mixlist``.
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
import contextlib
import os
import runpy
import sys

from npu_loss_scale.ascend.shim import (  # noqa: F401  (public here too)
    NOT_EMULATED_TOPS, SHIM_DIR, SHIM_PACKAGES, install_shim, real_npu_bridge_origin,
    uninstall_shim)
from npu_loss_scale.cli.emulate_args import (  # noqa: F401  (public here too)
    PROG as _PROG, SAT_MODES, SATURATE_DTYPES, build_parser, parse as _parse,
    without_ranks as _without_ranks)


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
    if args.plain:
        from npu_loss_scale.device import (  # no TensorFlow  pylint: disable=import-outside-toplevel
            precision_modes)
        os.environ[precision_modes.PLAIN_ENV_VAR] = "1"
        print("%s: --plain: no precision_mode is applied (float32 as written)" % prog,
              file=sys.stderr)
    if args.report is not None:
        os.environ["NPU_LOSS_SCALE_EMULATE_REPORT"] = os.path.abspath(args.report)
    if args.modify_mixlist is not None:  # the process-wide list, for the script and its children
        from npu_loss_scale.device import (  # pylint: disable=import-outside-toplevel
            precision_lists)
        os.environ[precision_lists.ENV_VAR] = os.path.abspath(args.modify_mixlist)

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
