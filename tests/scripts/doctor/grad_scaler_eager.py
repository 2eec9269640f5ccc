"""Known answer, TF2: an eager GradScaler loop whose gradient passes a float16 cast and equals
the scale: every scale from 2**16 (65536 > 65504) up overflows it, so a start at 2**18 skips
three steps."""
import tensorflow as tf
import npu_loss_scale as nls

w = tf.Variable([1.0, -2.0])
opt = tf.keras.optimizers.SGD(0.1)
scaler = nls.GradScaler(init_scale=2.0 ** 18)
for step in range(6):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(tf.cast(w, tf.float16), tf.float32))
        scaled = scaler.scale(loss)
    grads = tape.gradient(scaled, [w])
    scaler.step(opt, list(zip(grads, [w])))
    scaler.update()
