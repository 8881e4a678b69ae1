"""Batches of examples of similar length, filled up to a token budget (paper §5.1).

As in tensor2tensor, a batch's size in tokens is its longest sequence × its number of sentences
(padding counted), and an example's length is the longer of its inputs and targets. The budget is
global: under a distribution strategy each batch is split across the replicas.

The pipeline works on chunks of thousands of examples at a time, as ragged tensors, so that no
tf.data stage runs once per example: even a trivial per-example map costs about 40 µs per
example on a 2-core machine, where tensor2tensor's per-example bucketing reaches about 11k
sentence pairs/s and this pipeline 75-86k (`python -m t2t_repro.bench pipeline`). Within a
chunk, examples longer than `max_length` are dropped, the rest are sorted by length (after a
random permutation when training) and cut greedily into batches: each batch takes as many of the
next examples as fit the budget. This buckets by length as finely as the data allows, and leaves
one part-filled batch per chunk. When training, the chunk's batches are then served in random
order.
"""

import functools

import tensorflow as tf

from t2t_repro.data.packing import batch_splits

FEATURES = ("inputs", "targets")


def example_lengths(chunk):
    """Per-example length of a chunk of ragged features: the longer of inputs and targets."""
    return tf.maximum(chunk["inputs"].row_lengths(), chunk["targets"].row_lengths())


# The pipeline's functions are plain TensorFlow without Python control flow on tensors; marked
# so, tf.data does not have autograph rewrite them in every new process (0.4 s of a start),
# each into a file in the temporary folder that a killed process leaves behind.
@tf.autograph.experimental.do_not_convert
def with_targets_as_labels(features):
    """`(features, targets)`: a batch as Keras's `fit` and the training runs take it."""
    return features, features["targets"]


@tf.autograph.experimental.do_not_convert
def chunk_to_batches(chunk, budget, max_length, shuffle, seed=None, rows_multiple=1):
    """The padded batches of one chunk of ragged examples, as a dataset.

    Examples longer than `max_length` are dropped; the others are batched by length within
    `budget` tokens, in batches of a multiple of `rows_multiple` rows (the chunk's last batch
    is filled up with empty rows, all padding). With `shuffle`, examples of equal length are
    batched in random order and the batches come out in random order.
    """
    chunk = {name: chunk[name].with_row_splits_dtype(tf.int64) for name in FEATURES}
    lengths = example_lengths(chunk)
    kept = lengths <= max_length
    chunk = {name: tf.ragged.boolean_mask(chunk[name], kept) for name in FEATURES}
    lengths = tf.boolean_mask(lengths, kept)
    if shuffle:
        permutation = tf.random.shuffle(tf.range(tf.size(lengths, out_type=tf.int64)), seed=seed)
        chunk = {name: tf.gather(chunk[name], permutation) for name in FEATURES}
        lengths = tf.gather(lengths, permutation)
    order, splits = tf.numpy_function(
        lambda lengths: batch_splits(lengths, budget, rows_multiple), [lengths],
        (tf.int64, tf.int64), stateful=False,
    )
    order.set_shape([None])
    splits.set_shape([None])
    batch_indices = tf.RaggedTensor.from_row_splits(order, splits, validate=False)
    if shuffle:
        # The batches come out sorted by length; served in that order, training would sweep
        # from short to long sentences through every chunk.
        batch_order = tf.random.shuffle(tf.range(batch_indices.nrows()), seed=seed)
        batch_indices = tf.gather(batch_indices, batch_order)
    empty_row = tf.RaggedTensor.from_row_lengths(
        tf.zeros([0], tf.int32), tf.zeros([1], tf.int64), validate=False
    )
    batches = {
        name: tf.gather(tf.concat([chunk[name], empty_row], axis=0), batch_indices)
        for name in FEATURES
    }
    return tf.data.Dataset.from_tensor_slices(batches).map(
        lambda batch: {name: batch[name].to_tensor() for name in FEATURES}
    )


def batch_by_token_budget(chunks, budget, max_length, shuffle=False, seed=None,
                          rows_multiple=1):
    """Padded batches of at most `budget` tokens from a dataset of ragged example chunks.

    Args:
        chunks: dataset of `{"inputs", "targets"}` ragged int32 tensors `[examples, None]`.
        budget: tokens per batch (longest sequence × sentences), all replicas together.
        max_length: longer examples are dropped (never truncated).
        shuffle: batch equal-length examples, and serve each chunk's batches, in random order
            (training).
        seed: op seed for those orders.
        rows_multiple: rows per batch are a multiple of this: the number of replicas, so
            that a distribution strategy splits every batch evenly (Keras fails on uneven
            splits under MirroredStrategy).
    """
    if budget < max_length * rows_multiple:
        raise ValueError(
            f"batch_size ({budget} tokens) must be at least max_length ({max_length}) × "
            f"{rows_multiple} replica(s), or the longest examples could never fit in a batch."
        )
    return chunks.flat_map(functools.partial(
        chunk_to_batches, budget=budget, max_length=max_length, shuffle=shuffle, seed=seed,
        rows_multiple=rows_multiple))
