"""Known answer, TF2: a GradScaler step in a tf.function that also logs a float16 exp of the
weights, exp(20 * 1) = 4.9e8 > 65504: an overflow with no path to the loss or the gradients
(benign), while the gradient (the scale, 2**10, through a float16 cast) never overflows. The
step returns the loss and the metric."""
import tensorflow as tf
import npu_loss_scale as nls

w = tf.Variable([1.0, -2.0])
opt = tf.keras.optimizers.SGD(0.1)
scaler = nls.GradScaler(init_scale=2.0 ** 10)


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(tf.cast(w, tf.float16), tf.float32))
        scaled = scaler.scale(loss)
    metric = tf.reduce_max(tf.cast(tf.exp(tf.cast(w * 20.0, tf.float16)), tf.float32))
    grads = tape.gradient(scaled, [w])
    scaler.step(opt, list(zip(grads, [w])))
    scaler.update()
    return loss, metric


for step in range(6):
    loss, metric = train_step()
    print("step", step, "loss", float(loss), "metric", float(metric))
