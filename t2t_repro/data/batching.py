"""Batches of examples of similar length, filled up to a token budget (paper §5.1).

As in tensor2tensor, a batch's size in tokens is its longest sequence × its number of
sentences (padding counted), and an example's length is the longer of its inputs and targets.
"""

import tensorflow as tf


def length_bucket_boundaries(max_length, min_boundary=8, growth=1.1):
    """Exclusive upper bounds of the length buckets: 8, 9, ..., growing by ~10% up to max_length."""
    boundaries = []
    boundary = min_boundary
    while boundary < max_length:
        boundaries.append(boundary)
        boundary = max(boundary + 1, int(boundary * growth))
    return boundaries + [max_length + 1]


def example_length(example):
    return tf.maximum(tf.size(example["inputs"]), tf.size(example["targets"]))


def filter_by_max_length(dataset, max_length):
    """Drops examples whose inputs or targets are longer than `max_length` tokens."""
    return dataset.filter(lambda example: example_length(example) <= max_length)


def batch_by_token_budget(dataset, batch_size_tokens, max_length):
    """Groups examples into padded batches of at most `batch_size_tokens` tokens.

    Examples must already be at most `max_length` long (see `filter_by_max_length`). Each
    bucket holds lengths below its boundary, so a batch of budget // boundary sentences padded
    to its longest member never exceeds the budget.
    """
    if batch_size_tokens < max_length:
        raise ValueError(
            f"batch_size ({batch_size_tokens} tokens) must be at least max_length "
            f"({max_length}), or the longest examples could never fit in a batch."
        )
    boundaries = length_bucket_boundaries(max_length)
    batch_sizes = [max(1, batch_size_tokens // (boundary - 1)) for boundary in boundaries]
    # tf.data wants one more batch size than boundaries, for lengths past the last boundary,
    # which filtering has already removed.
    batch_sizes.append(1)
    return dataset.bucket_by_sequence_length(
        element_length_func=example_length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padded_shapes={"inputs": [None], "targets": [None]},
    )
