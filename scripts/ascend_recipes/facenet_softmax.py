"""Facenet (softmax loss): ``src/train_softmax.py`` reads a folder of class folders of aligned
face images (``facenet.get_dataset``), decodes them with ``tf.image.decode_image`` and crops or
pads them to ``--image_size``; Inception-ResNet-v1 needs at least 75 pixels."""
import os

from ascend_recipes import png_bytes

MODEL_DIR = "TensorFlow/built-in/cv/image_classification/Facenet_ID0122_for_TensorFlow"
# inception_resnet_v1 at 80 px: 2 steps took 211-272 s on a loaded 2-core machine
TIMEOUT = 600
ENTRY = "src/train_softmax.py"

_SIZE = 80


def prepare(ctx):
    data = os.path.join(ctx.work, "faces")
    for person in range(3):
        for shot in range(2):
            path = ctx.path("faces", "person_%d" % person, "person_%d_%04d.png" % (person, shot))
            with open(path, "wb") as out:
                out.write(png_bytes(_SIZE, _SIZE, 3, seed=person * 10 + shot))
    args = ["--data_dir", data, "--image_size", str(_SIZE),
            "--logs_base_dir", os.path.join(ctx.out, "logs"),
            "--models_base_dir", os.path.join(ctx.out, "models"),
            "--max_nrof_epochs", "1", "--epoch_size", "2", "--batch_size", "2",
            "--model_def", "models.inception_resnet_v1", "--optimizer", "ADAM",
            "--learning_rate", "0.05", "--keep_probability", "0.8", "--random_crop",
            "--random_flip", "--use_fixed_image_standardization", "--weight_decay", "5e-4"]
    return args, {}
