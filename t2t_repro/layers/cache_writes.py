"""Writing one position into a preallocated attention cache, in place where the backend allows.

`keras.ops.slice_update` is XLA's dynamic-update-slice on every backend. Inside an XLA program
(JAX, TensorFlow with `jit_compile`) it writes into the loop's buffer in place, but in a plain
TensorFlow graph the op runs as a small XLA program of its own that copies the whole cache on
every call, twice per layer and step of a beam search (docs/performance.md measures the cost).
TensorFlow's own `TensorStridedSliceUpdate` writes into its input's buffer when nothing else
holds it, which the decoder's data flow ensures (each step's reads of the cache finish before
the next step's write can start). XLA refuses that op's position when it is a loop variable, so
it is used only outside XLA.
"""

from keras import ops

from t2t_repro.layers.tensorflow_graph import tensorflow_graph_outside_xla


def write_position(cache, index, new):
    """`cache` [batch, heads, beam, length, d] with `new` [batch, heads, beam, d] at `index`
    (a scalar, possibly a tensor) of its length axis."""
    new = ops.expand_dims(new, 3)
    if not tensorflow_graph_outside_xla():
        return ops.slice_update(cache, (0, 0, 0, index, 0), new)
    import tensorflow as tf

    # As rows of length·d values the write is one contiguous run per row, which TensorFlow's
    # kernel copies about twice as fast as the 5-D slice.
    shape = tf.shape(cache)
    depth = shape[4]
    rows = tf.reshape(cache, [-1, shape[3] * depth])
    written = tf.raw_ops.TensorStridedSliceUpdate(
        input=rows, begin=tf.stack([0, index * depth]),
        end=tf.stack([tf.shape(rows)[0], (index + 1) * depth]), strides=[1, 1],
        value=tf.reshape(new, [-1, depth]))
    return tf.reshape(written, shape)

