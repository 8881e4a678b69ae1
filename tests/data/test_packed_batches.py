"""Training batches of packed rows (`PackedBatches`): every pair of an epoch exactly once,
whole and in one row; one batch shape that the budget allows; resumable by batch number; and
the tf.data view of the same batches."""

import numpy as np
import pytest

from t2t_repro.data import packed_batches
from t2t_repro.data.packed_batches import PackedBatches, packed_dataset
from t2t_repro.data.token_arrays import TokenArrays

MAX_LENGTH = 12


def random_pairs(count, seed=5):
    rng = np.random.default_rng(seed)
    return [(rng.integers(2, 50, rng.integers(1, MAX_LENGTH + 4)).tolist(),
             rng.integers(2, 50, rng.integers(1, MAX_LENGTH + 4)).tolist())
            for _ in range(count)]


def pairs_in(features):
    """The (source, target) id lists of every pair in a batch of packed rows, row by row."""
    found = []
    for row in range(len(features["inputs"])):
        source_segments = features["inputs_segmentation"][row]
        target_segments = features["targets_segmentation"][row]
        for segment in range(1, target_segments.max() + 1):
            source = features["inputs"][row][source_segments == segment]
            target = features["targets"][row][target_segments == segment]
            assert np.array_equal(features["inputs_position"][row][source_segments == segment],
                                  np.arange(len(source)))
            found.append((source.tolist(), target.tolist()))
    return found


def test_an_epoch_holds_every_kept_pair_once_in_batches_of_one_shape():
    pairs = random_pairs(300)
    batches = PackedBatches(TokenArrays.from_pairs(pairs), budget=100, max_length=MAX_LENGTH,
                            repeat=False, seed=3, rows_multiple=2)
    assert batches.rows == 8  # 100 // 12 = 8 rows, a multiple of 2
    served = []
    for features, targets in batches:
        assert all(array.shape == (8, MAX_LENGTH) for array in features.values())
        assert targets is features["targets"]
        served += pairs_in(features)
    kept = [pair for pair in pairs if max(map(len, pair)) <= MAX_LENGTH]
    assert len(kept) < len(pairs)  # some were too long, and are left out as unpacked
    assert sorted(map(str, served)) == sorted(map(str, kept))


def test_rows_are_batched_across_chunks_so_one_batch_of_an_epoch_at_most_has_empty_rows(
        monkeypatch):
    """Pairs are packed within chunks (here 13 chunks of at most 16 kept pairs); a chunk's
    last rows fill a batch together with the next chunk's, so that one batch at most is short
    of rows."""
    monkeypatch.setattr(packed_batches, "CHUNK_SIZE", 16)
    pairs = random_pairs(300)
    batches = PackedBatches(TokenArrays.from_pairs(pairs), budget=100, max_length=MAX_LENGTH,
                            repeat=False, seed=3)
    for epoch in range(3):
        row_counts = [len(rows) for rows in batches.epoch_plan(epoch)]
        assert sum(count < batches.rows for count in row_counts) <= 1, row_counts
    served = [pair for features, _ in batches for pair in pairs_in(features)]
    kept = [pair for pair in pairs if max(map(len, pair)) <= MAX_LENGTH]
    assert sorted(map(str, served)) == sorted(map(str, kept))


def test_batches_resume_at_a_batch_number_and_each_epoch_has_its_own_order():
    batches = PackedBatches(TokenArrays.from_pairs(random_pairs(200)), budget=60,
                            max_length=MAX_LENGTH, seed=3)
    stream = batches.batches()
    first = [next(stream)[0] for _ in range(40)]
    resumed = batches.batches(start=25)
    for expected in first[25:]:
        actual = next(resumed)[0]
        assert all(np.array_equal(actual[key], expected[key]) for key in expected)
    epoch_length = len(batches.epoch_plan(0))
    assert batches.epoch_plan(0) != batches.epoch_plan(1)
    assert epoch_length < 40  # the stream above went on into the second epoch


def test_the_tf_data_view_serves_the_same_batches():
    batches = PackedBatches(TokenArrays.from_pairs(random_pairs(50)), budget=48,
                            max_length=MAX_LENGTH, repeat=False, seed=1)
    dataset = packed_dataset(batches)
    expected = [features for features, _ in batches]
    served = [(features, targets) for features, targets in dataset.as_numpy_iterator()]
    assert len(served) == len(expected)
    for (features, targets), wanted in zip(served, expected):
        assert all(np.array_equal(features[key], wanted[key]) for key in wanted)
        assert np.array_equal(targets, wanted["targets"])


def test_a_budget_below_one_row_is_refused():
    with pytest.raises(ValueError, match="at least max_length"):
        PackedBatches(TokenArrays.from_pairs(random_pairs(5)), budget=10, max_length=MAX_LENGTH)
