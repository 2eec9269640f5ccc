#!/usr/bin/env bash
# Build and install horovod==0.28.1 (TensorFlow + Gloo, no MPI/PyTorch/MXNet) into a venv.
#
#   bash scripts/build_horovod.sh .venv/tf215
#   bash scripts/build_horovod.sh .venv/tf221
#
# * Idempotent: does nothing when `import horovod.tensorflow` already works in that venv.
# * Quiet: silent when there is nothing to do, one line when it builds or installs; the full
#   build log goes to $NLS_HOROVOD_LOG_DIR (default /tmp) and its tail is printed only when the
#   build fails.
# * Horovod's compiled library is tied to the TensorFlow it was built against, but pip's wheel
#   cache keys the wheel only on "horovod 0.28.1": a wheel built for TF 2.15 would be reused for
#   TF 2.21 and fail to load there. So the build bypasses pip's cache and keeps its own cache per
#   TensorFlow version in $NLS_HOROVOD_WHEEL_CACHE (default ~/.cache/npu-loss-scale/horovod):
#   the second install for the same TensorFlow takes seconds.
# * TF 2.15: a plain `pip install` fails (build isolation hides TensorFlow): --no-build-isolation.
# * TF >= 2.16: also needs two include paths from the TF wheel and a shim for the moved
#   xla_builder.h header (the TF headers moved xla/client/xla_builder.h to xla/hlo/builder/).
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=3   # keep TensorFlow's start-up chatter out of the output

HOROVOD_VERSION=0.28.1
venv="${1:?usage: build_horovod.sh <venv-dir>}"
py="$venv/bin/python"
[ -x "$py" ] || { echo "[build_horovod] no python at $py" >&2; exit 2; }

if "$py" -c "import horovod.tensorflow" >/dev/null 2>&1 && [ -x "$venv/bin/horovodrun" ]; then
  exit 0   # already importable: nothing to do, nothing to say
fi

tf_version="$("$py" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)" || {
  echo "[build_horovod] tensorflow does not import in $venv" >&2; exit 2; }
py_tag="$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])' 2>/dev/null)"
cache_root="${NLS_HOROVOD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/npu-loss-scale/horovod}"
cache="$cache_root/horovod-$HOROVOD_VERSION-tf$tf_version-$py_tag"
log_dir="${NLS_HOROVOD_LOG_DIR:-/tmp}"
log="$log_dir/build_horovod-tf$tf_version-$py_tag.log"
mkdir -p "$cache" "$log_dir"
: > "$log"

fail() {
  echo "[build_horovod] FAILED: $1 (TensorFlow $tf_version, venv $venv); last lines of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
}

pip_q() { "$py" -m pip --disable-pip-version-check "$@" >>"$log" 2>&1; }

# Build prerequisites (no build isolation: they must be in the venv). setuptools < 70.1 needs
# the `wheel` package for bdist_wheel.
pip_q install --quiet "setuptools<80" wheel packaging cloudpickle psutil pyyaml cffi \
  || fail "installing build prerequisites"

if ! ls "$cache"/horovod-$HOROVOD_VERSION-*.whl >/dev/null 2>&1; then
  echo "[build_horovod] building horovod $HOROVOD_VERSION for TensorFlow $tf_version (several minutes; log: $log)"
  shim=""
  extra_cxxflags=""
  if "$py" - 2>/dev/null <<'PYEOF'
import sys
import tensorflow as tf
major, minor = (int(x) for x in tf.__version__.split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 16) else 1)
PYEOF
  then
    tfi="$("$py" -c 'import tensorflow as tf; print(tf.sysconfig.get_include())' 2>/dev/null)"
    shim="$(mktemp -d)"
    mkdir -p "$shim/tensorflow/compiler/xla/client"
    echo '#include "xla/hlo/builder/xla_builder.h"' \
      > "$shim/tensorflow/compiler/xla/client/xla_builder.h"
    extra_cxxflags="-I$tfi/external/highwayhash -I$tfi/external/farmhash_archive/src -I$shim"
  fi
  build_dir="$(mktemp -d)"
  trap 'rm -rf "$build_dir" ${shim:+"$shim"}' EXIT
  # nice: the machines this runs on are shared; MAKEFLAGS bounds the parallel compile jobs.
  if ! env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      CXXFLAGS="${CXXFLAGS:-} $extra_cxxflags" \
      MAKEFLAGS="${MAKEFLAGS:--j${NLS_BUILD_JOBS:-2}}" \
      nice -n "${NLS_BUILD_NICE:-10}" \
      "$py" -m pip --disable-pip-version-check wheel --no-cache-dir --no-build-isolation \
        --no-deps -w "$build_dir" "horovod==$HOROVOD_VERSION" >>"$log" 2>&1; then
    fail "compiling horovod"
  fi
  mv "$build_dir"/horovod-$HOROVOD_VERSION-*.whl "$cache"/ || fail "no wheel produced"
fi

wheel_file="$(ls "$cache"/horovod-$HOROVOD_VERSION-*.whl | head -n 1)"
pip_q install --quiet --force-reinstall --no-deps "$wheel_file" || fail "installing $wheel_file"
pip_q install --quiet cloudpickle psutil pyyaml packaging cffi || fail "installing horovod's dependencies"

if ! "$py" -c "import horovod, horovod.tensorflow; print('horovod', horovod.__version__)" >>"$log" 2>&1; then
  rm -f "$wheel_file"   # a wheel that does not load is not worth keeping
  fail "horovod.tensorflow does not import after installation"
fi
echo "[build_horovod] horovod $HOROVOD_VERSION installed in $venv (TensorFlow $tf_version)"
