"""Batches of examples of similar length, filled up to a token budget (paper §5.1).

As in tensor2tensor, a batch's size in tokens is its longest sequence × its number of sentences
(padding counted), and an example's length is the longer of its inputs and targets. The budget is
global: under a distribution strategy each batch is split across the replicas.

The pipeline works on chunks of a few thousand examples at a time, as ragged tensors, so that no
tf.data stage runs once per example (per-example stages cost 20-40 µs each on a 2-core machine,
which would cap the pipeline near the training rate). Within a chunk, examples longer than
`max_length` are dropped, the rest are sorted by length (after a random permutation when
training) and cut greedily into batches: each batch takes as many of the next examples as fit the
budget. This buckets by length as finely as the data allows, and leaves one part-filled batch per
chunk.
"""

import numpy as np
import tensorflow as tf

FEATURES = ("inputs", "targets")


def example_lengths(chunk):
    """Per-example length of a chunk of ragged features: the longer of inputs and targets."""
    return tf.maximum(chunk["inputs"].row_lengths(), chunk["targets"].row_lengths())


def pack_sorted_lengths(sorted_lengths, budget):
    """Cuts ascending lengths into consecutive batches of at most `budget` padded tokens.

    Returns the batch boundaries as row splits: batch k holds positions
    `splits[k]:splits[k + 1]`. Every length must be at most `budget`.
    """
    sorted_lengths = np.asarray(sorted_lengths, dtype=np.int64)
    splits = [0]
    start, count = 0, len(sorted_lengths)
    while start < count:
        largest = min(count - start, budget // max(int(sorted_lengths[start]), 1))
        # Padded size of the batch [start, start + n) is n × its last (longest) length;
        # it grows with n, so the largest n within budget is found by binary search.
        sizes = np.arange(1, largest + 1) * sorted_lengths[start : start + largest]
        start += max(1, int(np.searchsorted(sizes, budget, side="right")))
        splits.append(start)
    return np.asarray(splits, dtype=np.int64)


def _batch_splits(lengths, budget):
    order = np.argsort(lengths, kind="stable")
    return order.astype(np.int64), pack_sorted_lengths(lengths[order], budget)


def chunk_to_batches(chunk, budget, max_length, shuffle, seed=None):
    """The padded batches of one chunk of ragged examples, as a dataset.

    Examples longer than `max_length` are dropped; the others are batched by length within
    `budget` tokens. With `shuffle`, examples of equal length are batched in random order.
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
        lambda lengths: _batch_splits(lengths, budget), [lengths], (tf.int64, tf.int64),
        stateful=False,
    )
    order.set_shape([None])
    splits.set_shape([None])
    batch_indices = tf.RaggedTensor.from_row_splits(order, splits, validate=False)
    batches = {name: tf.gather(chunk[name], batch_indices) for name in FEATURES}
    return tf.data.Dataset.from_tensor_slices(batches).map(
        lambda batch: {name: batch[name].to_tensor() for name in FEATURES}
    )


def batch_by_token_budget(chunks, budget, max_length, shuffle=False, seed=None):
    """Padded batches of at most `budget` tokens from a dataset of ragged example chunks.

    Args:
        chunks: dataset of `{"inputs", "targets"}` ragged int32 tensors `[examples, None]`.
        budget: tokens per batch (longest sequence × sentences), all replicas together.
        max_length: longer examples are dropped (never truncated).
        shuffle: batch equal-length examples in random order (training).
        seed: op seed for that order.
    """
    if budget < max_length:
        raise ValueError(
            f"batch_size ({budget} tokens) must be at least max_length ({max_length}), or "
            f"the longest examples could never fit in a batch."
        )
    return chunks.flat_map(
        lambda chunk: chunk_to_batches(chunk, budget, max_length, shuffle, seed)
    )
