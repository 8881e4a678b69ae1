"""Token-budget batching: no batch over budget, long examples dropped, every short one kept."""

import numpy as np
import pytest
import tensorflow as tf

from t2t_repro.data import batching


def examples_of_lengths(lengths, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(2, 50, size=n).tolist() for n in lengths]
    targets = [rng.integers(2, 50, size=max(1, n - 1)).tolist() for n in lengths]
    dataset = tf.data.Dataset.from_tensor_slices(
        {"inputs": tf.ragged.constant(inputs), "targets": tf.ragged.constant(targets)}
    )
    return dataset.map(dict)


def test_batches_stay_within_the_token_budget_and_long_examples_are_dropped():
    lengths = np.random.default_rng(1).integers(1, 80, size=3000)
    max_length, budget = 64, 512
    dataset = batching.filter_by_max_length(examples_of_lengths(lengths), max_length)
    dataset = batching.batch_by_token_budget(dataset, budget, max_length)
    seen = 0
    for batch in dataset:
        rows, width = batch["inputs"].shape
        longest = max(width, batch["targets"].shape[1])
        assert rows * longest <= budget
        assert longest <= max_length
        seen += rows
    assert seen == int(np.sum(lengths <= max_length))


def test_bucket_boundaries_cover_every_length_up_to_max_length():
    boundaries = batching.length_bucket_boundaries(256)
    assert boundaries == sorted(set(boundaries))
    assert boundaries[-1] == 257
    assert all(b2 / b1 <= 1.1 + 1e-9 or b2 - b1 == 1 for b1, b2 in zip(boundaries, boundaries[1:-1]))


def test_budget_smaller_than_max_length_is_refused():
    with pytest.raises(ValueError, match="batch_size .*max_length"):
        batching.batch_by_token_budget(examples_of_lengths([3]), 32, 64)
