"""``moxing.tensorflow`` (MoXing's TensorFlow training framework: ``mox.run``, ``ModelSpec``,
``get_optimizer_fn``, ``executor.ops_adapter``, ...) is not emulated: importing it raises."""
from npu_bridge._shim import NotEmulatedError

raise NotEmulatedError(
    "moxing.tensorflow (ModelArts' MoXing training framework: mox.run, mox.ModelSpec, "
    "get_optimizer_fn, executor.ops_adapter, ...) is not emulated on CPU by npu_loss_scale "
    "(python -m npu_loss_scale.emulate); only moxing.file on local paths is. Run the model's "
    "plain TensorFlow entry script instead.", name="moxing.tensorflow")
