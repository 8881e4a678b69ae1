"""Moving heads between axes 1 and 2: NumPy's transpose eagerly, in a TensorFlow graph
(through complex64 words, or same-width integers for a depth they do not divide: out of
oneDNN's reach) and under XLA, with the transpose's gradient in a graph."""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers.head_transpose import swap_heads_axis

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="the TensorFlow graph path")

# batch, a, b, depth: a depth of 8 fills 8-byte words of float32, bfloat16 and float16; one of
# 6 only float32's; one of 5 none.
DEPTHS = [8, 6, 5]


@pytest.fixture(params=DEPTHS, ids=lambda depth: f"depth {depth}")
def array(request):
    return np.random.default_rng(0).standard_normal((3, 4, 8, request.param)).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("jit_compile", [None, False, True], ids=["eager", "graph", "xla"])
def test_the_swap_equals_numpy_transpose(array, dtype, jit_compile):
    import tensorflow as tf

    swap = swap_heads_axis if jit_compile is None else tf.function(swap_heads_axis,
                                                                   jit_compile=jit_compile)
    swapped = swap(ops.cast(array, dtype))
    assert swapped.dtype == dtype
    expected = ops.convert_to_numpy(ops.cast(ops.cast(array, dtype), "float32"))
    np.testing.assert_array_equal(ops.convert_to_numpy(ops.cast(swapped, "float32")),
                                  np.transpose(expected, (0, 2, 1, 3)))


@pytest.mark.parametrize("depth, dtype, words", [
    (8, "float32", "complex64"), (8, "bfloat16", "complex64"), (8, "float16", "complex64"),
    (6, "float32", "complex64"), (6, "bfloat16", "int16"), (5, "float32", "int32")])
def test_a_plain_graph_transposes_words_out_of_onednns_reach_and_xla_the_floats(depth, dtype,
                                                                                  words):
    """Outside XLA no float Transpose may be left for oneDNN's rewrite, and no integer one
    where a complex64 word holds a whole number of elements; XLA lays out operands itself and
    gets the plain transpose."""
    import tensorflow as tf

    def transposed_types(jit_compile):
        function = tf.function(swap_heads_axis, jit_compile=jit_compile)
        graph = function.get_concrete_function(tf.zeros((3, 4, 8, depth), dtype)).graph
        return {op.get_attr("T").name for op in graph.get_operations() if op.type == "Transpose"}

    assert transposed_types(False) == {words}
    assert transposed_types(True) == {dtype}


def test_unknown_leading_sizes_keep_the_words_and_give_the_swapped_shape():
    """As a search traced for several batch shapes sees it."""
    import tensorflow as tf

    function = tf.function(swap_heads_axis).get_concrete_function(
        tf.TensorSpec((None, None, 8, 64), tf.float32))
    assert function.output_shapes.as_list() == [None, 8, None, 64]
    array = np.random.default_rng(2).standard_normal((2, 3, 8, 64)).astype(np.float32)
    np.testing.assert_array_equal(function(tf.constant(array)).numpy(),
                                  np.transpose(array, (0, 2, 1, 3)))


def test_the_gradient_in_a_graph_is_the_upstream_gradient_swapped(array):
    import tensorflow as tf

    upstream = np.random.default_rng(1).standard_normal(
        np.transpose(array, (0, 2, 1, 3)).shape).astype(np.float32)

    @tf.function
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(swap_heads_axis(x) * upstream)
        return tape.gradient(loss, x)

    np.testing.assert_array_equal(gradient(tf.constant(array)).numpy(),
                                  np.transpose(upstream, (0, 2, 1, 3)))
