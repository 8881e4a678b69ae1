"""Cutting examples sorted by length into token-budget batches: the NumPy arithmetic shared by
the tf.data pipeline (`batching`) and the TensorFlow-free one (`array_batches`)."""

import numpy as np

# Examples per chunk: within a chunk examples are sorted by length and cut into batches, so its
# size is how finely batches are bucketed by length, and how far training shuffles.
CHUNK_SIZE = 16384


def pack_sorted_lengths(sorted_lengths, budget, rows_multiple=1):
    """Cuts ascending lengths into consecutive batches of at most `budget` padded tokens.

    Returns the batch boundaries as row splits: batch k holds positions
    `splits[k]:splits[k + 1]`. Each batch's size is a multiple of `rows_multiple` except
    possibly the last. Every length must be at most `budget // rows_multiple`.
    """
    sorted_lengths = np.asarray(sorted_lengths, dtype=np.int64)
    splits = [0]
    start, count = 0, len(sorted_lengths)
    while start < count:
        largest = min(count - start, budget // max(int(sorted_lengths[start]), 1))
        # Padded size of the batch [start, start + n) is n × its last (longest) length;
        # it grows with n, so the largest n within budget is found by binary search.
        sizes = np.arange(1, largest + 1) * sorted_lengths[start : start + largest]
        rows = max(1, int(np.searchsorted(sizes, budget, side="right")))
        if rows >= rows_multiple:
            rows -= rows % rows_multiple
        start += rows
        splits.append(start)
    return np.asarray(splits, dtype=np.int64)


def batch_splits(lengths, budget, rows_multiple):
    """Example order (ascending length, stable) and batch splits of one chunk; a last batch
    short of `rows_multiple` rows is filled up with index `len(lengths)`, which names an empty
    row."""
    order = np.argsort(lengths, kind="stable").astype(np.int64)
    splits = pack_sorted_lengths(lengths[order], budget, rows_multiple)
    missing = -len(lengths) % rows_multiple
    if missing:
        order = np.concatenate([order, np.full(missing, len(lengths), np.int64)])
        splits[-1] += missing
    return order, splits
