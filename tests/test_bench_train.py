"""`bench train`'s batch: the pairs sorted by length, cut at a padded-token budget, and the
batch holding the median pair, worked by hand."""

import numpy as np

from t2t_repro.bench.train import median_batch


def test_the_median_pairs_batch_is_cut_at_the_padded_target_budget():
    # Target lengths 1..7 (sources 10 longer). A budget of 8 padded target tokens cuts the
    # sorted pairs into [1, 2] (adding 3 would pad to 3 x 3 = 9), [3, 4] (2 x 4 = 8), [5]
    # (adding 6: 2 x 6 = 12), [6], [7]. The median pair, length 4, is in [3, 4].
    targets = [list(range(2, 2 + n)) for n in (5, 1, 7, 3, 2, 6, 4)]
    sources = [[9] * (len(t) + 10) for t in targets]
    inputs, batch_targets = median_batch(sources, targets, batch_tokens=8)
    np.testing.assert_array_equal(batch_targets, [[2, 3, 4, 0], [2, 3, 4, 5]])
    np.testing.assert_array_equal(inputs, [[9] * 13 + [0], [9] * 14])


def test_a_budget_smaller_than_one_pair_still_gives_that_pair():
    inputs, targets = median_batch([[5, 1]], [[6, 7, 1]], batch_tokens=1)
    np.testing.assert_array_equal(targets, [[6, 7, 1]])
    np.testing.assert_array_equal(inputs, [[5, 1]])
