"""The beam step's reductions over a vocabulary: the block top-k returns NumPy's stable sort's
first k entries (values, indices, order, ties), and the log-normaliser equals a float64
log-sum-exp."""

import numpy as np
import pytest
from keras import ops

from t2t_repro.decoding.logit_reductions import (BLOCK_WIDTH, MIN_WIDTH_FOR_BLOCKS,
                                                 block_width, log_normaliser, top_k)


def numpy_top_k(x, k):
    """The k largest of each row, largest first, the lower index first among equals."""
    ids = np.argsort(-x, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(x, ids, axis=1), ids


def logits(rows, width, seed, decimals=None):
    x = np.random.default_rng(seed).normal(0.0, 3.0, (rows, width)).astype(np.float32)
    return x if decimals is None else np.round(x, decimals)


def assert_top_k_is_numpys(x, k):
    values, ids = (ops.convert_to_numpy(t) for t in top_k(ops.convert_to_tensor(x), k))
    expected_values, expected_ids = numpy_top_k(x, k)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(values, expected_values)


@pytest.mark.parametrize("width", [37000, 4096, 4099])  # blocks of 74, of 64, padded 128s
@pytest.mark.parametrize("k", [1, 8, 32])
def test_block_top_k_is_the_sorted_rows_first_k(width, k):
    assert_top_k_is_numpys(logits(6, width, seed=k), k)


@pytest.mark.parametrize("width", [37000, 4099])
def test_ties_rank_the_lower_index_first(width):
    """Rounded to one decimal, thousands of entries share each value; the k-th largest ties
    across blocks, and among equals the lower index must win as in `ops.top_k`."""
    x = logits(6, width, seed=1, decimals=1)
    x[1] = 0.5  # a whole row of equal values: the first k indices
    x[2, ::97] = x[2].max()  # the largest value repeated in many blocks
    # The block with the larger maximum comes later in the row: its 3.0 and its -10s rank after
    # the first block's equal ones.
    x[3] = -10.0
    x[3, [10, 20, 200, 210]] = [5.0, 3.0, 9.0, 3.0]
    assert_top_k_is_numpys(x, 8)


@pytest.mark.parametrize("width", [37000, 4099])
def test_the_k_largest_in_one_block_or_masked_rows(width):
    """All of a row's largest entries in one block (the others' maxima rank below them), and
    rows where all but a few entries are masked to -1e9 as the beam search masks them (the
    padding of the last block must rank below those)."""
    x = logits(4, width, seed=2)
    x[0, 500:508] = 50.0 + np.arange(8)
    x[1, :] = -1e9
    x[1, [width - 1, 3, 2000]] = [1.0, 2.0, 1.0]
    x[2, 1:] = -1e9
    assert_top_k_is_numpys(x, 8)


def test_narrow_rows_and_large_k_take_the_plain_top_k():
    assert_top_k_is_numpys(logits(3, MIN_WIDTH_FOR_BLOCKS - 1, seed=3), 8)
    assert_top_k_is_numpys(logits(3, MIN_WIDTH_FOR_BLOCKS, seed=4), 40)  # 32 blocks of 64


@pytest.mark.parametrize("width, expected", [(37000, 74), (32000, 64), (4099, BLOCK_WIDTH),
                                             (33708, 106)])
def test_the_block_width_divides_the_row_where_a_width_in_range_does(width, expected):
    assert block_width(width) == expected


def test_the_log_normaliser_is_a_float64_log_sum_exp():
    """Flat rows, a row with one dominant logit (its probability near 1), a row whose largest
    logit is far from all others below it, and masked entries."""
    x = logits(5, 37000, seed=5)
    x[1, 7] = 80.0
    x[2] *= 30.0
    x[3, :2] = -1e9
    x[4] = 0.0
    argmax = x.argmax(axis=1)[:, None]
    got = ops.convert_to_numpy(log_normaliser(
        ops.convert_to_tensor(x), ops.convert_to_tensor(np.take_along_axis(x, argmax, 1)),
        ops.convert_to_tensor(argmax.astype(np.int32))))
    expected = np.logaddexp.reduce(x.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert got[4, 0] == pytest.approx(np.log(37000), abs=1e-5)
