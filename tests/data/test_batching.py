"""Token-budget batching: greedy packing of sorted lengths, hand cases, full passes of real data."""

import collections
import itertools

import numpy as np
import pytest
import tensorflow as tf

from hand_cases import HAND_BATCHES, HAND_CHUNK
from t2t_repro.data.batching import batch_by_token_budget
from t2t_repro.data.packing import pack_sorted_lengths
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.hparams import HParamsError, create_hparams
from t2t_repro.names import EOS_ID, PAD_ID

BUDGET, MAX_LENGTH = 512, 24


def greedy_splits_by_hand(sorted_lengths, budget):
    """Plain-Python reference: each batch grows one example at a time while rows × longest fits."""
    splits, start = [0], 0
    while start < len(sorted_lengths):
        end = start + 1
        while end < len(sorted_lengths) and (end + 1 - start) * sorted_lengths[end] <= budget:
            end += 1
        splits.append(end)
        start = end
    return splits


# --- pack_sorted_lengths ------------------------------------------------------------------------

@pytest.mark.parametrize("lengths, budget, splits", [
    # [2,2,3] is 3 rows × 3 = 9; adding a 5 makes 4 × 5 = 20. [5,5] is 10; adding 9 makes 27.
    ([2, 2, 3, 5, 5, 9], 10, [0, 3, 5, 6]),
    ([10], 10, [0, 1]),                        # a length equal to the budget is a batch alone
    ([3, 10, 10], 10, [0, 1, 2, 3]),           # 2 × 10 > 10: every budget-length example alone
    ([1] * 7, 3, [0, 3, 6, 7]),                # 3 rows of 1 fill a budget of 3
    ([1, 1, 1, 1, 2, 2], 4, [0, 4, 6]),        # 4 × 1 = 4, then 2 × 2 = 4
    ([1, 2, 3, 4], 100, [0, 4]),               # all fit: 4 × 4 = 16
    ([4, 4, 4, 5], 15, [0, 3, 4]),             # 3 × 4 = 12 fits, 4 × 5 = 20 does not
    ([], 10, [0]),                             # no examples, no batches
])
def test_pack_sorted_lengths_hand_cases(lengths, budget, splits):
    """Hand-worked splits: each batch takes as many next examples as rows × longest allows."""
    assert pack_sorted_lengths(lengths, budget).tolist() == splits


@pytest.mark.parametrize("seed", range(20))
def test_pack_sorted_lengths_matches_brute_force_and_every_batch_is_full(seed):
    """On random sorted lengths: the splits equal the reference; each batch fits and is maximal."""
    rng = np.random.default_rng(seed)
    budget = int(rng.integers(1, 300))
    lengths = sorted(rng.integers(1, budget + 1, size=int(rng.integers(1, 400))).tolist())
    splits = pack_sorted_lengths(lengths, budget).tolist()
    assert splits == greedy_splits_by_hand(lengths, budget)
    assert splits[0] == 0 and splits[-1] == len(lengths)
    for start, end in zip(splits, splits[1:]):
        assert end > start
        assert (end - start) * lengths[end - 1] <= budget
        if end < len(lengths):
            assert (end + 1 - start) * lengths[end] > budget


# --- batch_by_token_budget on hand-made chunks --------------------------------------------------

def chunk_of(examples):
    """A ragged chunk `{"inputs", "targets"}` of `(inputs, targets)` id lists."""
    return {
        "inputs": tf.ragged.constant([inputs for inputs, _ in examples], dtype=tf.int32,
                                     ragged_rank=1),
        "targets": tf.ragged.constant([targets for _, targets in examples], dtype=tf.int32,
                                      ragged_rank=1),
    }


def chunks_dataset(*chunks):
    dataset = tf.data.Dataset.from_tensors(chunk_of(chunks[0]))
    for chunk in chunks[1:]:
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(chunk_of(chunk)))
    return dataset


def batches_as_lists(dataset):
    return [(batch["inputs"].tolist(), batch["targets"].tolist())
            for batch in dataset.as_numpy_iterator()]


def test_batch_by_token_budget_hand_case():
    """One chunk, budget 8, max_length 6: the long example is dropped, the rest batched by hand."""
    batches = batch_by_token_budget(chunks_dataset(HAND_CHUNK), budget=8, max_length=6)
    assert batches_as_lists(batches) == HAND_BATCHES


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shuffled_batching_only_reorders_equal_lengths(seed):
    """With shuffle, the hand case gives the same batches up to the order of equal-length rows
    and the order of the batches."""
    def row_sets(batches):
        return sorted((sorted((tuple(i), tuple(t)) for i, t in zip(inputs, targets))
                       for inputs, targets in batches))

    batches = batch_by_token_budget(chunks_dataset(HAND_CHUNK), budget=8, max_length=6,
                                    shuffle=True, seed=seed)
    assert row_sets(batches_as_lists(batches)) == row_sets(HAND_BATCHES)


def test_batches_never_mix_chunks():
    """Two chunks of one 2-token example each give two part-filled batches, not one."""
    batches = batch_by_token_budget(
        chunks_dataset([([3, 1], [4, 1])], [([5, 1], [6, 1])]), budget=8, max_length=6
    )
    assert batches_as_lists(batches) == [([[3, 1]], [[4, 1]]), ([[5, 1]], [[6, 1]])]


def test_a_chunk_with_every_example_too_long_gives_no_batches():
    """Dropping a whole chunk yields nothing for it; the next chunk is still batched."""
    batches = batch_by_token_budget(
        chunks_dataset([([3, 3, 3, 1], [1])], [([5, 1], [6, 1])]), budget=8, max_length=3
    )
    assert batches_as_lists(batches) == [([[5, 1]], [[6, 1]])]


def test_budget_equal_to_max_length_is_accepted():
    """budget == max_length: sorted lengths 2, 3, 4, 4, 6 pack as 2 × 3 = 6, then 4, 4, 6 alone."""
    batches = batch_by_token_budget(chunks_dataset(HAND_CHUNK), budget=6, max_length=6)
    assert [len(inputs) for inputs, _ in batches_as_lists(batches)] == [2, 1, 1, 1]


@pytest.mark.parametrize("budget, max_length", [(10, 24), (255, 256), (0, 1)])
def test_budget_below_max_length_is_refused(budget, max_length):
    """A budget the longest examples could not fit in raises ValueError naming both numbers."""
    with pytest.raises(ValueError) as raised:
        batch_by_token_budget(chunks_dataset(HAND_CHUNK), budget=budget, max_length=max_length)
    message = str(raised.value)
    assert f"({budget} tokens)" in message and f"max_length ({max_length})" in message


@pytest.mark.parametrize("lengths, budget, rows_multiple, splits", [
    # Greedy takes 3 rows of [2,2,3] (9 <= 10); rounded down to 2. Then [3,5] is 10; [5,9]: 9 > 5
    # only one fits (2 × 9 = 18), so 9 ends the chunk alone (filled up with empty rows later).
    ([2, 2, 3, 5, 5, 9], 10, 2, [0, 2, 4, 5, 6]),
    ([1] * 7, 4, 2, [0, 4, 6, 7]),              # 4 rows of 1, again, then the odd one left
    ([1] * 7, 3, 2, [0, 2, 4, 6, 7]),           # 3 rows fit, rounded down to 2
    ([2, 2, 2, 2, 2, 2], 12, 4, [0, 4, 6]),     # 6 fit; 4 is the largest multiple of 4
])
def test_pack_sorted_lengths_rounds_rows_down_to_a_multiple(lengths, budget, rows_multiple, splits):
    """With `rows_multiple`, every batch but the chunk's last has a multiple of it rows."""
    assert pack_sorted_lengths(lengths, budget, rows_multiple).tolist() == splits


def test_batches_for_two_replicas_have_even_rows_and_lose_no_example():
    """For 2 replicas every batch has an even number of rows: the chunk's odd last example is
    joined by an empty (all-padding) row, and every example still comes out once."""
    examples = [([5] * n + [EOS_ID], [6] * n + [EOS_ID]) for n in (1, 1, 2, 3, 3, 3, 7)]
    # Lengths 2 2 3 4 4 4 8, budget 16: the first batch is 2 2 3 4 (4 rows × 4 = 16); then 4 4
    # (adding the 8 would make 3 × 8 = 24); then the 8 alone, filled up with one empty row.
    batches = batches_as_lists(batch_by_token_budget(
        chunks_dataset(examples), budget=16, max_length=8, rows_multiple=2))
    assert [len(inputs) for inputs, _ in batches] == [4, 2, 2]
    assert batches[-1][0][1] == [PAD_ID] * 8 and batches[-1][1][1] == [PAD_ID] * 8
    produced = [tuple(token for token in row if token != PAD_ID)
                for inputs, _ in batches for row in inputs]
    assert sorted(produced) == sorted([tuple(inputs) for inputs, _ in examples] + [()])


def test_budget_below_max_length_per_replica_is_refused():
    """A replica's share of the budget must still hold one longest example."""
    with pytest.raises(ValueError, match=r"max_length \(24\) × 2 replica"):
        batch_by_token_budget(chunks_dataset([([3, EOS_ID], [3, EOS_ID])]), 40, 24, rows_multiple=2)


# --- Full passes over the session's real translate_ende data ------------------------------------

def split_row(row):
    """`row` as content + EOS + padding: checks the layout and returns the content with its EOS."""
    row = row.tolist()
    assert EOS_ID in row, f"row without EOS: {row}"
    end = row.index(EOS_ID) + 1
    content, padding = row[:end], row[end:]
    assert PAD_ID not in content, f"padding before EOS: {row}"
    assert padding == [PAD_ID] * len(padding), f"not padding after EOS: {row}"
    return tuple(content)


@pytest.fixture(scope="module")
def problem(ende_data_dir):
    from problems.translate_ende import TranslateEnde

    return TranslateEnde(data_dir=str(ende_data_dir))


@pytest.fixture(scope="module")
def hparams():
    hparams = create_hparams("transformer_tiny", f"batch_size={BUDGET},max_length={MAX_LENGTH}")
    assert (hparams.batch_size, hparams.max_length) == (BUDGET, MAX_LENGTH)
    return hparams


def read_pass(problem, hparams, mode, seed=None, batches_wanted=None):
    """One full pass of `problem.dataset` (or its first `batches_wanted` batches) as a list of
    (inputs, targets) numpy batches."""
    kwargs = {"repeat": False, "seed": seed} if mode == TRAIN else {}
    dataset = problem.dataset(mode, hparams, **kwargs)
    if batches_wanted is not None:
        dataset = dataset.take(batches_wanted)
    batches = []
    for features, targets in dataset.as_numpy_iterator():
        np.testing.assert_array_equal(targets, features["targets"])
        batches.append((features["inputs"], features["targets"]))
    return batches


@pytest.fixture(scope="module")
def full_pass(problem, hparams):
    """`full_pass(mode, seed)`, read once per module."""
    passes = {}

    def get(mode, seed=None):
        if (mode, seed) not in passes:
            passes[mode, seed] = read_pass(problem, hparams, mode, seed)
        return passes[mode, seed]

    return get


@pytest.fixture(scope="module")
def reference_examples(problem):
    """`reference_examples(mode)`: every stored example as an (inputs, targets) pair of tuples,
    parsed from the TFRecord files with protobuf (independently of the pipeline's parsing)."""
    cache = {}

    def get(mode):
        if mode not in cache:
            cache[mode] = []
            records = tf.data.TFRecordDataset(problem.shard_paths(mode)).batch(4096)
            for serialized in records.as_numpy_iterator():
                for record in serialized:
                    feature = tf.train.Example.FromString(record).features.feature
                    cache[mode].append((tuple(feature["inputs"].int64_list.value),
                                        tuple(feature["targets"].int64_list.value)))
        return cache[mode]

    return get


def pass_examples(batches):
    """The unpadded (inputs, targets) examples of a pass, in order."""
    return [(split_row(inputs), split_row(targets))
            for batch_inputs, batch_targets in batches
            for inputs, targets in zip(batch_inputs, batch_targets)]


TRAIN_SEED = 1
MODES_AND_SEEDS = [(TRAIN, TRAIN_SEED), (EVAL, None)]


@pytest.mark.parametrize("mode, seed", MODES_AND_SEEDS)
def test_no_batch_exceeds_the_token_budget(full_pass, mode, seed):
    """rows × padded width <= batch_size for inputs and for targets, in every batch of a pass."""
    batches = full_pass(mode, seed)
    assert batches
    for inputs, targets in batches:
        assert inputs.dtype == targets.dtype == np.int32
        assert inputs.shape[0] == targets.shape[0] >= 1
        assert inputs.shape[0] * inputs.shape[1] <= BUDGET
        assert targets.shape[0] * targets.shape[1] <= BUDGET
        assert max(inputs.shape[1], targets.shape[1]) <= MAX_LENGTH


@pytest.mark.parametrize("mode, seed", MODES_AND_SEEDS)
def test_rows_end_in_eos_then_pad_id_and_no_column_is_all_padding(full_pass, mode, seed):
    """Each row is ids, EOS, then PAD_ID 0 only; a batch is as wide as its longest row."""
    for inputs, targets in full_pass(mode, seed):
        for side in (inputs, targets):
            widths = [len(split_row(row)) for row in side]
            assert max(widths) == side.shape[1]


@pytest.mark.parametrize("mode, seed", MODES_AND_SEEDS)
def test_a_pass_yields_exactly_the_examples_within_max_length(
    full_pass, reference_examples, problem, mode, seed
):
    """The pass's examples are, as a multiset, the stored examples of length <= max_length; the
    metadata's dropped count equals the count of the others."""
    stored = reference_examples(mode)
    within = [ex for ex in stored if max(len(ex[0]), len(ex[1])) <= MAX_LENGTH]
    dropped = len(stored) - len(within)
    assert len(stored) == {TRAIN: 29000, EVAL: 3000}[mode]
    assert 0 < dropped < len(stored)  # the case exercises both keeping and dropping
    produced = pass_examples(full_pass(mode, seed))
    assert len(produced) == len(within)
    assert collections.Counter(produced) == collections.Counter(within)
    assert problem.dropped_by_max_length(mode, MAX_LENGTH) == (dropped, len(stored))


def test_a_max_length_that_leaves_out_every_example_is_refused_naming_the_lengths(
        problem, reference_examples):
    """Below the shortest stored example, no training batch could ever form: refused, naming
    the stored lengths' range; at the shortest, accepted."""
    lengths = [max(len(ex[0]), len(ex[1])) for ex in reference_examples(TRAIN)]
    shortest, longest = min(lengths), max(lengths)
    with pytest.raises(HParamsError) as refused:
        problem.check_max_length(TRAIN, shortest - 1)
    message = str(refused.value)
    assert f"max_length={shortest - 1} leaves out every train example" in message
    assert f"{shortest} to {longest} tokens long" in message
    assert f"--hparams=max_length={longest} keeps them all" in message
    problem.check_max_length(TRAIN, shortest)


def test_eval_batches_are_the_greedy_packing_in_a_mixed_order(full_pass, reference_examples):
    """Eval (one chunk, no shuffle): the batches are the greedy packing of the sorted kept
    lengths, but served in a fixed mixed order, so that the first N batches (`--eval_steps`)
    are not just the shortest sentences."""
    lengths = sorted(max(len(i), len(t)) for i, t in reference_examples(EVAL)
                     if max(len(i), len(t)) <= MAX_LENGTH)
    splits = greedy_splits_by_hand(lengths, BUDGET)
    expected = [tuple(lengths[a:b]) for a, b in zip(splits, splits[1:])]
    batches = full_pass(EVAL)
    produced = [tuple(max(len(split_row(i)), len(split_row(t))) for i, t in zip(inputs, targets))
                for inputs, targets in batches]
    assert sorted(produced) == sorted(expected)
    longest_first = [max(batch) for batch in produced[: len(produced) // 4]]
    assert max(longest_first) > lengths[len(lengths) // 2], "the first quarter is all short"


def test_training_batches_are_not_served_in_length_order(full_pass):
    """Training shuffles the batches of each chunk: the first 20 already hold short and long
    sentences (served sorted, they would sweep from short to long through the chunk)."""
    longest = [max(inputs.shape[1], targets.shape[1])
               for inputs, targets in full_pass(TRAIN, TRAIN_SEED)]
    first = longest[:20]
    median = sorted(longest)[len(longest) // 2]
    assert min(first) < median < max(first), first


def test_eval_order_is_deterministic(problem, hparams, full_pass):
    """Two eval passes give identical batches."""
    first, second = full_pass(EVAL), read_pass(problem, hparams, EVAL)
    assert len(first) == len(second)
    for (inputs_a, targets_a), (inputs_b, targets_b) in zip(first, second):
        np.testing.assert_array_equal(inputs_a, inputs_b)
        np.testing.assert_array_equal(targets_a, targets_b)


def test_training_order_is_set_by_the_seed(problem, hparams, full_pass):
    """Training passes: the same seed repeats the order (first 100 batches compared), another
    seed changes it, and both hold the same examples."""
    first = full_pass(TRAIN, TRAIN_SEED)
    again = read_pass(problem, hparams, TRAIN, TRAIN_SEED, batches_wanted=100)
    other = full_pass(TRAIN, TRAIN_SEED + 1)
    assert pass_examples(again) == pass_examples(first[:100])
    assert pass_examples(other) != pass_examples(first)
    assert collections.Counter(pass_examples(other)) == collections.Counter(pass_examples(first))
    # Not merely the same batches in another order: the batches themselves differ.
    first_batches = {tuple(sorted(map(split_row, targets))) for _, targets in first}
    other_batches = {tuple(sorted(map(split_row, targets))) for _, targets in other}
    assert first_batches != other_batches


# --- the TensorFlow-free pipeline on the same data ----------------------------------------------

@pytest.mark.parametrize("mode", [TRAIN, EVAL])
def test_token_arrays_hold_the_examples_of_the_tfrecords(problem, reference_examples, mode):
    """Datagen wrote each example into both: the same examples, eval in the same order
    (training shards are shuffled, the arrays keep corpus order)."""
    arrays = problem.token_arrays(mode)
    stored = [(tuple(arrays[i]["inputs"]), tuple(arrays[i]["targets"]))
              for i in range(len(arrays))]
    if mode == EVAL:
        assert stored == reference_examples(mode)
    else:
        assert sorted(stored) == sorted(reference_examples(mode))


def test_array_eval_batches_are_the_tf_pipelines_batches(problem, hparams, full_pass):
    """Same examples, filter and packing: the NumPy pipeline's eval pass holds exactly the
    tf.data pipeline's batches, padded alike (the two mix their order differently)."""
    def as_bytes(batches):
        return sorted((inputs.tobytes(), inputs.shape, targets.tobytes(), targets.shape)
                      for inputs, targets in batches)

    array_pass = [(features["inputs"], targets) for features, targets in
                  problem.array_batches(EVAL, hparams, fixed_shapes=False)]
    assert as_bytes(array_pass) == as_bytes(full_pass(EVAL))


def test_an_array_training_epoch_in_bucket_shapes_holds_each_kept_example_once(
        problem, hparams, reference_examples):
    from t2t_repro.data.array_batches import bucket_boundaries

    batches = problem.array_batches(TRAIN, hparams, seed=TRAIN_SEED, num_devices=2)
    plan = batches.epoch_plan(0)
    served = itertools.islice(batches, len(plan))
    examples = []
    for (features, targets), indices in zip(served, plan):
        rows, width = targets.shape
        assert features["inputs"].shape == (rows, width)
        assert width in bucket_boundaries(MAX_LENGTH) and rows == BUDGET // width - (
            BUDGET // width) % 2
        real_rows = targets.any(axis=1)  # the others are filler, all padding
        assert real_rows.sum() == (indices >= 0).sum() and not features["inputs"][~real_rows].any()
        examples += pass_examples([(features["inputs"][real_rows], targets[real_rows])])
    kept = [example for example in reference_examples(TRAIN)
            if max(map(len, example)) <= MAX_LENGTH]
    assert sorted(examples) == sorted(kept)


def test_data_generated_before_token_arrays_gets_them_from_datagen(ende_data_dir, tmp_path):
    """Without arrays, reading them is a one-line error naming the datagen command; running
    datagen again writes them from the TFRecords, equal to those written at generation."""
    import shutil

    from problems.translate_ende import TranslateEnde
    from t2t_repro.data.problem import ProblemDataError

    data_dir = shutil.copytree(ende_data_dir, tmp_path / "data")
    for path in data_dir.glob("*.npy"):
        path.unlink()
    old = TranslateEnde(data_dir=str(data_dir))
    with pytest.raises(ProblemDataError, match="python -m t2t_repro.datagen --problem="
                                               "translate_ende --data_dir="):
        old.token_arrays(EVAL)
    old.generate_data()

    def examples(arrays):
        return [(tuple(arrays[i]["inputs"]), tuple(arrays[i]["targets"]))
                for i in range(len(arrays))]

    for mode in (TRAIN, EVAL):  # training examples come back in the shards' shuffled order
        written = examples(old.token_arrays(mode))
        original = examples(TranslateEnde(data_dir=str(ende_data_dir)).token_arrays(mode))
        assert written == original if mode == EVAL else sorted(written) == sorted(original)
