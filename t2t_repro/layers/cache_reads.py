"""What a decoding step reads from the decoder's self-attention cache, and which of it each
hypothesis may attend to.

The cache is [batch, heads, beam, length, d]: `length` positions of keys (or values) in each of
`beam` slots per sentence. It is a ring (`cached_positions`), and beam search reorders
hypotheses without copying it: a mask [batch, beam, beam, length] says which slot holds each
earlier position of each hypothesis (`slots_and_mask`).

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


def slots_and_mask(slots, position):
    """`slots` [batch, beam, length] (`Transformer.empty_decode_cache`'s) with each hypothesis's
    own slot at `position`'s cache index, and the self-attention mask it gives:
    [batch, beam, beam, length], True where slot j holds a position <= `position` of hypothesis
    i's prefix."""
    beam, length = ops.shape(slots)[1], ops.shape(slots)[2]
    held = cached_positions(length, position)
    numbers = ops.arange(beam, dtype="int32")
    slots = ops.where(held == position, ops.reshape(numbers, (1, -1, 1)), slots)
    holds = ops.expand_dims(slots, 2) == ops.reshape(numbers, (1, 1, -1, 1))
    return slots, ops.logical_and(holds, held >= 0)


def own_slot_mask(beam_size, length, position):
    """[1, beam, beam, length] boolean: hypothesis i reads the positions written into slot i
    (nothing reordered: `slots_and_mask` of slots that are each hypothesis's own)."""
    own = ops.broadcast_to(ops.reshape(ops.arange(beam_size, dtype="int32"), (1, -1, 1)),
                           (1, beam_size, length))
    return slots_and_mask(own, position)[1]


def mask_to_read(mask, position):
    """The mask [batch or 1, beam, beam·n] of what a step at `position` reads, from its mask
    [batch or 1, beam, beam, length] (`slots_and_mask`): once per step, for every layer.

    n is `length` in a compiled program, and min(position + 1, length), the indices written
    so far, in a plain TensorFlow graph (see the module's docstring): the n of
    `keys_values_to_read`.
    """
    return _merge_slots(_written_part(mask, position))


def keys_values_to_read(keys, values, position):
    """The keys and values [batch, heads, beam·n, d] a step at `position` attends to, from the
    cache `keys`, `values` [batch, heads, beam, length, d] once `position` is written: slot-major
    (slot j's n positions, then slot j + 1's), as `mask_to_read`'s mask."""
    return (_merge_slots(_written_part(keys, position)),
            _merge_slots(_written_part(values, position)))


def _written_part(x, position):
    """The cache or its mask (axis 3 the cache's length in both) cut to the indices written
    once `position` is, in a plain TensorFlow graph; elsewhere all of `x`."""
    if not tensorflow_graph_outside_xla():
        return x
    return x[:, :, :, :ops.minimum(position + 1, ops.shape(x)[3])]


def _merge_slots(x):
    """Axes 2 and 3 (beam, n) of the cache or its mask merged into one of beam·n."""
    shape = ops.shape(x)
    return ops.reshape(x, (shape[0], shape[1], shape[2] * shape[3], *shape[4:]))
