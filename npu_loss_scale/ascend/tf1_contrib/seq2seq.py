"""``tf.contrib.seq2seq``: the ``Decoder`` interface, ``tile_batch`` and ``hardmax``."""
import abc

import tensorflow as tf


class Decoder(metaclass=abc.ABCMeta):
    """``tf.contrib.seq2seq.Decoder``: the interface a decoder run step by step implements
    (``batch_size``, ``output_size``, ``output_dtype``, ``initialize``, ``step``; ``finalize``
    and ``tracks_own_finished`` optional)."""

    @property
    def batch_size(self):
        raise NotImplementedError

    @property
    @abc.abstractmethod
    def output_size(self):
        raise NotImplementedError

    @property
    @abc.abstractmethod
    def output_dtype(self):
        raise NotImplementedError

    @abc.abstractmethod
    def initialize(self, name=None):
        raise NotImplementedError

    @abc.abstractmethod
    def step(self, time, inputs, state, name=None):
        raise NotImplementedError

    def finalize(self, outputs, final_state, sequence_lengths):
        raise NotImplementedError

    @property
    def tracks_own_finished(self):
        return False


def tile_batch(t, multiplier, name=None):
    """``tf.contrib.seq2seq.tile_batch``: each batch entry of every tensor of the structure ``t``
    repeated ``multiplier`` times in place (``[a, b]`` -> ``[a, a, b, b]``), as beam search
    wants its encoder outputs."""
    v1 = tf.compat.v1
    flat = tf.nest.flatten(t)
    with v1.name_scope(name, "tile_batch", flat + [multiplier]):
        def tile(x):
            x = v1.convert_to_tensor(x, name="t")
            if x.shape.ndims is None:
                raise ValueError("t must have statically known rank")
            out = tf.repeat(x, multiplier, axis=0)
            if x.shape.ndims > 0 and x.shape[0] is not None and isinstance(multiplier, int):
                out.set_shape([x.shape[0] * multiplier] + x.shape.as_list()[1:])
            return out
        return tf.nest.map_structure(tile, t)


def hardmax(logits, name=None):
    """``tf.contrib.seq2seq.hardmax``: one-hot of the argmax over the last axis."""
    v1 = tf.compat.v1
    with v1.name_scope(name, "Hardmax", [logits]):
        logits = v1.convert_to_tensor(logits, name="logits")
        depth = tf.compat.dimension_value(logits.get_shape()[-1]) or tf.shape(logits)[-1]
        return tf.one_hot(tf.argmax(logits, -1), depth, dtype=logits.dtype)


__all__ = ["Decoder", "tile_batch", "hardmax"]
