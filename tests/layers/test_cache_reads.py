"""What a decoding step reads from the self-attention cache: in a plain TensorFlow graph the
positions written so far, elsewhere all of them; the same keys, values and mask either way
for the positions both read (NumPy's slicing is the reference); which slots each hypothesis
reads (worked by hand)."""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers.cache_reads import (cached_positions, keys_values_to_read, mask_to_read,
                                          own_slot_mask, slots_and_mask)

SHAPE = (2, 3, 4, 6, 5)  # batch, heads, beam, length, d


def _expected(cache, mask, read):
    """Slot-major NumPy reference: slot j's first `read` positions, then slot j + 1's."""
    batch, heads, beam, _, depth = cache.shape
    keys = cache[:, :, :, :read].reshape(batch, heads, beam * read, depth)
    return keys, mask[..., :read].reshape(*mask.shape[:2], beam * read)


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    keys, values = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    mask = rng.random((SHAPE[0], SHAPE[2], SHAPE[2], SHAPE[3])) < 0.5
    return keys, values, mask


def _read(keys, values, mask, position):
    return (*keys_values_to_read(keys, values, position), mask_to_read(mask, position))


def _read_as(keys, values, mask, position, graph):
    if not graph:
        return _read(keys, values, mask, position)
    import tensorflow as tf

    return tf.function(_read)(keys, values, mask, ops.convert_to_tensor(position))


@pytest.mark.parametrize("position", [0, 2, 5, 9])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_step_reads_the_written_positions_in_a_graph_and_all_elsewhere(arrays, position,
                                                                           graph):
    """Position 9 of a 6-position ring has every index written."""
    if graph and keras.backend.backend() != "tensorflow":
        pytest.skip("a plain TensorFlow graph")
    keys, values, mask = arrays
    read = min(position + 1, SHAPE[3]) if graph else SHAPE[3]
    got = [ops.convert_to_numpy(x) for x in _read_as(keys, values, mask, position, graph)]
    expected_keys, expected_mask = _expected(keys, mask, read)
    np.testing.assert_array_equal(got[0], expected_keys)
    np.testing.assert_array_equal(got[1], _expected(values, mask, read)[0])
    np.testing.assert_array_equal(got[2], expected_mask)


def test_xla_reads_every_position(arrays):
    """A compiled program has one shape for every step: the unwritten positions are read and
    left to the mask."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("TensorFlow's XLA")
    import tensorflow as tf

    keys, values, mask = (ops.convert_to_tensor(a) for a in arrays)
    read = tf.function(_read, jit_compile=True)(keys, values, mask, ops.convert_to_tensor(1))
    assert [tuple(x.shape) for x in read] == [(2, 3, 24, 5), (2, 3, 24, 5), (2, 4, 24)]


def test_the_ring_and_own_slot_mask_by_hand():
    """A ring of 3 positions at position 4 holds positions 3, 4, 2 at indices 0, 1, 2;
    at position 1, indices 0 and 1 only (index 2 would hold position -1: none yet)."""
    assert ops.convert_to_numpy(cached_positions(3, 4)).tolist() == [3, 4, 2]
    assert ops.convert_to_numpy(cached_positions(3, 1)).tolist() == [0, 1, -1]
    mask = ops.convert_to_numpy(own_slot_mask(2, 3, 1))
    assert mask.shape == (1, 2, 2, 3)
    assert mask[0, 0].tolist() == [[True, True, False], [False, False, False]]
    assert mask[0, 1].tolist() == [[False, False, False], [True, True, False]]


def test_the_slots_of_reordered_hypotheses_by_hand():
    """Beam 2, a ring of 3, position 1: both hypotheses extend position 0's hypothesis 1, whose
    position 0 is in slot 1; each writes position 1 into its own slot. Hypothesis 0 reads
    position 0 from slot 1 and position 1 from slot 0; hypothesis 1 reads both from slot 1.
    Index 2 holds no position yet."""
    slots = np.array([[[1, 1, 0], [1, 0, 0]]], np.int32)
    new_slots, mask = (ops.convert_to_numpy(x) for x in slots_and_mask(slots, 1))
    assert new_slots.tolist() == [[[1, 0, 0], [1, 1, 0]]]
    assert mask[0, 0].tolist() == [[False, True, False], [True, False, False]]
    assert mask[0, 1].tolist() == [[False, False, False], [True, True, False]]
