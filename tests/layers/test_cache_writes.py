"""Writing one position into the attention cache: the same values eagerly, in a TensorFlow
graph (TensorFlow's in-place strided update, the bytes moved as words as wide as a head's
row allows), under XLA and inside a graph loop, as NumPy's assignment."""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers.cache_writes import elements_per_word, write_position

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="the TensorFlow graph path")

SHAPE = (2, 3, 4, 5, 6)  # batch, heads, beam, length, d


def _expected(cache, index, new):
    written = cache.copy()
    written[:, :, :, index] = new
    return written


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    cache = rng.standard_normal(SHAPE).astype(np.float32)
    new = rng.standard_normal(SHAPE[:3] + SHAPE[4:]).astype(np.float32)
    return cache, new


def test_a_heads_row_is_moved_as_the_widest_words_that_divide_it():
    """Words of 16 bytes at most (complex128)."""
    assert [elements_per_word(4, depth) for depth in (64, 6, 5, None)] == [4, 2, 1, 1]
    assert [elements_per_word(2, depth) for depth in (64, 12, 6, 5)] == [8, 4, 2, 1]
    assert [elements_per_word(8, depth) for depth in (64, 3)] == [2, 1]


@pytest.mark.parametrize("jit_compile", [None, False, True], ids=["eager", "graph", "xla"])
@pytest.mark.parametrize("index", [0, 3, 4])
def test_write_position_equals_numpy_assignment(arrays, jit_compile, index):
    import tensorflow as tf

    cache, new = arrays
    write = write_position if jit_compile is None else tf.function(write_position,
                                                                   jit_compile=jit_compile)
    written = write(ops.convert_to_tensor(cache), ops.convert_to_tensor(index),
                    ops.convert_to_tensor(new))
    np.testing.assert_array_equal(ops.convert_to_numpy(written), _expected(cache, index, new))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("depth", [8, 6, 5])
def test_a_graph_writes_heads_of_every_width_and_depth(dtype, depth):
    """Depth 8 of bfloat16 goes as complex128 words, 6 as int32, 5 element by element; 8 of
    float32 as complex128. The values are small integers, exact in every dtype."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    cache = rng.integers(-100, 100, SHAPE[:4] + (depth,)).astype(np.float32)
    new = rng.integers(-100, 100, SHAPE[:3] + (depth,)).astype(np.float32)
    written = tf.function(write_position)(ops.cast(cache, dtype), ops.convert_to_tensor(3),
                                          ops.cast(new, dtype))
    assert written.dtype == dtype
    np.testing.assert_array_equal(ops.convert_to_numpy(ops.cast(written, "float32")),
                                  _expected(cache, 3, new))


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_a_graph_loop_writes_every_position_in_turn(arrays, jit_compile):
    import tensorflow as tf

    cache, new = arrays

    @tf.function(jit_compile=jit_compile)
    def fill(cache, new):
        def step(index, cache):
            return index + 1, write_position(cache, index, new * ops.cast(index, "float32"))

        return ops.while_loop(lambda index, cache: index < SHAPE[3], step,
                              (ops.convert_to_tensor(0), cache))[1]

    expected = cache
    for index in range(SHAPE[3]):
        expected = _expected(expected, index, new * index)
    filled = fill(ops.convert_to_tensor(cache), ops.convert_to_tensor(new))
    np.testing.assert_array_equal(ops.convert_to_numpy(filled), expected)


def test_a_plain_graph_writes_with_the_in_place_op_and_xla_with_its_own(arrays):
    """Outside XLA the write must not be XLA's dynamic-update-slice, which TensorFlow runs as a
    program of its own that copies the whole cache; XLA refuses the in-place op's
    loop-variable position, so there it must be XLA's."""
    import tensorflow as tf

    cache, new = (ops.convert_to_tensor(a) for a in arrays)
    index = ops.convert_to_tensor(2)

    def op_types(jit_compile):
        function = tf.function(write_position, jit_compile=jit_compile)
        graph = function.get_concrete_function(cache, index, new).graph
        return {op.type for op in graph.get_operations()}

    assert "TensorStridedSliceUpdate" in op_types(False)
    assert "XlaDynamicUpdateSlice" not in op_types(False)
    assert "XlaDynamicUpdateSlice" in op_types(True)
