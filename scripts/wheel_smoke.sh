#!/usr/bin/env bash
# Build the sdist and the wheel, check them, install the wheel into a fresh virtual environment
# with TensorFlow 2.15 and use it there as a user would, outside the checkout:
#
#   bash scripts/wheel_smoke.sh
#
#   1. python -m build (in a throwaway venv): the sdist, then the wheel built from that sdist;
#      meanwhile a fresh venv gets tensorflow-cpu and numpy as pinned in requirements/tf215.txt,
#      and pytest
#   2. twine check --strict; check-wheel-contents; every file of the package the checkout tracks
#      (the shim's .py files at any depth, _internal/kernels/*.cc and *.h, py.typed) is in the wheel, and every
#      tracked file of the project is in the sdist
#   3. the wheel (not the checkout) installed into the fresh venv; then, from an empty folder:
#      - every public name of the package is imported (its __all__ and lazy table);
#      - the npu-emulate console script runs an Ascend TF1 script (tests/scripts/
#        ascend_user_train.py: from npu_bridge.npu_init import *, NPULossScaleOptimizer, a Session
#        loop) with the fused kernel required, and prints the loss scales worked out by hand;
#      - pytest runs a test of that script through the plugin's npu_device fixture;
#      - last, with the wheel's [doctor] extra added, the doctor's HTML page is written (its
#        template is package data).
#
# Any failure stops the run with a message saying what is missing. Nothing outside a temporary
# folder is written (pip's cache excepted); the folder is removed at the end unless
# NLS_SMOKE_KEEP=1. PYTHON names the interpreter (default python3; TF 2.15 needs Python 3.9-3.11).
# Measured: 2 min 51 s wall (1 min 58 s of CPU) on 2 cores shared with other work (load about 4);
# most of it is pip installing TensorFlow, then three TensorFlow start-ups and the kernel build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
# The temporary folder holds a venv with TensorFlow (over 1 GB in some 20,000 files): in memory
# (/dev/shm, when it has 4 GB free) unless TMPDIR says where; removing it from a disk took a
# minute of the run.
scratch="${TMPDIR:-}"
if [ -z "$scratch" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
   [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -gt $((4 * 1024 * 1024)) ]; then
  scratch=/dev/shm
fi
work="$(mktemp -d "${scratch:-/tmp}/nls-wheel-smoke.XXXXXX")"
venv_job=
cleanup() {
  if [ -n "$venv_job" ] && kill -0 "$venv_job" 2>/dev/null; then  # stopped early: end our pip
    pkill -P "$venv_job" 2>/dev/null || true
    kill "$venv_job" 2>/dev/null || true
    wait "$venv_job" 2>/dev/null || true
  fi
  if [ "${NLS_SMOKE_KEEP:-0}" = 1 ]; then echo "[wheel_smoke] kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# the caller's environment must not leak in: no activated venv, no checkout on the path
unset VIRTUAL_ENV PYTHONPATH PYTHONHOME
export PYTHONNOUSERSITE=1 TF_CPP_MIN_LOG_LEVEL=2
# the fused kernel is built against this venv's TensorFlow into the temporary folder (~20 s)
export NPU_LOSS_SCALE_CACHE="$work/kernels"

log() { echo "[wheel_smoke] $(printf "%3d" "$SECONDS")s $*"; }
fail() { echo "[wheel_smoke] FAILED: $*" >&2; exit 1; }
quietly() {  # run a command; show its output (less pip's find-links notices) only if it fails
  local out
  out="$("$@" 2>&1)" || { printf '%s\n' "$out" | grep -v "is ignored: it is neither" >&2; fail "$*"; }
}

# -- 1. build, while TensorFlow installs into the fresh venv ---------------------------------------
# (pip's waits are mostly the network's; --no-compile: the venv compiles what it imports)
venv="$work/venv"
py="$venv/bin/python"
mapfile -t tf_pins < <(grep -E '^(tensorflow-cpu|numpy)[=<>~!]' "$here/requirements/tf215.txt")
[ ${#tf_pins[@]} -eq 2 ] || fail "requirements/tf215.txt should pin tensorflow-cpu and numpy; found: ${tf_pins[*]}"
log "installing ${tf_pins[*]} and pytest into a fresh venv (in the background)"
( "$python" -m venv "$venv" &&
  "$py" -m pip install --quiet --no-compile "${tf_pins[@]}" pytest -c "$here/requirements/test.txt"
) > "$work/venv.log" 2>&1 &
venv_job=$!

# What the checkout tracks (its files on disk, less caches, when it is not a git checkout).
tracked() {
  if git -C "$here" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$here" ls-files -- "$@"
  else
    (cd "$here" && find "$@" \( -name .venv -o -name .git -o -name .cache -o -name build \
                              -o -name dist -o -name '*.egg-info' -o -name __pycache__ \) -prune \
                         -o -type f ! -name '*.py[co]' -print | sed 's|^\./||')
  fi
}

# Built from a copy of the tracked files as they are on disk, as from a fresh clone: a checkout's
# own *.egg-info (left by an editable install) would otherwise feed the sdist its old file list.
log "building the sdist and the wheel"
mkdir "$work/src"
(cd "$here" && tracked . | tar -cf - -T -) | tar -xf - -C "$work/src"
"$python" -m venv "$work/tools"
quietly "$work/tools/bin/python" -m pip install --quiet --no-compile build twine check-wheel-contents
"$work/tools/bin/python" -m build --outdir "$work/dist" "$work/src" > "$work/build.log" 2>&1 \
  || { tail -n 30 "$work/build.log"; fail "python -m build"; }
sdist="$(ls "$work"/dist/*.tar.gz)"
wheel="$(ls "$work"/dist/*.whl)"
log "built $(basename "$sdist") and $(basename "$wheel")"

# -- 2. check -------------------------------------------------------------------------------------
"$work/tools/bin/twine" check --strict "$sdist" "$wheel" || fail "twine check"
"$work/tools/bin/check-wheel-contents" "$wheel" || fail "check-wheel-contents"
# every tracked file under the given paths must be among the archive's names, with the prefix
missing_from() {  # missing_from LISTING PREFIX PATH...
  local listing="$1" prefix="$2"; shift 2
  tracked "$@" | sed "s|^|$prefix|" | sort | comm -23 - <(sort "$listing")
}
"$work/tools/bin/python" -c "import sys, zipfile; print('\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))" \
  "$wheel" > "$work/wheel.txt"
tar -tzf "$sdist" > "$work/sdist.txt"
absent="$(missing_from "$work/wheel.txt" "" npu_loss_scale)"
[ -z "$absent" ] || fail "the wheel lacks these files of the package:"$'\n'"$absent"
for required in npu_loss_scale/py.typed npu_loss_scale/_internal/kernels/unscale_check.cc \
                npu_loss_scale/_internal/kernels/saturate.cc npu_loss_scale/_internal/kernels/tf_compat.h \
                npu_loss_scale/_npu_bridge_shim/npu_bridge/npu_init.py \
                npu_loss_scale/tools/doctor/templates/report.html.j2; do
  grep -qx "$required" "$work/wheel.txt" || fail "the wheel lacks $required"
done
absent="$(missing_from "$work/sdist.txt" "$(basename "$sdist" .tar.gz)/" \
          README.md CHANGELOG.md LICENSE pyproject.toml docs requirements scripts tests examples \
          npu_loss_scale)"
[ -z "$absent" ] || fail "the sdist lacks these files of the project:"$'\n'"$absent"
log "the wheel has all $(tracked npu_loss_scale | wc -l) files of the package; the sdist has the project"

# -- 3. the wheel in the fresh venv, used from an empty folder -----------------------------------
wait "$venv_job" || { grep -v "is ignored: it is neither" "$work/venv.log" >&2; fail "installing TensorFlow into the fresh venv"; }
log "installing the wheel"
quietly "$py" -m pip install --quiet --no-compile "$wheel"

run="$work/run"  # an empty folder: only the installed wheel can be imported from here
mkdir "$run"
cp "$here/tests/scripts/ascend_user_train.py" "$run/train.py"
cd "$run"

log "importing every public name"
"$py" - "$venv" <<'EOF' || fail "importing the public names"
import importlib.metadata as metadata
import os
import sys

import npu_loss_scale as nls

venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(nls.__file__).startswith(venv + os.sep), (
    "npu_loss_scale comes from %s, not from the venv's installed wheel" % nls.__file__)
assert metadata.version("npu-loss-scale") == nls.__version__, (
    metadata.version("npu-loss-scale"), nls.__version__)
names = sorted(set(nls.__all__) | {n for n in dir(nls) if not n.startswith("_")})
for name in names:
    getattr(nls, name)
entry_points = {(e.group, e.name): e for e in metadata.distribution("npu-loss-scale").entry_points}
for key in (("pytest11", "npu_loss_scale"), ("console_scripts", "npu-emulate")):
    assert key in entry_points, "no %s entry point named %s" % key
    entry_points[key].load()
print("[wheel_smoke] npu-loss-scale %s: %d public names imported" % (nls.__version__, len(names)))
EOF

log "npu-emulate on an Ascend TF1 script (fused kernel required)"
[ -x "$venv/bin/npu-emulate" ] || fail "the npu-emulate console script was not installed"
"$venv/bin/npu-emulate" --help > /dev/null || fail "npu-emulate --help"
NPU_LOSS_SCALE_FUSED_UNSCALE=on "$venv/bin/npu-emulate" --report report.json train.py --steps 4 \
  > emulate.out 2> emulate.err || { cat emulate.out emulate.err; fail "npu-emulate train.py"; }
# The kernel's gradient is the loss scale itself (loss = sum(x @ kernel), x = [[1, 1]]); under
# allow_mix_precision it is float16, largest finite 65504: 2**17 and 2**16 overflow (the step is
# skipped and the scale halves), 2**15 fits and stays (growth only after 1000 good steps).
expected="step 0: loss scale 131072, finite False
step 1: loss scale 65536, finite False
step 2: loss scale 32768, finite True
step 3: loss scale 32768, finite True"
[ "$(grep '^step ' emulate.out)" = "$expected" ] \
  || { cat emulate.out emulate.err; fail "npu-emulate printed other steps than expected:"$'\n'"$expected"; }
want_report='{"optimizers_built": 1, "steps_applied": 2, "steps_skipped": 2, "train_ops_built": 1}'
[ "$(cat report.json)" = "$want_report" ] \
  || fail "npu-emulate --report wrote $(cat report.json), expected $want_report"
# npu-loss-scale (npu_loss_scale.__main__:main) is declared; it is checked once the module exists
[ -x "$venv/bin/npu-loss-scale" ] || fail "the npu-loss-scale console script was not installed"
if [ -n "$(tracked npu_loss_scale/__main__.py)" ]; then
  "$venv/bin/npu-loss-scale" --version || fail "npu-loss-scale --version"
else
  log "WARNING: npu-loss-scale is declared but npu_loss_scale/__main__.py does not exist yet"
fi

log "pytest with the plugin's npu_device fixture"
cat > test_installed_plugin.py <<'EOF'
import os
import sys

from npu_loss_scale.pytest_plugin import assert_no_overflow, assert_step_skipped


def test_the_scale_backs_off_then_the_step_applies(npu_device):
    import npu_loss_scale
    assert os.path.realpath(npu_loss_scale.__file__).startswith(os.path.realpath(sys.prefix))
    train = npu_device.load_script("train.py")
    steps = train.main(steps=3)
    assert_step_skipped(steps[0])
    assert_step_skipped(steps[1])
    assert_no_overflow(steps[2])
    assert steps[2]["loss_scale"] == 2.0 ** 15
EOF
"$py" -m pytest test_installed_plugin.py -q -p no:cacheprovider --trace-config > pytest.out 2>&1 \
  || { tail -n 40 pytest.out; fail "pytest with the installed plugin"; }
grep -Eq "npu_loss_scale.*pytest_plugin" pytest.out \
  || { tail -n 40 pytest.out; fail "pytest --trace-config does not list the npu_loss_scale plugin"; }
tail -n 1 pytest.out

# last, so that every check above ran on the wheel without its optional pieces
log "the doctor's HTML page from the wheel with its [doctor] extra (the template is package data)"
quietly "$py" -m pip install --quiet --no-compile "$wheel[doctor]" -c "$here/requirements/test.txt"
"$py" - <<'EOF' || fail "write_html from the installed wheel"
import os
import sys

from npu_loss_scale.tools.doctor import html

assert os.path.realpath(html.__file__).startswith(os.path.realpath(sys.prefix)), html.__file__
steps = [{"step": 1, "loss_scale": 65536.0, "skipped": True},
         {"step": 2, "loss_scale": 32768.0, "skipped": False}]
html.write_html({"schema": "npu-loss-scale/doctor-report", "schema_version": 1,
                 "outcome": "completed", "runs": {"saturation": {"steps": steps}}}, "doctor.html")
with open("doctor.html", encoding="utf-8") as page:
    text = page.read()
assert text.startswith("<!DOCTYPE html>") and 'id="plot-loss-scale"' in text and "<svg" in text
print("[wheel_smoke] doctor.html written: %d characters" % len(text))
EOF
log "OK: $(basename "$wheel") builds, installs and works outside the checkout"
