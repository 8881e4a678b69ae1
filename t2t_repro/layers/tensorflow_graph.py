"""Whether a layer is being traced into a plain TensorFlow graph, where some ops have faster
TensorFlow-specific forms than the backend-agnostic `keras.ops` (`cache_writes`,
`head_transpose`)."""

import keras


def tensorflow_graph_outside_xla():
    """Whether this is TensorFlow tracing a graph that XLA will not compile. TensorFlow has no
    public way to ask; `tf.function(jit_compile=True)` traces inside the XLA context that its
    private `control_flow_util` checks (as its own while loops do)."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    graph = tf.compat.v1.get_default_graph()
    return not tf.executing_eagerly() and not control_flow_util.GraphOrParentsInXlaContext(graph)
