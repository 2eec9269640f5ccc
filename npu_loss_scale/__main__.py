"""``npu-loss-scale`` (also ``python -m npu_loss_scale``): the package's command.

Subcommands::

    npu-loss-scale report [--json]     the environment report for bug reports
    npu-loss-scale build-kernel [--rebuild]
                                       build the fused unscale-and-check kernel now
    npu-loss-scale emulate ...         the same as npu-emulate ...
    npu-loss-scale doctor [options] script.py [args ...]
                                       whether each overflow of the script matters, and a
                                       fix checked on the emulated device

Without a subcommand it prints its help. See docs/cli.md.
"""
import argparse
import json
import sys

from npu_loss_scale import __version__

PROG = "npu-loss-scale"

_EPILOG = """\
examples:
  %(prog)s report                  # paste its output into a bug report
  %(prog)s report --json
  %(prog)s build-kernel            # build the fused kernel once, before training
  %(prog)s emulate --sat-mode inf_nan train.py --steps=10
  %(prog)s doctor --steps 20 train.py    # which overflows matter, fixes verified
"""


def build_parser(prog=PROG):
    """The command's argument parser (building or printing it imports no TensorFlow)."""
    parser = argparse.ArgumentParser(
        prog=prog, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="npu-loss-scale: Ascend NPU loss scaling for TensorFlow, with a CPU "
                    "emulation of the device.", epilog=_EPILOG)
    parser.add_argument("--version", action="version",
                        version="%(prog)s " + __version__)
    commands = parser.add_subparsers(dest="command", metavar="{report,build-kernel,emulate,doctor}")
    report = commands.add_parser(
        "report", help="print the environment report (versions, backend, saturation mode, "
                       "fused kernel, Horovod, npu_bridge) for a bug report",
        description="Print what a bug report needs about this environment. A piece that is "
                    "missing is reported as such; the command does not fail on it.")
    report.add_argument("--json", action="store_true", help="one JSON object instead of text")
    build = commands.add_parser(
        "build-kernel", help="build (and load) the fused unscale-and-check kernel now, so no "
                             "training run waits about 20 s for it",
        description="Build the fused unscale-and-check kernel for the TensorFlow this Python "
                    "imports, into the cache ($NPU_LOSS_SCALE_CACHE, default "
                    "~/.cache/npu_loss_scale), and load it to check it.")
    build.add_argument("--rebuild", action="store_true",
                       help="delete the cached library and any remembered failed build first")
    commands.add_parser("emulate", add_help=False,
                        help="run an Ascend script on CPU: the same as npu-emulate (see "
                             "`%s emulate --help`)" % prog)
    commands.add_parser("doctor", add_help=False,
                        help="run a script for a few loss-scale steps in both overflow modes "
                             "and report whether each overflow can change the update, with "
                             "fixes verified (see `%s doctor --help`)" % prog)
    return parser


def _report(args):
    from npu_loss_scale.cli import env_report  # pylint: disable=import-outside-toplevel
    fields = env_report.collect()
    if args.json:
        print(json.dumps(dict(fields), indent=2))
    else:
        print(env_report.format_report(fields))
    return 0


def _build_kernel(args):
    from npu_loss_scale._internal import (  # pylint: disable=import-outside-toplevel
        kernels as _kernels)
    from npu_loss_scale._internal.messages import (  # pylint: disable=import-outside-toplevel
        logged_to_stderr)
    try:
        with logged_to_stderr():  # the build's start and end
            path = _kernels.build_unscale_check(rebuild=args.rebuild)
    except Exception as err:  # pylint: disable=broad-except  # OSError, or TF's NotFoundError
        print("%s build-kernel: the fused kernel did not build: %s" % (PROG, err),
              file=sys.stderr)
        return 1
    print("fused unscale-and-check kernel: %s" % path)
    return 0


def main(argv=None):
    """Entry point of ``npu-loss-scale`` and ``python -m npu_loss_scale``; the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "emulate":  # everything after it is emulate's, --help included
        from npu_loss_scale.cli import emulate  # pylint: disable=import-outside-toplevel
        return emulate.main(argv[1:], prog="%s emulate" % PROG)
    if argv and argv[0] == "doctor":  # likewise
        from npu_loss_scale.cli import doctor  # pylint: disable=import-outside-toplevel
        return doctor.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return {"report": _report, "build-kernel": _build_kernel}[args.command](args)


__all__ = [
    "PROG", "build_parser", "main",
]


if __name__ == "__main__":
    sys.exit(main())
