"""Real training through both TF2 front ends: scikit-learn's digits (1,797 8x8 images, bundled
with scikit-learn), a small MLP in mixed float16 with emulated saturation after the float16
hidden layer.

Checks: accuracy comparable to float32; a saturated overflow (finite gradients, register set) is
caught and skipped, while the inf_nan backend lets it corrupt the weights; checkpoints resume to
the same weights."""
import numpy as np
import pytest
import tensorflow as tf

import npu_loss_scale as nls
from npu_loss_scale.device import register as emulation
from npu_loss_scale.device import saturation
from npu_loss_scale.keras import NpuLossScaleOptimizer

sklearn_datasets = pytest.importorskip("sklearn.datasets")  # installed by scripts/setup_env.sh

BATCH = 64
POISON = 1e6   # the float16 input overflows, and every float16 op after it
STEPS = 240


@pytest.fixture(scope="module")
def digits():
    data = sklearn_datasets.load_digits()
    order = np.random.default_rng(0).permutation(len(data.target))
    x = (data.data[order] / 16.0).astype(np.float32)
    y = data.target[order].astype(np.int32)
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


@pytest.fixture
def policy():
    def set_policy(name):
        tf.keras.mixed_precision.set_global_policy(name)
    yield set_policy
    tf.keras.mixed_precision.set_global_policy("float32")


def _model(seed=0):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.Input((64,)),
        tf.keras.layers.Dense(64, activation="relu"),
        saturation.Saturate(),
        tf.keras.layers.Dense(10, dtype="float32"),
    ])


def _batches(train, steps, start=0):
    x, y = train
    for step in range(start, start + steps):
        i = (step * BATCH) % (len(y) - BATCH)
        yield x[i:i + BATCH], y[i:i + BATCH]


def _saturating_train_step(model):
    """Keras fit traces ``model.train_step``: with every float16 op saturating, as on the device."""
    model.train_step = saturation.saturating(every_op=True, outputs=False)(model.train_step)
    return model


def _grads_of(model, x, y, scale):
    with tf.GradientTape() as tape:
        loss = _loss_fn(y, model(x, training=True)) * scale
    return tape.gradient(loss, model.trainable_variables)


def _accuracy(model, test):
    x, y = test
    return float(np.mean(np.argmax(model(x).numpy(), axis=1) == y))


_loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _scaler_train_step(model, opt, scaler):
    @tf.function
    def step(x, y):
        with saturation.saturate_every_op():     # every float16 op saturates, as on the device
            with tf.GradientTape() as tape:
                loss = _loss_fn(y, model(x, training=True))
                scaled = scaler.scale(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        scaler.step(opt, list(zip(grads, model.trainable_variables)))
        scaler.update()
        return finite
    return step


def _fp32_accuracy(digits):  # pylint: disable=redefined-outer-name
    model = _model()
    opt = tf.keras.optimizers.Adam(1e-2)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = _loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for x, y in _batches(digits[0], STEPS):
        step(x, y)
    return _accuracy(model, digits[1])


@pytest.fixture(scope="module")
def fp32_accuracy(digits):  # pylint: disable=redefined-outer-name
    return _fp32_accuracy(digits)


@pytest.mark.slow
def test_grad_scaler_mixed_float16_training_matches_float32_and_survives_a_saturated_batch(
        digits, fp32_accuracy, policy, tmp_path):  # pylint: disable=redefined-outer-name
    policy("mixed_float16")
    emulation.npu_clear_float_status_v2()
    model = _model()
    opt = tf.keras.optimizers.Adam(1e-2)
    scaler = nls.GradScaler(init_scale=2.0 ** 24, growth_interval=100)
    step = _scaler_train_step(model, opt, scaler)
    batches = list(_batches(digits[0], STEPS))
    half = STEPS // 2
    for x, y in batches[:half]:
        step(x, y)
    # 2**24 is too large for float16 gradients: the first steps overflow and back off.
    assert scaler.get_scale() < 2.0 ** 24

    # A poisoned batch: the float16 hidden layer overflows and saturates to 65504. The
    # gradients stay finite, yet the register saw it: the step is skipped and the scale halves.
    before = [v.numpy().copy() for v in model.trainable_variables]
    scale = scaler.get_scale()
    finite = step(digits[0][0][:BATCH] * POISON, digits[0][1][:BATCH])
    assert bool(finite)
    for old, var in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(old, var.numpy())
    assert scaler.get_scale() == scale / 2

    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, scaler=scaler)
    path = ckpt.save(str(tmp_path / "ckpt"))
    for x, y in batches[half:]:
        step(x, y)
    accuracy = _accuracy(model, digits[1])
    print("digits accuracy: float32 %.4f, GradScaler mixed_float16 %.4f"
          % (fp32_accuracy, accuracy))
    assert fp32_accuracy >= 0.93
    assert accuracy >= fp32_accuracy - 0.03

    # Resume from the checkpoint in fresh objects: the same batches give the same weights.
    resumed = _model(seed=1)
    opt2 = tf.keras.optimizers.Adam(1e-2)
    scaler2 = nls.GradScaler()
    opt2.build(resumed.trainable_variables)
    tf.train.Checkpoint(model=resumed, optimizer=opt2, scaler=scaler2).restore(path)
    assert scaler2.get_scale() == scale / 2
    step2 = _scaler_train_step(resumed, opt2, scaler2)
    for x, y in batches[half:]:
        step2(x, y)
    for a, b in zip(model.trainable_variables, resumed.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert scaler2.state_dict() == scaler.state_dict()


def test_inf_nan_backend_lets_the_saturated_batch_through(digits, policy):  # pylint: disable=redefined-outer-name
    policy("mixed_float16")
    model = _model()
    opt = tf.keras.optimizers.SGD(0.1)
    scaler = nls.GradScaler(init_scale=1.0, backend="inf_nan")
    step = _scaler_train_step(model, opt, scaler)
    before = [v.numpy().copy() for v in model.trainable_variables]
    assert bool(step(digits[0][0][:BATCH] * POISON, digits[0][1][:BATCH]))
    changed = max(float(np.max(np.abs(old - v.numpy())))
                  for old, v in zip(before, model.trainable_variables))
    assert changed > 1.0 and scaler.get_scale() == 1.0   # applied, scale untouched
    emulation.npu_clear_float_status_v2()


@pytest.mark.slow
def test_keras_optimizer_fit_mixed_float16_matches_float32_and_skips_a_saturated_batch(
        digits, fp32_accuracy, policy, tmp_path):  # pylint: disable=redefined-outer-name
    policy("mixed_float16")
    emulation.npu_clear_float_status_v2()
    model = _saturating_train_step(_model())
    opt = NpuLossScaleOptimizer(tf.keras.optimizers.Adam(1e-2), initial_scale=2.0 ** 24,
                                dynamic_growth_steps=100)
    model.compile(optimizer=opt, jit_compile=False,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    (x, y), _ = digits
    model.fit(x, y, batch_size=BATCH, epochs=STEPS * BATCH // len(y), shuffle=False, verbose=0)
    assert float(opt.loss_scale) < 2.0 ** 24

    before = [v.numpy().copy() for v in model.trainable_variables]
    scale = float(opt.loss_scale)
    model.train_on_batch(x[:BATCH] * POISON, y[:BATCH])
    assert not bool(opt.last_step_finite.numpy()) and float(opt.loss_scale) == scale / 2
    for old, var in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(old, var.numpy())
    # ... although every gradient of that batch is finite (is_finite would have applied it).
    traced_grads = tf.function(saturation.saturating(every_op=True, outputs=False)(_grads_of))
    grads = traced_grads(model, x[:BATCH] * POISON, y[:BATCH], float(opt.loss_scale))
    assert all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads)
    emulation.npu_clear_float_status_v2()

    accuracy = _accuracy(model, digits[1])
    print("digits accuracy: float32 %.4f, NpuLossScaleOptimizer mixed_float16 %.4f"
          % (fp32_accuracy, accuracy))
    assert accuracy >= fp32_accuracy - 0.03

    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    other = _model(seed=1)
    opt2 = NpuLossScaleOptimizer(tf.keras.optimizers.Adam(1e-2))
    other.compile(optimizer=opt2, jit_compile=False,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    other.train_on_batch(x[:BATCH] * 0.0, y[:BATCH])         # builds the optimizer's slots
    tf.train.Checkpoint(model=other, optimizer=opt2).restore(path)
    assert float(opt2.loss_scale) == scale / 2
    assert _accuracy(other, digits[1]) == accuracy
