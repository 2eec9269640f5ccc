#!/usr/bin/env bash
# The main job, from a fresh machine: fine-tune a real BERT (MiniLM-L6) in fp32 and in mixed fp16
# on the CPU emulation of an Ascend device, through an Estimator with the Ascend BERT loss-scale
# flags (see examples/bert/README.md). Everything is written to out/bert/ (--out DIR or
# NLS_BERT_OUT to change it): RESULTS.md, loss_scale.png, each run's folder and log. The copies
# in examples/bert/ change only with --update-tracked. Other arguments are absl flags for both
# runs.
set -euo pipefail
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/run_bert.sh" "$@"
