"""Sharded TFRecord files of token-id examples: written once by datagen, read by the pipeline.

Each record is a `tf.train.Example` with two int64 lists, `inputs` and `targets` (ids ending in
EOS), tensor2tensor's layout. Shards are written under temporary names and renamed when complete,
so an interrupted datagen never leaves a shard that looks finished.
"""

import contextlib
import random

import numpy as np
import tensorflow as tf

from t2t_repro.data.shard_files import shard_paths
from t2t_repro.utils.atomic_files import atomic_path

FEATURES = ("inputs", "targets")
_PARSE_BATCH = 1024  # records read per call: one at a time costs over 0.1 ms of Python each


def _serialize(inputs, targets):
    example = tf.train.Example(features=tf.train.Features(feature={
        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=inputs)),
        "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=targets)),
    }))
    return example.SerializeToString(deterministic=True)  # the same bytes in every process


def write_shards(examples, prefix, num_shards, shuffle_seed=None):
    """Writes `(inputs, targets)` id lists round-robin into `num_shards` shards.

    With `shuffle_seed`, each shard's records are then shuffled (one shard in memory at a
    time): raw corpora come in corpus order (Europarl, then Common Crawl, ...), and
    round-robin sharding alone would keep that order within each shard.
    Returns the shard paths. Each shard appears under its final name only once all are written.
    """
    paths = shard_paths(prefix, num_shards)
    with contextlib.ExitStack() as renames:  # renames every shard once all are written
        temporaries = [renames.enter_context(atomic_path(path)) for path in paths]
        writers = [tf.io.TFRecordWriter(path) for path in temporaries]
        try:
            for index, (inputs, targets) in enumerate(examples):
                writers[index % num_shards].write(_serialize(inputs, targets))
        finally:
            for writer in writers:
                writer.close()
        if shuffle_seed is not None:
            for index, temporary in enumerate(temporaries):
                _shuffle_records(temporary, random.Random(shuffle_seed + index))
    return paths


def _shuffle_records(path, rng):
    serialized = [record for chunk in tf.data.TFRecordDataset(path).batch(_PARSE_BATCH)
                  .as_numpy_iterator() for record in chunk]  # in chunks: see _PARSE_BATCH
    rng.shuffle(serialized)
    with tf.io.TFRecordWriter(path) as writer:
        for record in serialized:
            writer.write(record)


@tf.autograph.experimental.do_not_convert  # as `batching.chunk_to_batches`
def _parse_batch(serialized):
    parsed = tf.io.parse_example(
        serialized, {name: tf.io.RaggedFeature(tf.int64) for name in FEATURES}
    )
    return {name: tf.cast(parsed[name], tf.int32) for name in FEATURES}


def read_chunks(paths, chunk_size, shuffle_files=False, repeat=False, seed=None):
    """Chunks of `chunk_size` examples from the shards at `paths`, as ragged int32 tensors
    `{"inputs", "targets"}` of shape `[examples, None]`.

    The order is fixed (shards interleaved in turn) unless `shuffle_files` is set, which
    reorders the shards every pass; `repeat` reads them forever, chunks spanning passes.
    """
    files = tf.data.Dataset.from_tensor_slices(list(paths))
    if shuffle_files:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        files = files.repeat()
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(paths), 4),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return records.batch(chunk_size).map(_parse_batch, num_parallel_calls=tf.data.AUTOTUNE)


def read_shards(paths):
    """The examples of the shards at `paths`, one by one, in a fixed order."""
    return rows_as_tensors(read_chunks(paths, _PARSE_BATCH).unbatch())


def read_id_arrays(paths):
    """The `(inputs, targets)` int32 arrays of each example of the shards at `paths`, in
    `read_shards`' order, read `_PARSE_BATCH` at a time (WMT14 EN-DE's 4.5M one at a time:
    about ten minutes)."""
    for chunk in read_chunks(paths, _PARSE_BATCH):
        yield from zip(*(_rows(chunk[name]) for name in FEATURES))


def _rows(ragged):
    return np.split(ragged.flat_values.numpy(), ragged.row_splits.numpy()[1:-1])


@tf.autograph.experimental.do_not_convert  # as `batching.chunk_to_batches`
def swapped_sides(example):
    """The example with its inputs and targets exchanged: a problem's reverse direction."""
    return {"inputs": example["targets"], "targets": example["inputs"]}


def rows_as_tensors(dataset):
    """Retypes the rows of a ragged dataset as the plain vectors they are.

    Unbatching (or slicing) a ragged tensor types each row as a rank-0 ragged spec, which
    `padded_batch` rejects; passing the rows through a map gives them tensor specs.
    """
    return dataset.map(dict)
