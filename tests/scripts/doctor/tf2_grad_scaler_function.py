"""Known answer, TF2: a GradScaler loop whose step is a tf.function. The gradient passes a
float16 cast and equals the scale, so every scale above 65504 overflows it: a start at 2**18
skips the steps at 2**18, 2**17 and 2**16, and the step at 2**15 is applied."""
import tensorflow as tf
import npu_loss_scale as nls

w = tf.Variable([1.0, -2.0])
opt = tf.keras.optimizers.SGD(0.1)
scaler = nls.GradScaler(init_scale=2.0 ** 18)


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(tf.cast(w, tf.float16), tf.float32))
        scaled = scaler.scale(loss)
    grads = tape.gradient(scaled, [w])
    scaler.step(opt, list(zip(grads, [w])))
    scaler.update()
    return loss


for step in range(8):
    print("step", step, "loss", float(train_step()))
