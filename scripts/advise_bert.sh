#!/usr/bin/env bash
# The loss-scale advisor checked on the BERT main job (examples/bert):
#
#   bash scripts/advise_bert.sh [--observe-steps N] [--train-steps M] [extra absl flags...]
#
#   1. observation: N fp16 steps at a fixed loss scale of 1 through the emulate entry point
#      (`--advise`), which prints the per-layer report and writes advice.json;
#   2. two fp16 runs of M applied steps with dynamic loss scaling (the Ascend BERT flags,
#      --npu_bert_loss_scale=0): one from 2**32 (the scripts' default), one from the advised
#      init_loss_scale;
#   3. prints, for both, the skipped steps and the held-out accuracy.
#
# Defaults: N = 30, M = 200 (the main job's length). Needs the set-up of scripts/run_bert.sh
# (it runs `run_bert.sh --setup-only` first, into $PYTHON_BERT if set). Output in
# $NLS_BERT_OUT/advise (default out/bert/advise).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
observe_steps=30
train_steps=200
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --observe-steps) observe_steps="$2"; shift 2 ;;
    --observe-steps=*) observe_steps="${1#*=}"; shift ;;
    --train-steps) train_steps="$2"; shift 2 ;;
    --train-steps=*) train_steps="${1#*=}"; shift ;;
    *) pass+=("$1"); shift ;;
  esac
done
out="${NLS_BERT_OUT:-$here/out/bert}/advise"
py="${PYTHON_BERT:-${NLS_VENV_ROOT:-$here/.venv}/tf215/bin/python}"
log() { echo "[advise_bert] $*"; }

bash "$here/scripts/run_bert.sh" --setup-only
export PYTHONUNBUFFERED=1 NPU_LOSS_SCALE_BACKEND=emulation
# the data: the pinned sdist in $NLS_BERT_CACHE (default .cache/bert), found by the example
common=(--precision=fp16 --progress_bar=false)
rm -rf "$out"
mkdir -p "$out"

log "1. observing $observe_steps fp16 steps at a fixed loss scale of 1"
"$py" -m npu_loss_scale.emulate --advise "$out/advice.json" --advise-loss-scale 1 \
  "$here/examples/bert/run_classifier.py" "${common[@]}" --npu_bert_loss_scale=1 \
  --train_steps="$observe_steps" --output_dir="$out/observe" ${pass[@]+"${pass[@]}"}
advised=$("$py" -c "import json,sys; a=json.load(open(sys.argv[1])); print(repr(float(a['init_loss_scale'])))" "$out/advice.json")
log "advised init_loss_scale: $advised"

for start in 4294967296.0 "$advised"; do
  log "2. fp16, dynamic loss scaling from $start, $train_steps applied steps"
  "$py" "$here/examples/bert/run_classifier.py" "${common[@]}" --npu_bert_loss_scale=0 \
    --init_loss_scale_value="$start" --train_steps="$train_steps" \
    --output_dir="$out/from_$start" ${pass[@]+"${pass[@]}"}
done

"$py" - "$out" "$advised" "$train_steps" "$observe_steps" <<'PY'
import json, os, sys
out, advised, steps, observed = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
print("[advise_bert] 3. fp16 BERT, %s applied steps, advice from %s observed steps" % (steps, observed))
print("%-28s %14s %10s %14s" % ("initial loss scale", "skipped steps", "accuracy", "final scale"))
for label, start in (("2**32 (default)", 4294967296.0), ("advised", advised)):
    r = json.load(open(os.path.join(out, "from_%r" % start, "results.json")))
    print("%-28s %14d %10.3f %14g" % ("%s = %g" % (label, start), r["skipped_steps"],
                                        r["accuracy"], r["final_loss_scale"]))
PY
