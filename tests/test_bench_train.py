"""`bench train`'s batch: the pairs sorted by length, cut at a padded-token budget, and the
batch holding the median pair, worked by hand; and the decoding row of its JAX variant."""

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


def test_the_jax_benchs_decode_row_counts_forced_tokens_and_has_its_peak_memory():
    """`bench train --backend=jax --decode_sentences`'s row, on transformer_tiny (the search
    is the same under every backend): sentences of 2, 3 and 5 ids form one batch, each forced
    to round(1.1 x 5) = 6 output tokens, 18 in all; the row has the rate and the process's peak
    memory in the table's columns."""
    from t2t_repro.bench.decode import ALPHA, BEAM_SIZE, forced_batches, timed_decode
    from t2t_repro.bench.report import format_table
    from t2t_repro.bench.train_jax import _decode_row
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch
    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer

    encoded = [[4, 5], [6, 7, 8], [9, 4, 5, 6, 7]]
    model = Transformer(create_hparams("transformer_tiny"), 12, 12).build_weights()
    search = TransformerBeamSearch(model, BEAM_SIZE, ALPHA, force_max_length=True)
    timed = timed_decode(search, forced_batches(encoded))
    assert timed.tokens == 18 and [len(ids) for ids in timed.outputs] == [6, 6, 6]

    what, rate, unit, _, _, peak, _ = _decode_row(3, 12, encoded, "transformer_tiny")
    assert unit == "tok/s" and rate > 0 and peak > 2**20
    assert "transformer_tiny float32: beam-search decoding, 3 newstest2014 sentences" == what
    table = format_table([(what, rate, unit, "", None, peak, None)], "decode")
    assert f"{peak / 2**30:.2f} GiB" in table
