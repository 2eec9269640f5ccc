"""``tensorflow.examples.tutorials.mnist.input_data`` for TF1 mode (gone from TF 2.x wheels).

``read_data_sets(train_dir, one_hot=False, dtype=tf.float32, reshape=True, validation_size=5000,
seed=None)`` reads the four MNIST files a script points it at — ``train-images-idx3-ubyte.gz``,
``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz`` —
and returns ``Datasets(train, validation, test)``; each ``DataSet`` has ``images`` (float32 in
[0, 1], flattened to 784 with ``reshape``), ``labels`` (one-hot with ``one_hot``),
``num_examples`` and ``next_batch(batch_size, shuffle=True)``, as TF 1.15's did. Nothing is
downloaded: a missing file is an error naming it.
"""
import collections
import gzip
import os

import numpy as np

Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def _read(path, magic):
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise ValueError("%s: magic number %d, expected %d (an MNIST idx file)" % (path, found,
                                                                                magic))
    if magic == 2051:
        n, rows, cols = (int.from_bytes(data[i:i + 4], "big") for i in (4, 8, 12))
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows, cols, 1)
    n = int.from_bytes(data[4:8], "big")
    return np.frombuffer(data, np.uint8, offset=8)[:n]


class DataSet:
    """Images and labels with TF 1.15's ``next_batch`` (epochs reshuffled)."""

    def __init__(self, images, labels, dtype="float32", reshape=True, seed=None):
        if reshape:
            images = images.reshape(images.shape[0], -1)
        if np.dtype(getattr(dtype, "as_numpy_dtype", dtype)) == np.float32:
            images = images.astype(np.float32) / 255.0
        self._images, self._labels = images, labels
        self._num_examples = images.shape[0]
        self._epochs_completed = 0
        self._index = 0
        self._rng = np.random.RandomState(seed)

    images = property(lambda self: self._images)
    labels = property(lambda self: self._labels)
    num_examples = property(lambda self: self._num_examples)
    epochs_completed = property(lambda self: self._epochs_completed)

    def next_batch(self, batch_size, fake_data=False, shuffle=True):  # pylint: disable=unused-argument
        if self._index == 0 and self._epochs_completed == 0 and shuffle:
            self._shuffle()
        if self._index + batch_size > self._num_examples:
            rest = slice(self._index, self._num_examples)
            images_rest, labels_rest = self._images[rest], self._labels[rest]
            self._epochs_completed += 1
            if shuffle:
                self._shuffle()
            self._index = batch_size - (self._num_examples - self._index)
            return (np.concatenate([images_rest, self._images[:self._index]]),
                    np.concatenate([labels_rest, self._labels[:self._index]]))
        start = self._index
        self._index += batch_size
        return self._images[start:self._index], self._labels[start:self._index]

    def _shuffle(self):
        order = self._rng.permutation(self._num_examples)
        self._images, self._labels = self._images[order], self._labels[order]


def read_data_sets(train_dir, fake_data=False, one_hot=False, dtype="float32", reshape=True,
                   validation_size=5000, seed=None, source_url=None):  # pylint: disable=unused-argument
    """The MNIST files in ``train_dir`` as ``Datasets(train, validation, test)``."""
    paths = [os.path.join(train_dir, name) for name in FILES]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError("read_data_sets(%r): missing %s (nothing is downloaded on the CPU "
                                "emulation; put the MNIST files there)" % (train_dir,
                                                                            ", ".join(missing)))
    train_images, train_labels = _read(paths[0], 2051), _read(paths[1], 2049)
    test_images, test_labels = _read(paths[2], 2051), _read(paths[3], 2049)
    if one_hot:
        train_labels = np.eye(10, dtype=np.float64)[train_labels]
        test_labels = np.eye(10, dtype=np.float64)[test_labels]
    if not 0 <= validation_size <= len(train_images):
        raise ValueError("validation_size must be in [0, %d]; got %r" % (len(train_images),
                                                                        validation_size))
    make = lambda images, labels: DataSet(images, labels, dtype, reshape, seed)  # noqa: E731
    return Datasets(make(train_images[validation_size:], train_labels[validation_size:]),
                    make(train_images[:validation_size], train_labels[:validation_size]),
                    make(test_images, test_labels))


__all__ = [
    "Datasets", "FILES", "DataSet", "read_data_sets",
]
