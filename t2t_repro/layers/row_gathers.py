"""Gathers along axis 1 of [batch, n, ...] tensors by each row's own indices, as takes of
whole rows of the tensor flattened to [batch·n, ...].

`keras.ops.take_along_axis` under TensorFlow broadcasts the indices to the gathered shape and,
for an axis other than the last, moves it last with transposes, of its int64 indices among
them; on some CPUs (AVX2 ones, and a Zen 4 EPYC with AVX-512 too), TensorFlow's oneDNN graph
rewrite logs an error line ("oneDNN supports DT_INT64 only on platforms with AVX-512") when it
passes over an integer Transpose. A take of whole rows needs neither the broadcast nor the
transposes.
"""

import keras
from keras import ops


def flat_rows(indices, n):
    """`indices` [batch, k] into [0, n) as indices [batch·k] of the rows of [batch·n, ...]."""
    offsets = ops.expand_dims(ops.arange(ops.shape(indices)[0], dtype=indices.dtype) * n, 1)
    return ops.reshape(indices + offsets, (-1,))


def take_rows(x, indices):
    """`x` [batch, n, ...] at `indices` [batch, k] into [0, n) -> [batch, k, ...], row b
    holding x[b, indices[b, j]] at j: `take_along_axis` on axis 1 with the indices broadcast
    over the trailing axes."""
    shape = ops.shape(x)
    taken = ops.take(ops.reshape(x, (-1, *shape[2:])), flat_rows(indices, shape[1]), axis=0)
    return ops.reshape(taken, (shape[0], ops.shape(indices)[1], *shape[2:]))


def take_rows_of_each(tensors, rows):
    """Rows `rows` (1-D indices) of every tensor in the structure `tensors`, on axis 0."""
    return keras.tree.map_structure(lambda tensor: ops.take(tensor, rows, axis=0), tensors)
