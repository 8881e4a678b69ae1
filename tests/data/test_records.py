"""Sharded TFRecords: exact round trips, round-robin shards read back in turn, shuffling, chunks."""

import collections
import os
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import HANG_GUARD_S
from t2t_repro.data import records


def numbered_examples(count):
    """Example k: inputs k + 10 repeated k % 3 times (so some empty); targets k + 100 repeated
    k + 1 times, then EOS."""
    return [([k + 10] * (k % 3), [k + 100] * (k + 1) + [1]) for k in range(count)]


def as_lists(dataset):
    """`(inputs, targets)` of each example of a one-by-one dataset, as lists of Python ints."""
    return [(example["inputs"].tolist(), example["targets"].tolist())
            for example in dataset.as_numpy_iterator()]


def numbers(examples):
    """Which numbered example each one is (its first target id minus 100)."""
    return [targets[0] - 100 for _, targets in examples]


def as_tuples(examples):
    return collections.Counter((tuple(inputs), tuple(targets)) for inputs, targets in examples)


@pytest.mark.parametrize("shuffle_seed", [None, 7])
def test_shards_are_named_by_index_and_count_with_no_partial_files_left(tmp_path, shuffle_seed):
    """Three shards are prefix-0000k-of-00003.tfrecord, and nothing else (no temporary) remains."""
    paths = records.write_shards(numbered_examples(10), str(tmp_path / "prefix"), 3, shuffle_seed)
    expected = [f"prefix-{k:05d}-of-00003.tfrecord" for k in range(3)]
    assert paths == [str(tmp_path / name) for name in expected]
    assert sorted(path.name for path in tmp_path.iterdir()) == expected


def test_shards_are_written_round_robin(tmp_path):
    """Example k goes to shard k % 3: shards hold 0,3,6,9 / 1,4,7 / 2,5,8 in that order."""
    paths = records.write_shards(numbered_examples(10), str(tmp_path / "p"), 3)
    assert [numbers(as_lists(records.read_shards([path]))) for path in paths] == [
        [0, 3, 6, 9], [1, 4, 7], [2, 5, 8]
    ]


def test_read_shards_interleaves_round_robin_shards_back_into_write_order(tmp_path):
    """Reading 3 round-robin shards in turn (one from each) restores examples 0..9 exactly."""
    examples = numbered_examples(10)
    paths = records.write_shards(examples, str(tmp_path / "p"), 3)
    assert as_lists(records.read_shards(paths)) == examples


@pytest.mark.parametrize("count, num_shards", [(10, 5), (23, 7), (3, 6)])
def test_read_shards_returns_every_example_in_a_fixed_order(tmp_path, count, num_shards):
    """More shards than are read at once (or empty shards): same examples, same order every read."""
    examples = numbered_examples(count)
    paths = records.write_shards(examples, str(tmp_path / "p"), num_shards)
    first, second = as_lists(records.read_shards(paths)), as_lists(records.read_shards(paths))
    assert as_tuples(first) == as_tuples(examples)
    assert first == second


@pytest.mark.parametrize("example", [
    ([], [1]),
    ([5, 6, 7, 1], []),
    ([36999, 0, 2, 1], [3, 258, 259, 1]),
    ([2**31 - 1, 1], [1] * 500),
], ids=["empty inputs", "empty targets", "edge ids", "largest int32 and long"])
def test_id_lists_round_trip_exactly(tmp_path, example):
    """Empty lists, reserved and large ids and long sequences come back unchanged as int32."""
    paths = records.write_shards([example], str(tmp_path / "p"), 1)
    (read,) = records.read_shards(paths).as_numpy_iterator()
    assert read["inputs"].dtype == read["targets"].dtype == "int32"
    assert (read["inputs"].tolist(), read["targets"].tolist()) == (list(example[0]),
                                                                  list(example[1]))


def test_interrupted_write_leaves_no_finished_shard(tmp_path):
    """If the examples fail midway, no file appears under a final shard name."""
    def failing_examples():
        yield from numbered_examples(5)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        records.write_shards(failing_examples(), str(tmp_path / "p"), 3)
    finished = [path.name for path in tmp_path.iterdir() if path.name.endswith(".tfrecord")]
    assert finished == []


def shard_contents(paths):
    return [as_lists(records.read_shards([path])) for path in paths]


def test_shuffle_seed_permutes_records_within_each_shard(tmp_path):
    """With a seed each shard holds the same examples as without, in another order."""
    examples = numbered_examples(60)
    plain = shard_contents(records.write_shards(examples, str(tmp_path / "plain"), 3))
    shuffled = shard_contents(records.write_shards(examples, str(tmp_path / "shuf"), 3, 7))
    for plain_shard, shuffled_shard in zip(plain, shuffled, strict=True):
        assert as_tuples(shuffled_shard) == as_tuples(plain_shard)
        assert shuffled_shard != plain_shard


def test_shuffle_is_deterministic_for_a_seed_and_differs_between_seeds(tmp_path):
    """The same seed writes byte-identical shards; another seed orders every shard differently."""
    examples = numbered_examples(60)
    first = records.write_shards(examples, str(tmp_path / "a"), 3, shuffle_seed=7)
    again = records.write_shards(examples, str(tmp_path / "b"), 3, shuffle_seed=7)
    other = records.write_shards(examples, str(tmp_path / "c"), 3, shuffle_seed=8)
    for first_path, again_path in zip(first, again):
        with open(first_path, "rb") as f, open(again_path, "rb") as g:
            assert f.read() == g.read()
    for first_shard, other_shard in zip(shard_contents(first), shard_contents(other)):
        assert as_tuples(first_shard) == as_tuples(other_shard)
        assert first_shard != other_shard


SHARD_EXAMPLES = [([5, 9, 1], [7, 1]), ([], [8, 8, 1])]
WRITE_SHARDS = f"""
import sys
from t2t_repro.data import records
records.write_shards({SHARD_EXAMPLES}, sys.argv[1], 1, shuffle_seed=3)
"""


def test_records_are_canonical_protobuf_bytes_in_any_process(tmp_path):
    """Protobuf leaves the order of a map's entries to the implementation: written without
    `deterministic=True`, a record's features came out in an order that followed the process's
    hash seed (targets first under PYTHONHASHSEED=0, inputs first under 2), so two datagen runs
    wrote equal examples in different bytes. Written here and in a process with seed 0, every
    record is its canonical serialization, and the shards are the same bytes."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "seed0")
    records.write_shards(SHARD_EXAMPLES, ours, 1, shuffle_seed=3)
    subprocess.run([sys.executable, "-c", WRITE_SHARDS, theirs], check=True,
                   timeout=HANG_GUARD_S,
                   env=dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="3"))
    [ours], [theirs] = records.shard_paths(ours, 1), records.shard_paths(theirs, 1)
    for record in tf.data.TFRecordDataset(theirs).as_numpy_iterator():
        assert record == tf.train.Example.FromString(record).SerializeToString(
            deterministic=True)
    assert pathlib.Path(ours).read_bytes() == pathlib.Path(theirs).read_bytes()


@pytest.mark.parametrize("count, num_shards", [(10, 3), (1100, 4)])  # 1100: two chunks
def test_read_id_arrays_gives_read_shards_examples_in_its_order(tmp_path, count, num_shards):
    examples = [(inputs, [targets[0], 1]) for inputs, targets in numbered_examples(count)]
    paths = records.write_shards(examples, str(tmp_path / "p"), num_shards, shuffle_seed=5)
    arrays = list(records.read_id_arrays(paths))
    assert all(a.dtype == "int32" for pair in arrays for a in pair)
    assert [(inputs.tolist(), targets.tolist()) for inputs, targets in arrays] == as_lists(
        records.read_shards(paths))


# --- read_chunks --------------------------------------------------------------------------------

@pytest.fixture
def ten_in_three_shards(tmp_path):
    examples = numbered_examples(10)
    return examples, records.write_shards(examples, str(tmp_path / "p"), 3)


@pytest.mark.parametrize("chunk_size, sizes", [(4, [4, 4, 2]), (1, [1] * 10), (10, [10]),
                                               (64, [10])])
def test_read_chunks_sizes(ten_in_three_shards, chunk_size, sizes):
    """10 examples in chunks of `chunk_size`: all full but the last."""
    _, paths = ten_in_three_shards
    chunks = list(records.read_chunks(paths, chunk_size))
    assert [int(chunk["inputs"].nrows()) for chunk in chunks] == sizes
    assert [int(chunk["targets"].nrows()) for chunk in chunks] == sizes


def test_read_chunks_are_ragged_int32_rows_of_the_examples(ten_in_three_shards):
    """Each feature of a chunk is a ragged int32 [examples, None] tensor of the examples."""
    examples, paths = ten_in_three_shards
    dataset = records.read_chunks(paths, 4)
    for name in records.FEATURES:
        spec = dataset.element_spec[name]
        assert isinstance(spec, tf.RaggedTensorSpec)
        assert spec.dtype == tf.int32 and spec.shape.as_list() == [None, None]
    rows = []
    for chunk in dataset:
        assert chunk["inputs"].ragged_rank == chunk["targets"].ragged_rank == 1
        rows += zip(chunk["inputs"].to_list(), chunk["targets"].to_list())
    assert rows == examples
    lengths = [(len(inputs), len(targets)) for inputs, targets in examples]
    chunk = next(iter(dataset))
    assert list(zip(chunk["inputs"].row_lengths().numpy(), chunk["targets"].row_lengths().numpy())
                ) == lengths[:4]


def test_read_chunks_repeat_spans_passes(ten_in_three_shards):
    """Repeating, chunks stay full across the end of a pass: chunk 3 is examples 8, 9, 0, 1."""
    examples, paths = ten_in_three_shards
    chunks = list(records.read_chunks(paths, 4, repeat=True).take(5))
    assert [int(chunk["inputs"].nrows()) for chunk in chunks] == [4] * 5
    rows = [row for chunk in chunks
            for row in zip(chunk["inputs"].to_list(), chunk["targets"].to_list())]
    assert numbers(rows[8:12]) == [8, 9, 0, 1]
    assert rows == examples + examples


def test_read_chunks_without_repeat_reads_one_pass_even_with_shuffled_files(ten_in_three_shards):
    """shuffle_files reorders shards but, without repeat, still yields each example exactly once."""
    examples, paths = ten_in_three_shards
    for seed in (1, 2, 3):
        chunks = records.read_chunks(paths, 4, shuffle_files=True, seed=seed)
        rows = [row for chunk in chunks
                for row in zip(chunk["inputs"].to_list(), chunk["targets"].to_list())]
        assert as_tuples(rows) == as_tuples(examples)
