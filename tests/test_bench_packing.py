"""`bench packing` times full batches: an epoch's partial batches (rows without a pair) are
left out of the timed steps, on hand-made batches and on real packed and bucketed epochs; its
table gives the padding of the epoch and of the timed batches."""

import numpy as np

from t2t_repro.bench.packing import epoch_batches, timed_batches


def batch(*target_rows):
    targets = np.array(target_rows)
    return {"inputs": targets.copy(), "targets": targets}, targets


def test_batches_with_an_empty_row_are_left_out_and_the_first_full_ones_kept_in_order():
    full_a, full_b, full_c = batch([5, 1], [6, 1]), batch([7, 1], [8, 1]), batch([9, 1], [4, 1])
    remainder = batch([5, 1], [0, 0])  # its second row holds no pair
    chosen = timed_batches([remainder, full_a, full_b, remainder, full_c], steps=2)
    assert [targets.tolist() for _, targets in chosen] == [[[5, 1], [6, 1]], [[7, 1], [8, 1]]]
    assert timed_batches([remainder], steps=3) == []


def test_the_timed_batches_of_real_epochs_are_their_full_ones():
    """Pairs of 2 to 9 tokens at 512-token budgets (rows of 256 when packed, bench packing's
    max_length): the packed epoch ends in a partial batch and fixed shapes fill some batches
    out with empty rows; none of those is timed, and every full batch is, in the epoch's
    order."""
    rng = np.random.default_rng(0)
    pairs = [(list(rng.integers(3, 50, rng.integers(2, 10))),
              list(rng.integers(3, 50, rng.integers(2, 10)))) for _ in range(1000)]
    for batching in ("packed", "bucketed to fixed shapes"):
        batches = epoch_batches(pairs, batching, 512)
        partial = [i for i, (_, targets) in enumerate(batches)
                   if (np.count_nonzero(targets, axis=1) == 0).any()]
        assert partial, f"{batching}: the case should have a partial batch"
        chosen = timed_batches(batches, steps=len(batches))
        expected = [b for i, b in enumerate(batches) if i not in partial]
        assert len(chosen) == len(batches) - len(partial)
        assert all(np.array_equal(c[1], e[1]) for c, e in zip(chosen, expected))


def test_the_table_gives_the_padding_of_the_epoch_and_of_the_timed_batches(shared_data_dir,
                                                                           capsys):
    """`bench packing` without training (`--backends=`) on newstest2014 at 25,000 tokens: each
    padding row's two figures are the share of zero ids among the packed and the bucketed
    batches' positions, over the epoch and over its first 3 full batches, counted here."""
    import tempfile

    from t2t_repro.bench.newstest import encode_with_shared_vocabulary, newstest2014
    from t2t_repro.bench.packing import main

    main([f"--data_root={shared_data_dir}", "--backends=", "--batch_tokens=25000",
          "--steps=3"])
    table = capsys.readouterr().out
    with tempfile.TemporaryDirectory() as work:
        sources = newstest2014(shared_data_dir, "en")
        encoded, _ = encode_with_shared_vocabulary(
            shared_data_dir, work, sources + newstest2014(shared_data_dir, "de"))
    pairs = list(zip(encoded[: len(sources)], encoded[len(sources):]))

    def percent_padding(batches, key):
        ids = [features[key] for features, _ in batches]
        return 100 * sum(int((a == 0).sum()) for a in ids) / sum(a.size for a in ids)

    for bucketing in ("bucketed", "bucketed to fixed shapes"):
        epochs = {name: epoch_batches(pairs, name, 25000) for name in ("packed", bucketing)}
        for which, chosen in (("", lambda b: b), (" in the first 3 full batches",
                                                   lambda b: timed_batches(b, 3))):
            for side, key in (("source", "inputs"), ("target", "targets")):
                label = f"25000 tokens: {side} padding{which}, {bucketing} "
                row = next(line for line in table.splitlines() if line.startswith(label))
                figures = [float(x) for x in row[len(label):].split()
                           if x.replace(".", "").isdigit()]
                assert figures == [
                    round(percent_padding(chosen(epochs[name]), key), 2)
                    for name in ("packed", bucketing)], row
