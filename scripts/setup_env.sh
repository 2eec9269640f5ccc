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
# Environments live in .venv/<stack> inside the checkout (override with NLS_VENV_ROOT).
# A stamp file records what was installed, so a second run with nothing changed is quick.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${NLS_VENV_ROOT:-$here/.venv}"
python="${PYTHON:-python3}"
stacks=("$@")
[ ${#stacks[@]} -gt 0 ] || stacks=(tf215 tf221 tf115 tf265)

requirements_for() {
  case "$1" in
    tf215) echo "tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0 numpy<2 pytest hypothesis scikit-learn==1.7.2 tf-slim==1.1.0" ;;
    tf221) echo "tensorflow-cpu==2.21.0 pytest hypothesis scikit-learn==1.7.2 tf-slim==1.1.0" ;;
    # TF 1.15.5 wants numpy < 1.19 and h5py <= 2.10; protobuf 4 breaks its generated code. The
    # test tools are the last releases that still support Python 3.7.
    tf115) echo "tensorflow==1.15.5 numpy==1.18.5 protobuf==3.20.3 h5py==2.10.0 typing_extensions==4.7.1 pytest==7.4.4 hypothesis==6.79.4 scikit-learn==1.0.2 tf-slim==1.1.0 matplotlib==3.5.3" ;;
    # TF 2.6.5 with what it was released with: keras 2.6.0 and tensorflow-estimator 2.6.0 (what
    # its keras<2.7 and tensorflow-estimator<2.7 resolve to, pinned), numpy 1.19.x (its
    # numpy~=1.19.2), protobuf < 3.21 (its generated code predates protobuf 4), scikit-learn
    # 1.3 (the last with wheels for NumPy 1.19 on Python 3.9), matplotlib 3.5 (the last for
    # NumPy 1.19; the hooks' plot test needs it).
    tf265) echo "tensorflow-cpu==2.6.5 keras==2.6.0 tensorflow-estimator==2.6.0 numpy~=1.19.2 protobuf<3.21 pytest hypothesis scikit-learn==1.3.2 tf-slim==1.1.0 matplotlib==3.5.3" ;;
    campaign) echo "tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0 numpy==1.23.5 numba<0.59 contourpy<1.2 pytest hypothesis scikit-learn==1.7.2 tf-slim==1.1.0 easydict opencv-python-headless<4.11 pandas<2.3 scikit-image<0.25 imageio pycocotools scipy<1.14 pillow<10 h5py<3.12 tqdm matplotlib<3.10 librosa<0.10 soundfile sentencepiece tensorflow-datasets==4.9.3 tensorflow-metadata==1.15.0 trimesh==4.5.3 gin-config==0.5.0 absl-py==1.4.0 tensorflow-hub==0.15.0 tensorflow-addons==0.23.0" ;;
    # The same TF 1.15.5 pins as tf115; every other package at its last release for Python 3.7
    # that builds against NumPy 1.18 (numba 0.56 for librosa 0.9).
    campaign115) echo "tensorflow==1.15.5 numpy==1.18.5 protobuf==3.20.3 h5py==2.10.0 typing_extensions==4.7.1 pytest==7.4.4 hypothesis==6.79.4 scikit-learn==1.0.2 tf-slim==1.1.0 easydict==1.10 opencv-python-headless==4.6.0.66 pandas==1.3.5 scikit-image==0.19.3 PyWavelets==1.3.0 imageio==2.31.2 pycocotools==2.0.7 scipy==1.7.3 pillow==9.5.0 tqdm matplotlib==3.5.3 librosa==0.9.2 numba==0.56.4 soundfile sentencepiece==0.1.99 pyyaml==5.4.1" ;;
    *) echo "unknown stack '$1' (accepted: tf215, tf221, tf115, tf265, campaign, campaign115)" >&2; return 2 ;;
  esac
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
  reqs="$(requirements_for "$stack")"
  venv="$root/$stack"
  stamp="$venv/.nls-stamp"
  want="$reqs|$(cat "$here/setup.py" 2>/dev/null | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
    echo "[setup_env] $stack: up to date ($venv)"
    continue
  fi
  interpreter="$(python_for "$stack")" || exit 1
  echo "[setup_env] $stack: creating $venv from $interpreter"
  "$interpreter" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored: it is neither" || true
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet $reqs 2>&1 | grep -v "is ignored: it is neither" || true
  if [ "$stack" = campaign ]; then
    # Scripts of TF 1.15's time use np.float (NumPy < 1.24, hence the numba and contourpy of
    # that time), Image.ANTIALIAS (Pillow < 10), librosa's positional filters.mel (< 0.10) and
    # yaml.load(text) without a Loader (PyYAML < 6); PyYAML 5.4.1 has no wheel for this Python
    # and builds only with Cython < 3. tensorflow-datasets 4.9.3 (TF 2.15's time) with
    # tensorflow-metadata 1.15.0: later tensorflow-metadata needs protobuf 5, TF 2.15 protobuf 4.
    # absl-py < 2: the TF2 model-garden scripts (Ascend's Transformer, BERT) pass a string as an
    # enum flag's values, which absl-py 2.0 rejects.
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
