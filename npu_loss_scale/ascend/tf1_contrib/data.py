"""``tf.contrib.data``: ``map_and_batch`` and ``parallel_interleave`` on TF 2.x's ``tf.data``."""


def map_and_batch(map_func, batch_size, num_parallel_batches=None, drop_remainder=False,
                  num_parallel_calls=None):
    """``dataset.apply(map_and_batch(f, n))``: map then batch, as the fused TF 1 op did."""
    calls = num_parallel_calls or num_parallel_batches

    def apply(dataset):
        return dataset.map(map_func, num_parallel_calls=calls).batch(
            batch_size, drop_remainder=drop_remainder)

    return apply


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False,
                        buffer_output_elements=None, prefetch_input_elements=None):  # pylint: disable=unused-argument
    """``dataset.apply(parallel_interleave(f, n))``: ``interleave`` with parallel calls."""

    def apply(dataset):
        return dataset.interleave(map_func, cycle_length=cycle_length, block_length=block_length,
                                  num_parallel_calls=cycle_length, deterministic=not sloppy)

    return apply


__all__ = ["map_and_batch", "parallel_interleave"]
