#!/usr/bin/env bash
# The main job, from a fresh machine: fine-tune a real BERT (MiniLM-L6) in fp32 and in mixed fp16
# on the CPU emulation of an Ascend device, through an Estimator with the Ascend BERT loss-scale
# flags (see examples/bert/README.md). Extra absl flags are passed to both runs.
set -euo pipefail
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/run_bert.sh" "$@"
