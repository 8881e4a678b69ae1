"""Writing one position into a preallocated attention cache, in place where the backend allows.

`keras.ops.slice_update` is XLA's dynamic-update-slice on every backend. Inside an XLA program
(JAX, TensorFlow with `jit_compile`) it writes into the loop's buffer in place, but in a plain
TensorFlow graph the op runs as a small XLA program of its own that copies the whole cache on
every call, twice per layer and step of a beam search (docs/performance.md measures the cost).
TensorFlow's own `TensorStridedSliceUpdate` writes into its input's buffer when nothing else
holds it, which the decoder's data flow ensures (each step's reads of the cache finish before
the next step's write can start). XLA refuses that op's position when it is a loop variable, so
it is used only outside XLA.

That kernel copies a strided slice element by element, so its time grows with the number of
elements written more than with their width: the new position's bytes are moved as the widest
words that divide a head's row (a bitcast costs no copy), up to 16-byte complex128 words. For
float32 heads of 64 that is 16 words, written in 0.55-0.8 of the time of 32 int64 words on an
AVX2 EPYC (docs/performance.md).
"""

from keras import ops

from t2t_repro.layers.tensorflow_graph import tensorflow_graph_outside_xla

# The types a head's row is moved as, by their width in bytes.
_WORD_TYPES = {2: "int16", 4: "int32", 8: "int64", 16: "complex128"}


def write_position(cache, index, new):
    """`cache` [batch, heads, beam, length, d] with `new` [batch, heads, beam, d] at `index`
    (a scalar, possibly a tensor) of its length axis."""
    new = ops.expand_dims(new, 3)
    if not tensorflow_graph_outside_xla():
        return ops.slice_update(cache, (0, 0, 0, index, 0), new)
    import tensorflow as tf

    shape = tf.shape(cache)
    per_word = elements_per_word(cache.dtype.size, cache.shape[4])
    words = shape[4] // per_word  # of one position of one head
    # As rows of length·words values the write is one contiguous run per row, which TensorFlow's
    # kernel copies about twice as fast as the 5-D slice.
    rows = _as_words(cache, [-1, shape[3] * words], per_word)
    written = tf.raw_ops.TensorStridedSliceUpdate(
        input=rows, begin=tf.stack([0, index * words]),
        end=tf.stack([tf.shape(rows)[0], (index + 1) * words]), strides=[1, 1],
        value=_as_words(new, [-1, words], per_word))
    if per_word > 1:
        written = tf.bitcast(written, cache.dtype)
    return tf.reshape(written, shape)


def elements_per_word(element_bytes, depth):
    """How many of a head's `depth` elements of `element_bytes` each one word of
    `_WORD_TYPES` holds: the most that divides `depth` (1 when `depth` is not known)."""
    for word_bytes in sorted(_WORD_TYPES, reverse=True):
        count = word_bytes // element_bytes
        if count > 1 and depth is not None and depth % count == 0:
            return count
    return 1


def _as_words(x, shape, per_word):
    """`x` reshaped to `shape`, counted in words of `per_word` elements each (a bitcast, no
    copy); `x` itself reshaped when a word is one element."""
    import tensorflow as tf

    if per_word == 1:
        return tf.reshape(x, shape)
    words = tf.reshape(x, [*shape, per_word])
    return tf.bitcast(words, _WORD_TYPES[x.dtype.size * per_word])
