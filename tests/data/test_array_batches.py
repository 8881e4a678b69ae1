"""The TensorFlow-free input path: token arrays and their NumPy token-budget batches, on hand
cases (no TensorFlow imported here; the comparison with the tf.data pipeline on real data is in
test_batching.py)."""

import itertools

import numpy as np
import pytest

from hand_cases import HAND_BATCHES, HAND_CHUNK
from t2t_repro.data.array_batches import (ArrayBatches, bucket_boundaries, bucket_length,
                                          prefetched)
from t2t_repro.data.token_arrays import TokenArrays, TokenArrayWriter, exist, paths

def as_lists(batches):
    return [(features["inputs"].tolist(), targets.tolist()) for features, targets in batches]


def random_arrays(count, seed=0, longest=30):
    rng = np.random.default_rng(seed)
    return TokenArrays.from_pairs(
        (rng.integers(2, 50, rng.integers(1, longest)).tolist() + [1],
         rng.integers(2, 50, rng.integers(1, longest)).tolist() + [1]) for _ in range(count))


def test_token_arrays_round_trip_through_the_writer(tmp_path):
    prefix = str(tmp_path / "problem-train")
    with TokenArrayWriter(prefix) as writer:
        for inputs, targets in HAND_CHUNK:
            writer.add(inputs, targets)
    assert exist(prefix) and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.rsplit("/", 1)[1] for p in paths(prefix))
    arrays = TokenArrays.load(prefix)
    assert len(arrays) == len(HAND_CHUNK)
    assert [(arrays[i]["inputs"].tolist(), arrays[i]["targets"].tolist())
            for i in range(len(arrays))] == HAND_CHUNK
    assert arrays.lengths.tolist() == [4, 3, 7, 2, 4, 6]
    swapped = arrays.swapped()
    assert swapped[0]["inputs"].tolist() == [6, 6, 6, 1] and swapped.input_lengths[0] == 4
    assert swapped.swapped()[0]["inputs"].tolist() == [5, 1]
    padded = arrays.padded(np.array([1, -1]), 4, 3)
    assert padded["inputs"].tolist() == [[7, 7, 1, 0], [0, 0, 0, 0]]
    assert padded["targets"].tolist() == [[8, 1, 0], [0, 0, 0]]


def test_an_interrupted_write_leaves_no_arrays(tmp_path):
    prefix = str(tmp_path / "problem-train")
    with pytest.raises(RuntimeError):
        with TokenArrayWriter(prefix) as writer:
            writer.add([3, 1], [4, 1])
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_the_hand_case_packs_as_the_tf_pipeline_does():
    batches = ArrayBatches(TokenArrays.from_pairs(HAND_CHUNK), budget=8, max_length=6)
    assert sorted(as_lists(batches)) == sorted(HAND_BATCHES)


def test_bucket_boundaries_by_hand():
    assert bucket_boundaries(256) == [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160,
                                      192, 224, 256]
    assert bucket_boundaries(50) == [8, 16, 24, 32, 40, 48, 50]
    assert bucket_boundaries(400)[-3:] == [320, 384, 400]
    assert bucket_length([1, 8, 9, 64, 65, 200, 256], 256).tolist() == [8, 8, 16, 64, 80, 224,
                                                                          256]


def test_fixed_shapes_pad_each_batch_to_its_bucket_and_the_budgets_rows():
    arrays = random_arrays(500)
    batches = ArrayBatches(arrays, budget=400, max_length=28, shuffle=True, seed=3,
                           rows_multiple=2, fixed_shapes=True)
    plan = batches.epoch_plan(0)
    seen = []
    for (features, targets), indices in zip(batches, plan):
        rows, width = targets.shape
        assert width in bucket_boundaries(28) and features["inputs"].shape == (rows, width)
        assert rows == 400 // width - (400 // width) % 2
        real = indices[indices >= 0]
        assert arrays.lengths[real].max() <= width
        assert not targets[len(indices):].any()  # rows beyond the batch's examples: padding
        seen += real.tolist()
    kept = np.flatnonzero(arrays.lengths <= 28)
    assert sorted(seen) == kept.tolist() and len(kept) < len(arrays)


def test_epochs_reshuffle_and_the_seed_fixes_the_order():
    arrays = random_arrays(300)

    def plan(seed, epoch):
        batches = ArrayBatches(arrays, 300, 30, shuffle=True, repeat=True, seed=seed)
        return [indices.tolist() for indices in batches.epoch_plan(epoch)]

    assert plan(1, 0) == plan(1, 0)
    assert plan(1, 0) != plan(1, 1) and plan(1, 0) != plan(2, 0)
    assert sorted(sum(plan(1, 0), [])) == sorted(sum(plan(1, 1), []))


def test_resuming_at_batch_n_serves_what_followed_batch_n_across_epochs():
    batches = ArrayBatches(random_arrays(200), 300, 30, shuffle=True, repeat=True, seed=4)
    per_epoch = len(batches.epoch_plan(0))
    start = per_epoch + 3  # inside the second epoch
    straight = as_lists(itertools.islice(batches.batches(), start + 5))
    resumed = as_lists(itertools.islice(batches.batches(start=start), 5))
    assert resumed == straight[start:]


def test_a_budget_below_the_longest_bucket_per_device_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        ArrayBatches(random_arrays(10), budget=50, max_length=30, rows_multiple=2)


def test_prefetched_serves_every_item_in_order_and_passes_errors_on():
    assert list(prefetched(iter(range(10)))) == list(range(10))

    def failing():
        yield 1
        raise OSError("disk gone")

    items = prefetched(failing())
    assert next(items) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(items)
