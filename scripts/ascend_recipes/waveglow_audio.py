"""WaveGlow (built-in/audio): LJSpeech TFRecords of (wav, mel) segments and one 22.05 kHz wav.

The script reads ``./data/tfrecords/ljs_train*.tfrecords`` (relative to its working folder, from
``params.py``) with features ``wav`` [sample_size, 1] and ``mel`` [sample_size // 256 + 1, 80]
as floats, and loads ``--infer_raw_audio_filepath`` with librosa for an inference graph. It
stops once ``int(step / steps_per_epoch) + 1 > --epochs``; ``steps_per_epoch`` is fixed from
LJSpeech's size, so ``--epochs 0`` is how a user asks for a single step. ``FLAG_AUTOTUNE`` is
read from the environment (``run_npu_env.sh`` exports it empty).

Needs librosa < 0.10 (the script pins 0.6.0; ``audio_utils.py`` calls
``librosa.filters.mel(sr, n_fft, ...)`` positionally, keyword-only since 0.10): with
librosa 0.9.2 (and resampy) it trains one step, skipped for the overflow of the 2**32 initial
loss scale, in about 9 minutes on 2 busy cores (the flow model's full size is in ``params.py``).
"""
import struct

import numpy as np

from ascend_recipes import tf_example, write_tfrecord

MODEL_DIR = "TensorFlow/built-in/audio/WaveGlow_ID0024_for_TensorFlow"
# the model size is fixed in params.py: one step takes minutes on 2 cores
TIMEOUT = 900
ENTRY = "train.py"
TF1 = True
CWD = "work"

SAMPLE_SIZE, NUM_MELS, RATE = 16000, 80, 22050


def _wav(path, samples, rate, seed):
    """A mono 16-bit PCM wav file of low-level noise."""
    pcm = (np.random.RandomState(seed).randn(samples) * 2000).astype("<i2").tobytes()
    header = (b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVE"
              + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
              + b"data" + struct.pack("<I", len(pcm)))
    with open(path, "wb") as out:
        out.write(header + pcm)
    return path


def prepare(ctx):
    rng = np.random.RandomState(0)
    frames = SAMPLE_SIZE // (16 * 16) + 1
    records = [tf_example({"wav": [float(v) for v in rng.uniform(-0.5, 0.5, SAMPLE_SIZE)],
                           "mel": [float(v) for v in rng.uniform(-4, 0, frames * NUM_MELS)]})
               for _ in range(4)]
    write_tfrecord(ctx.path("data", "tfrecords", "ljs_train_0_of_0.tfrecords"), records)
    wav = _wav(ctx.path("LJSpeech-1.1", "wavs", "LJ001-0001.wav"), RATE // 4, RATE, 1)
    args = ["--learning_rate", "6e-4", "--epochs", "0", "--decay_steps", "10000",
            "--batch_size", "2", "--infer_raw_audio_filepath", wav]
    return args, {"FLAG_AUTOTUNE": ""}
