"""Boolean attention masks; True marks a connection that may be attended to."""

from keras import ops

from t2t_repro.names import PAD_ID


def padding_mask(ids, pad_id=PAD_ID):
    """[batch, length] ids -> [batch, 1, length]: every query may attend to every non-pad key."""
    return ops.expand_dims(ops.not_equal(ids, pad_id), axis=1)


def same_segment_mask(query_segments, key_segments):
    """[batch, q] and [batch, k] segment ids (packed rows: 1, 2, ... per pair, 0 for padding)
    -> [batch, q, k]: a query attends only to keys of its own pair (padding to padding)."""
    return ops.equal(ops.expand_dims(query_segments, 2), ops.expand_dims(key_segments, 1))


def causal_mask(length):
    """[length, length] lower-triangular mask: position i attends to positions <= i."""
    positions = ops.arange(length)
    return ops.greater_equal(ops.expand_dims(positions, 1), ops.expand_dims(positions, 0))


def band_mask(length, window, causal=False):
    """[length, length] mask of restricted self-attention (paper Table 1, row 4): position i
    attends to positions j with |i - j| < `window`, and with `causal` only to j <= i as well."""
    positions = ops.arange(length)
    return within_window(ops.expand_dims(positions, 1) - ops.expand_dims(positions, 0), window,
                         causal)


def within_window(distance, window, causal=False):
    """True where a query-to-key `distance` (query position minus key position) lies in
    restricted self-attention's window: |distance| < `window`, and >= 0 with `causal`."""
    lower = 0 if causal else 1 - window
    return ops.logical_and(distance >= lower, distance < window)
