#!/usr/bin/env bash
# The main job, from a fresh machine: set up the TF 2.15 environment and run the fp16 training
# example on the CPU emulation of an Ascend device.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup_env.sh tf215
TF_CPP_MIN_LOG_LEVEL=2 .venv/tf215/bin/python examples/train_small_fp16.py "$@"
