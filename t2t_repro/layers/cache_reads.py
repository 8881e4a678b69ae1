"""What a decoding step reads from the decoder's self-attention cache, and which of it each
hypothesis may attend to.

The cache is [batch, heads, beam, length, d]: `length` positions of keys (or values) in each of
`beam` slots per sentence. It is a ring (`cached_positions`), and beam search reorders
hypotheses without copying it: a mask [batch, beam, beam, length] says which slot holds each
earlier position of each hypothesis (`Transformer.decode_step`).

A compiled program (XLA: JAX, TensorFlow with `jit_compile`) has one shape for every step, so
a step reads all `length` positions, the ones not yet written masked. A plain TensorFlow graph
takes a shape per step: there a step reads the positions written so far only. Copying those
out of the cache costs less than attending to every position while most of it is unwritten,
and a search's cache has room for the longest output the batch may reach (source length + 50
tokens by default), far more than most steps have written (docs/performance.md, "Reading only
the positions written").
"""

from keras import ops

from t2t_repro.layers.tensorflow_graph import tensorflow_graph_outside_xla


def cached_positions(length, position):
    """[length]: the position whose keys and values each index of a cache of `length`
    positions holds once `position` is written (negative: none yet).

    The cache is a ring: position p is written at index p % length. A cache as long as the
    output never wraps; one of r positions holds the last r, exactly what a restricted
    self-attention of window r reads, so the window costs no mask of its own here.
    """
    return position - (position - ops.arange(length)) % length


def own_slot_mask(beam_size, length, position):
    """[1, beam, beam, length] boolean: hypothesis i reads the positions written into slot i."""
    slots = ops.arange(beam_size)
    same_slot = ops.expand_dims(slots, 1) == ops.expand_dims(slots, 0)
    filled = cached_positions(length, position) >= 0
    return ops.expand_dims(ops.logical_and(ops.expand_dims(same_slot, 2), filled), 0)


def keys_values_to_read(keys, values, mask, position):
    """The keys and values [batch, heads, beam·n, d] a step at `position` attends to and their
    mask [batch, beam, beam·n], from the cache `keys`, `values` [batch, heads, beam, length, d]
    once `position` is written and its mask [batch or 1, beam, beam, length].

    n is `length` in a compiled program, and min(position + 1, length), the indices written
    so far, in a plain TensorFlow graph (see the module's docstring). Keys are slot-major:
    slot j's n positions, then slot j + 1's.
    """
    if tensorflow_graph_outside_xla():
        written = ops.minimum(position + 1, ops.shape(keys)[3])
        keys, values = keys[:, :, :, :written], values[:, :, :, :written]
        mask = mask[..., :written]
    return _merge_slots(keys), _merge_slots(values), _merge_slots(mask)


def _merge_slots(x):
    """Axes 2 and 3 (beam, n) of the cache or its mask merged into one of beam·n."""
    shape = ops.shape(x)
    return ops.reshape(x, (shape[0], shape[1], shape[2] * shape[3], *shape[4:]))
