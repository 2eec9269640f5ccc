"""``python -m npu_loss_scale.emulate script.py ...``: runs an unmodified Ascend script on the
CPU (the command is :mod:`npu_loss_scale.cli.emulate`; ``npu-emulate`` is the same). Importing
this path is deprecated: it is the module of the new path, and warns."""
import sys

if __name__ == "__main__":
    from npu_loss_scale.cli.emulate import main
    sys.exit(main())
else:
    import importlib

    from npu_loss_scale._internal import moved

    moved.warn_moved(__name__, "npu_loss_scale.cli.emulate", __file__)
    sys.modules[__name__] = importlib.import_module("npu_loss_scale.cli.emulate")
