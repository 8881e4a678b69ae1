"""Boolean attention masks; True marks a connection that may be attended to."""

from keras import ops

from t2t_repro.special_ids import PAD_ID


def padding_mask(ids, pad_id=PAD_ID):
    """[batch, length] ids -> [batch, 1, length]: every query may attend to every non-pad key."""
    return ops.expand_dims(ops.not_equal(ids, pad_id), axis=1)


def causal_mask(length):
    """[length, length] lower-triangular mask: position i attends to positions <= i."""
    positions = ops.arange(length)
    return ops.greater_equal(ops.expand_dims(positions, 1), ops.expand_dims(positions, 0))
