"""Moving attention heads between axes 1 and 2: [batch, a, b, depth] -> [batch, b, a, depth].

With oneDNN on (the commands turn it on on every CPU), TensorFlow's graph rewrite runs a
float32 or bfloat16 Transpose as oneDNN's reorder, which at decoding's shapes ([32 sentences ×
4 hypotheses, 8 heads, 64]) is 3–5× slower than TensorFlow's own kernel: 48 such transposes
took 15% of a bfloat16 beam-search step (docs/performance.md). The rewrite leaves other types
to TensorFlow's kernel, so in a TensorFlow graph the same bytes are moved as 8-byte complex64
words (a bitcast costs no copy; the kernel moves a word per element, so a head row of 64
float32 is 32 moves). Complex rather than integer words: on a CPU without AVX-512 the rewrite
logs an error line ("oneDNN supports DT_INT32 only on platforms with AVX-512") when it passes
over an integer Transpose, and none for a complex one. A depth the word does not divide is
moved as integers of the element's width. Eagerly, under XLA and on the other backends it is
`keras.ops.transpose`.
"""

import functools

from keras import ops

from t2t_repro.layers.tensorflow_graph import tensorflow_graph_outside_xla

_SWAP = (0, 2, 1, 3)
_SAME_WIDTH_INTEGER = {"float16": "int16", "bfloat16": "int16", "float32": "int32",
                       "float64": "int64"}
_WORD_BYTES = 8  # one complex64


def swap_heads_axis(x):
    """`x` [batch, a, b, depth] as [batch, b, a, depth]: heads split off the model width moved
    before the length axis, or back."""
    if tensorflow_graph_outside_xla() and ops.dtype(x) in _SAME_WIDTH_INTEGER:
        return _swap_as_words()(x)
    return ops.transpose(x, _SWAP)


@functools.cache
def _swap_as_words():
    """The swap through complex64 words (or same-width integers), with its gradient:
    TensorFlow's bitcast has none, and the swap is its own inverse, so the gradient is the
    upstream gradient swapped."""
    import tensorflow as tf

    def swap(x):
        per_word = _WORD_BYTES // x.dtype.size
        depth = x.shape[3]
        if depth is None or depth % per_word:
            integers = tf.bitcast(x, _SAME_WIDTH_INTEGER[x.dtype.name])
            return tf.bitcast(tf.transpose(integers, _SWAP), x.dtype)
        dynamic = tf.shape(x)
        batch, a, b = (x.shape[i] if x.shape[i] is not None else dynamic[i] for i in range(3))
        if per_word > 1:
            x = tf.reshape(x, [batch, a, b, depth // per_word, per_word])
        swapped = tf.bitcast(tf.transpose(tf.bitcast(x, tf.complex64), _SWAP), x.dtype)
        return tf.reshape(swapped, [batch, b, a, depth])

    @tf.custom_gradient
    def swapped(x):
        return swap(x), swap

    return swapped
