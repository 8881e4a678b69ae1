"""Per-row gathers as takes of whole rows: NumPy's `take_along_axis` on axis 1 with the indices
broadcast over the trailing axes, on every backend; in a TensorFlow graph, no Transpose."""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers.row_gathers import flat_rows, take_rows


def test_flat_rows_by_hand():
    """Rows of [2·5, ...]: sentence 1's rows start at 5."""
    indices = np.array([[4, 0, 2], [1, 1, 3]], np.int32)
    assert ops.convert_to_numpy(flat_rows(ops.convert_to_tensor(indices), 5)).tolist() == [
        4, 0, 2, 6, 6, 8]


@pytest.mark.parametrize("trailing", [(), (7,), (3, 2)], ids=["rank 2", "rank 3", "rank 4"])
def test_take_rows_equals_numpys_take_along_axis(trailing):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, *trailing)).astype(np.float32)
    indices = rng.integers(0, 5, (4, 8)).astype(np.int32)  # more picks than rows, repeats
    expected = np.take_along_axis(x, indices.reshape(4, 8, *[1] * len(trailing)), axis=1)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(take_rows(ops.convert_to_tensor(x), ops.convert_to_tensor(indices))),
        expected)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow graph")
def test_a_graph_of_take_rows_holds_no_transpose_and_keeps_unknown_sizes():
    import tensorflow as tf

    function = tf.function(take_rows).get_concrete_function(
        tf.TensorSpec((None, None, 6), tf.int32), tf.TensorSpec((None, None), tf.int32))
    assert "Transpose" not in {op.type for op in function.graph.get_operations()}
    assert function.output_shapes.as_list() == [None, None, 6]
