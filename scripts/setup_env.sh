#!/usr/bin/env bash
# Create (or refresh) the virtual environments this project is tested in.
#
#   bash scripts/setup_env.sh            # the four test stacks (tf215 tf221 tf115 tf265)
#   bash scripts/setup_env.sh tf215      # only TensorFlow 2.15 (+ tensorflow-estimator)
#   bash scripts/setup_env.sh tf221      # only TensorFlow 2.21
#   bash scripts/setup_env.sh tf115      # TensorFlow 1.15.5 on Python 3.7 (Ascend's TF1 adapter's
#                                        # stack): needs a Python 3.7 interpreter, taken from
#                                        # PYTHON37, else python3.7 on PATH, else pyenv's
#   bash scripts/setup_env.sh tf265      # TensorFlow 2.6.5 on Python 3.9 (the release of Ascend's
#                                        # TF2 adapter, npu_device), + tensorflow-estimator 2.6
#   bash scripts/setup_env.sh campaign   # TF 2.15 plus the third-party packages real Ascend
#                                        # scripts import (for scripts/try_ascend_scripts.py;
#                                        # no test needs it)
#   bash scripts/setup_env.sh campaign115  # TF 1.15.5 on Python 3.7 plus the same scripts'
#                                          # third-party packages at releases for Python 3.7
#                                          # (the scripts as written, on TF 1.15 itself)
#
# What each stack installs, pinned and with the reasons: requirements/<stack>.txt.
# Environments live in .venv/<stack> inside the checkout (override with NLS_VENV_ROOT).
# A stamp file records what was installed, so a second run with nothing changed is quick.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${NLS_VENV_ROOT:-$here/.venv}"
python="${PYTHON:-python3}"
stacks=("$@")
[ ${#stacks[@]} -gt 0 ] || stacks=(tf215 tf221 tf115 tf265)

# What each stack installs: requirements/<stack>.txt (pins and why, with its "-r" includes).
STACKS="tf215 tf221 tf115 tf265 campaign campaign115"

requirements_file() {
  case " $STACKS " in
    *" $1 "*) echo "$here/requirements/$1.txt" ;;
    *) echo "unknown stack '$1' (accepted: ${STACKS// /, })" >&2; return 2 ;;
  esac
}

# The file and every file it includes with "-r", recursively: what the stamp is computed from.
requirement_files() {
  local file="$1" include
  echo "$file"
  while read -r include; do
    requirement_files "$(dirname "$file")/$include"
  done < <(sed -n 's/^-r[[:space:]]*//p' "$file")
}

# The interpreter a stack is built from: TF 1.15.5 has wheels for Python 3.7 at the newest, so
# tf115 needs a Python 3.7 (PYTHON37 names one); TF 2.6.5 has wheels for Python 3.6-3.9 only, so
# tf265 needs a Python 3.9 (NLS_PYTHON39 names one). Otherwise python3.X on PATH or pyenv's 3.X.x.
# The others use $PYTHON (default python3).
python_for() {
  case "$1" in
    tf115|campaign115) find_python 3.7 PYTHON37 ;;
    tf265) find_python 3.9 NLS_PYTHON39 ;;
    *) echo "$python" ;;
  esac
}

find_python() {
  local want="$1" var="$2" candidate
  local -a candidates=()
  [ -n "${!var:-}" ] && candidates+=("${!var}")
  candidates+=("python$want")
  if command -v pyenv >/dev/null 2>&1; then
    candidates+=($(pyenv root 2>/dev/null)/versions/"$want".*/bin/python"$want")
  fi
  candidates+=("$HOME"/.pyenv/versions/"$want".*/bin/python"$want")
  for candidate in "${candidates[@]}"; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
      echo "$candidate"
      return 0
    fi
  done
  echo "[setup_env] no Python $want interpreter found (looked at \$$var, python$want on PATH and" \
       "pyenv's versions). Install one, e.g. 'pyenv install $want' or your system's python$want" \
       "package, or point $var at it." >&2
  return 1
}

for stack in "${stacks[@]}"; do
  reqs="$(requirements_file "$stack")" || exit 2
  venv="$root/$stack"
  stamp="$venv/.nls-stamp"
  # shellcheck disable=SC2046
  want="$stack|$(cat $(requirement_files "$reqs") "$here/pyproject.toml" | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
    echo "[setup_env] $stack: up to date ($venv)"
    continue
  fi
  interpreter="$(python_for "$stack")" || exit 1
  echo "[setup_env] $stack: creating $venv from $interpreter"
  "$interpreter" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored: it is neither" || true
  "$venv/bin/python" -m pip install --quiet -r "$reqs" 2>&1 | grep -v "is ignored: it is neither" || true
  if [ "$stack" = campaign ]; then
    # Scripts of TF 1.15's time call yaml.load(text) without a Loader (PyYAML < 6); PyYAML 5.4.1
    # has no wheel for this Python and builds only with Cython < 3 (the other pins and why:
    # requirements/campaign.txt).
    "$venv/bin/python" -m pip install --quiet "cython<3" wheel 2>&1 | grep -v "is ignored: it is neither" || true
    "$venv/bin/python" -m pip install --quiet --no-build-isolation "pyyaml==5.4.1" 2>&1 | grep -v "is ignored: it is neither" || true
    "$venv/bin/python" -c "import yaml; assert yaml.__version__ == '5.4.1'" || { echo "[setup_env] campaign: PyYAML 5.4.1 did not build" >&2; exit 1; }
    # NVIDIA's DLLogger (Ascend's TF2 BERT logs through it) is not on PyPI: pip takes it from its
    # git repository. Without a network it is left out and those scripts stop at its import.
    if ! "$venv/bin/python" -m pip install --quiet "dllogger @ git+https://github.com/NVIDIA/dllogger@v1.0.0"; then
      echo "[setup_env] campaign: DLLogger not installed (no network?); Ascend's TF2 BERT scripts import it" >&2
    fi
  fi
  "$venv/bin/python" -c "import tensorflow, pytest, hypothesis, sklearn" || { echo "[setup_env] $stack: install failed" >&2; exit 1; }
  "$venv/bin/python" -m pip install --quiet --no-deps -e "$here"
  echo "$want" > "$stamp"
  "$venv/bin/python" -c "import tensorflow as tf; print('[setup_env] $stack: tensorflow', tf.__version__)"
done
