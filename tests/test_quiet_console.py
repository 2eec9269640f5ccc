"""A quiet console: each front end's documented use prints what it documents, and nothing the
package causes besides its own documented warnings.

Every front end runs in a subprocess of its own, as a user runs it: TensorFlow's default log
levels (``TF_CPP_MIN_LOG_LEVEL`` unset), Python's warnings shown. The snippets are the README's
and the guides' (``docs/guides/*.md``), or, where a page only describes the use (an Estimator's
``model_fn``, a Keras custom loop), its few lines made whole. The run's console is read this way:

* stdout must be exactly the lines the snippet documents (no print noise);
* Python warnings go through a hook (a ``sitecustomize`` on the subprocess's path) that shows
  them all once per place (``"default"``), and reports a warning as the package's when the code
  that raised it, or the line it is attributed to, lies in the package (Python's own
  ``module=`` rule); those are printed as ``QUIET-CHECK warning <category> ...``. Others are
  TensorFlow's or the user's and are dropped (TensorFlow 1.15 warns about its own use of
  ``collections`` ABCs whoever calls it). A package warning passes only when its category
  is one of the package's documented warnings (subclasses of ``NpuLossScaleWarning``,
  docs/reference/warnings.md);
* TensorFlow's Python log records pass the same hook (a filter on the ``tensorflow`` logger): a
  record logged while the innermost frame of the package or of the user's script is the
  package's is marked ``QUIET-CHECK caused by the package``, so that no pattern below lets it
  through (TensorFlow's deprecation notices name only the frame right above the deprecated
  function, which may be TensorFlow's own while the package made the call);
* every other stderr record (a TensorFlow/absl log line with its continuation lines, a C++ log
  line, anything printed) fails unless it matches :data:`TENSORFLOWS_OWN`, an explicit list of
  TensorFlow's own start-up and run-time notices, each with why it is not the package's.

A snippet that needs a piece the stack lacks (tensorflow-estimator after 2.15, TF 2 Keras on
1.15) is skipped with the stack's listed reason. One TensorFlow start per front end, about 8 s
of CPU each (nine on tf215: 521 s wall on 2 cores under a load of 17): marked slow.
"""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tf_versions import TF1, TF2_ONLY_REASON

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import tensorflow_estimator  # noqa: F401  pylint: disable=unused-import
    HAS_ESTIMATOR = True
except ImportError:
    HAS_ESTIMATOR = False
NO_ESTIMATOR_REASON = "tensorflow-estimator is not available for this TensorFlow (2.16+)"

pytestmark = pytest.mark.slow

# The hook, as the subprocess's sitecustomize (it imports neither TensorFlow nor the package).
HOOK = r'''
import importlib.util
import logging
import os
import sys
import warnings

_spec = importlib.util.find_spec("npu_loss_scale")
_PACKAGE = os.path.dirname(os.path.abspath(_spec.origin)) + os.sep
_WARNINGS_PY = os.path.splitext(os.path.abspath(warnings.__file__))[0]
_USER = os.path.abspath(os.getcwd()) + os.sep     # the snippet and the script it runs


def _in_package(path):
    return bool(path) and os.path.abspath(path).startswith(_PACKAGE)


def _caused_by_package(frame):
    """Of ``frame`` and its callers, is the innermost one of the package or of the user's script
    (the snippet and what it runs, in the working folder) the package's?"""
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if _in_package(path):
            return True
        if path.startswith(_USER):
            return False
        frame = frame.f_back
    return False


def _raiser():
    frame = sys._getframe(2)
    while frame is not None and \
            os.path.splitext(os.path.abspath(frame.f_code.co_filename))[0] == _WARNINGS_PY:
        frame = frame.f_back
    return frame


def _show(message, category, filename, lineno, file=None, line=None):
    raiser = _raiser()
    if not (_in_package(filename) or
            (raiser is not None and _in_package(raiser.f_code.co_filename))):
        return          # raised by and attributed to TensorFlow's code or the user's
    documented = any(c.__name__ == "NpuLossScaleWarning"
                     and c.__module__.startswith("npu_loss_scale") for c in category.__mro__)
    sys.stderr.write("QUIET-CHECK warning %s %s.%s %s:%s: %s\n" % (
        "documented" if documented else "undocumented", category.__module__,
        category.__qualname__, filename, lineno, str(message).replace("\n", " | ")))


warnings.simplefilter("default")
warnings.showwarning = _show


class _Cause(logging.Filter):
    """Marks a TensorFlow log record that the package caused (see _caused_by_package)."""

    def filter(self, record):
        if _caused_by_package(sys._getframe(1)):
            record.msg = "QUIET-CHECK caused by the package: %s" % (record.msg,)
        return True


logging.getLogger("tensorflow").addFilter(_Cause())
'''

def _cc(source, text=""):
    """A pattern of TensorFlow's C++ log line from ``source`` (a file name) starting with
    ``text``: "2026-12-07 01:33:53.210801: I tensorflow/.../<source>:182] ..." up to 2.15, absl's
    "I0000 00:00:1796611462.368334    1131 <source>:227] ..." from 2.16."""
    return (r"(\S+ \S+: [IWEF] tensorflow/\S*/|[IWEF]\d{4} \S+\s+\d+ )%s:\d+\] %s"
            % (re.escape(source), text))


# TensorFlow's own lines: each pattern matches the first line of one log record (its
# continuation lines go with it). None of them is caused by the package: each is printed by
# TensorFlow for any program at start-up or for the user's own code, as its comment says.
TENSORFLOWS_OWN = [
    # start-up: the CPU instructions this binary was not compiled for, and the oneDNN notice;
    # printed by `import tensorflow` alone
    _cc("cpu_feature_guard.cc"),
    _cc("port.cc", "oneDNN custom operations are on"),
    # start-up (2.16+): absl's notice that it logs to stderr until initialised, printed before
    # the first C++ log line of any program
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    # start-up (1.15 and 2.6): the CPU frequency and XLA service lines of the first session or
    # eager context
    _cc("cpu_utils.cc", "CPU Frequency"),
    _cc("service.cc", "XLA service"),
    _cc("service.cc", "  StreamExecutor device"),
    # 2.16+ (oneDNN v3): on a CPU without AVX-512's float16 support, TensorFlow's note, at the
    # first float16 op it would give oneDNN, that it falls back to Eigen's kernel; printed for
    # any program computing in float16 there (the snippets' float16 models), whatever the CPU
    # of the run (absent on CPUs with that support)
    _cc("util.cc", "oneDNN supports DT_HALF only on platforms with AVX-512"),
    # 2.x: TensorFlow's graph optimisation notice (2.6's words, then 2.15's), printed for any
    # program's first tf.function or Session run
    _cc("mlir_graph_optimization_pass.cc", "MLIR V1 optimization pass is not enabled"),
    _cc("mlir_graph_optimization_pass.cc", "None of the MLIR Optimization Passes are enabled"),
    # TensorFlow's deprecation notices about the user's own calls: they name the snippet's file
    # and line ("From snippet.py:12: ...") and come from the documented code (tf.estimator on
    # 2.15, TF1 Keras on 1.15), not from the package
    r"WARNING:tensorflow:From \S*snippet\.py:\d+: ",
    # TensorFlow's deprecation notices about its own calls: the caller they name is a file of
    # TensorFlow, its Estimator or Keras (the Estimator's hooks on 2.15); one logged while the
    # package made the call is marked by the hook and matches nothing here
    r"WARNING:tensorflow:From \S*[/\\](tensorflow|tensorflow_core|tensorflow_estimator|keras|"
    r"tf_keras)[/\\]\S+:\d+: ",
    # Keras on a machine without a GPU, told by the user to compute in mixed_float16 (the
    # guides' set_global_policy): Keras's own advice
    r"WARNING:tensorflow:Mixed precision compatibility check \(mixed_float16\): WARNING",
]


def _records(text):
    """stderr cut into records: a log line (TensorFlow's Python logger, absl, C++ logging, the
    hook's) with the lines that continue it."""
    start = re.compile(r"^(WARNING|INFO|ERROR|DEBUG|CRITICAL):|^[IWEF]\d{4} |"
                       r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |^QUIET-CHECK ")
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if start.match(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return records


def _noise(stderr):
    """The records of stderr that are neither TensorFlow's own nor the package's documented
    warnings."""
    out = []
    for record in _records(stderr):
        first = record[0]
        if first.startswith("QUIET-CHECK warning documented "):
            continue
        if "QUIET-CHECK" not in first and \
                any(re.match(pattern, first) for pattern in TENSORFLOWS_OWN):
            continue
        out.append("\n".join(record))
    return out


def run_quietly(tmp_path, code, args=None):
    """Runs ``code`` (as ``snippet.py``; ``args`` replace ``[snippet.py]`` after the
    interpreter) in a subprocess; returns (stdout lines, noise records, stderr)."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    (tmp_path / "snippet.py").write_text(textwrap.dedent(code), encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTHONWARNINGS")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(hook_dir), ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                 if p])
    result = subprocess.run([sys.executable] + (args or ["snippet.py"]), cwd=str(tmp_path),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines(), _noise(result.stderr), result.stderr


def assert_quiet(tmp_path, code, expected, args=None):
    stdout, noise, stderr = run_quietly(tmp_path, code, args)
    assert stdout == expected, stderr[-4000:]
    assert not noise, "the package's console noise:\n\n" + "\n\n".join(noise)


# --- the front ends ----------------------------------------------------------------------------

SESSION = """
import tensorflow as tf
import npu_loss_scale as nls

with tf.Graph().as_default():
    w = tf.compat.v1.get_variable("w", initializer=[1.0, -2.0])
    loss = tf.reduce_sum(tf.square(w))
    manager = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2**32, incr_every_n_steps=1000,
                                                    decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.AdamOptimizer(1e-3), manager)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        _, report = sess.run([train_op, opt.step_report])
print(report["finite"], report["global_step"], report["skipped_steps"])
"""


def test_a_tf1_session_script_is_quiet(tmp_path):
    assert_quiet(tmp_path, SESSION, ["True 1 0"])


# The optimizer guide's lines in an Estimator's model_fn.
ESTIMATOR = """
import tensorflow as tf
import npu_loss_scale as nls


def model_fn(features, labels, mode):
    w = tf.compat.v1.get_variable("w", initializer=[1.0, -2.0])
    loss = tf.reduce_sum(tf.square(w * features))
    opt = tf.compat.v1.train.AdamOptimizer(1e-3)
    mgr = nls.ExponentialUpdateLossScaleManager(init_loss_scale=2**32, incr_every_n_steps=1000,
                                                decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    opt = nls.NPULossScaleOptimizer(opt, mgr)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return tf.compat.v1.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


estimator = tf.compat.v1.estimator.Estimator(model_fn, model_dir="model")
estimator.train(lambda: tf.data.Dataset.from_tensors(tf.ones([2])).repeat(), steps=3)
print(estimator.get_variable_value("global_step"))
"""


@pytest.mark.skipif(not HAS_ESTIMATOR, reason=NO_ESTIMATOR_REASON)
def test_an_estimator_is_quiet(tmp_path):
    # the first two steps overflow nothing here: 2**32 * 4 fits float32; all three apply
    assert_quiet(tmp_path, ESTIMATOR, ["3"])


def test_an_ascend_script_through_npu_emulate_is_quiet(tmp_path):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    script = re.search(r"```python\n(# train\.py.*?)```", readme, re.S).group(1)
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    assert_quiet(tmp_path, "", ["loss scale 131072, finite False",
                                "loss scale 65536, finite False",
                                "loss scale 32768, finite True"],
                 args=["-m", "npu_loss_scale.emulate", "--precision-mode", "allow_mix_precision",
                       "train.py"])


# The README's GradScaler loop; TF 1.15 runs it after switching eager execution on.
GRAD_SCALER = """
import tensorflow as tf
import npu_loss_scale as nls
{eager}
w = tf.Variable([1.0, -2.0])
opt = tf.keras.optimizers.SGD(0.1)
scaler = nls.GradScaler(init_scale=2.0 ** 16)
{decorate}
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(w * x))
        scaled = scaler.scale(loss)
    grads = tape.gradient(scaled, [w])
    scaler.step(opt, list(zip(grads, [w])))    # skipped when an overflow was seen
    scaler.update()

for x in (1.0, 1e30):                          # the second batch overflows the scaled loss
    train_step(tf.constant(x))
print(w.numpy(), scaler.get_scale())
"""
EAGER_ON_TF1 = "tf.compat.v1.enable_eager_execution()" if TF1 else ""


def test_grad_scaler_eagerly_is_quiet(tmp_path):
    code = GRAD_SCALER.format(eager=EAGER_ON_TF1, decorate="")
    assert_quiet(tmp_path, code, ["[ 0.8 -1.6] 32768.0"])


def test_grad_scaler_in_a_tf_function_is_quiet(tmp_path):
    code = GRAD_SCALER.format(eager=EAGER_ON_TF1, decorate="@tf.function")
    assert_quiet(tmp_path, code, ["[ 0.8 -1.6] 32768.0"])


def _guide_block(page, index):
    with open(os.path.join(ROOT, "docs", "guides", page), encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)[index]


@pytest.mark.skipif(TF1, reason=TF2_ONLY_REASON)
def test_the_grad_scaler_guide_is_quiet(tmp_path):
    """The guide's tf.function step: mixed precision, unscale_, clipping, a saturated overflow."""
    assert_quiet(tmp_path, _guide_block("grad-scaler.md", 0), ["512.0"])


KERAS_FIT = """
import numpy as np
import tensorflow as tf
from npu_loss_scale.keras import NpuLossScaleOptimizer

model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.01), initial_scale=2.0 ** 10)
model.compile(optimizer=opt, loss="mse")
model.fit(np.ones((16, 4), np.float32), np.zeros((16, 1), np.float32), epochs=1, verbose=0)
print(bool(opt.last_step_finite.numpy()), float(opt.loss_scale))
"""

# TensorFlow 1.15's Keras front end: TF1 Keras compiles with the TF1 optimizer (the matrix's row).
KERAS_FIT_TF1 = """
import numpy as np
import tensorflow as tf
import npu_loss_scale as nls

model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
manager = nls.FixedLossScaleManager(loss_scale=2.0 ** 10)
opt = nls.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01), manager)
model.compile(optimizer=opt, loss="mse")
model.fit(np.ones((16, 4), np.float32), np.zeros((16, 1), np.float32), epochs=1, verbose=0)
print(tf.keras.backend.get_session().run(opt.loss_scale))
"""


def test_keras_fit_is_quiet(tmp_path):
    if TF1:
        assert_quiet(tmp_path, KERAS_FIT_TF1, ["1024.0"])
    else:
        assert_quiet(tmp_path, KERAS_FIT, ["True 1024.0"])


# A custom loop in a tf.function, in each Keras's own protocol: Keras 2 scales the loss and
# unscales the gradients by hand; Keras 3 scales the loss and unscales in apply_gradients.
KERAS_LOOP = """
import tensorflow as tf
from npu_loss_scale.keras import NpuLossScaleOptimizer

w = tf.Variable([1.0, -2.0])
opt = NpuLossScaleOptimizer(tf.keras.optimizers.SGD(0.1), initial_scale=2.0 ** 10)

@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(w * x))
        if hasattr(opt, "get_scaled_loss"):                            # Keras 2
            scaled = opt.get_scaled_loss(loss)
        else:                                                          # Keras 3
            scaled = opt.scale_loss(loss)
    grads = tape.gradient(scaled, [w])
    if hasattr(opt, "get_unscaled_gradients"):
        grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, [w]))

for x in (1.0, 1e30):                          # the second step overflows: skipped
    train_step(tf.constant(x))
print(w.numpy(), float(opt.loss_scale))
"""


@pytest.mark.skipif(TF1, reason=TF2_ONLY_REASON)
def test_a_keras_custom_loop_is_quiet(tmp_path):
    assert_quiet(tmp_path, KERAS_LOOP, ["[ 0.8 -1.6] 512.0"])


@pytest.mark.xfail(TF1, strict=True, reason=(
    "TF 1.15: the inner optimizer's slots for Megatron's resource-variable main parameters log "
    "1.15's 'calling BaseResourceVariable.__init__ with constraint is deprecated' (TensorFlow's "
    "slot creator passes the argument; not fixed yet)"))
def test_megatron_is_quiet(tmp_path):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = re.search(r"```python\n((?:(?!```).)*MegatronMixedPrecisionOptimizer.*?)```",
                      readme, re.S).group(1)
    assert_quiet(tmp_path, block,
                 ["{'scale': 65536.0, 'growth_tracker': 0, 'hysteresis_tracker': 1}"])
