"""Training batches of packed rows (`pair_packing`) from `TokenArrays`, for both backends.

Every row is `max_length` positions long and a batch has `budget // max_length` rows (a multiple
of the devices sharing it), so the token budget counts padded positions as it does for
bucketed batches; packing only wastes fewer of them. Every batch has the same shape, which a
jitted step compiles once. Within chunks of `CHUNK_SIZE` examples (in a new random order every
epoch when shuffling) pairs are packed first fit; the epoch's rows are then cut into batches,
so that one batch at most has empty rows, and an epoch's batches are served in random
order; as `ArrayBatches`, an epoch's batches follow from the seed and the epoch number alone,
so `batches(start=n)` resumes at batch n.
"""

import numpy as np

from t2t_repro.data.array_batches import ArrayBatches
from t2t_repro.data.packing import CHUNK_SIZE
from t2t_repro.data.pair_packing import PACKED_KEYS, pack_rows, packed_features


class PackedBatches(ArrayBatches):
    """Re-iterable `(features, targets)` batches of packed rows: features are PACKED_KEYS
    arrays [rows, max_length], targets the same array as features["targets"].

    Args are `ArrayBatches`'s (no `fixed_shapes`: the shapes are fixed), and `shard`:
    `(index, count)` takes every count-th example from the index-th on (one input pipeline's
    part under a distribution strategy).
    """

    def __init__(self, arrays, budget, max_length, shuffle=True, repeat=True, seed=None,
                 rows_multiple=1, shard=(0, 1)):
        super().__init__(arrays, budget, max_length, shuffle=shuffle, repeat=repeat, seed=seed,
                         rows_multiple=rows_multiple)
        self._kept = self._kept[shard[0]::shard[1]]
        self.rows = budget // max_length - (budget // max_length) % rows_multiple

    def epoch_plan(self, epoch):
        """The rows of each batch of `epoch`, in serving order: lists of example indices."""
        examples = self._kept
        if self.shuffle:
            examples = np.random.default_rng([self.seed, epoch]).permutation(examples)
        rows = []
        for start in range(0, len(examples), CHUNK_SIZE):
            chunk = examples[start : start + CHUNK_SIZE]
            rows += [chunk[row].tolist() for row in pack_rows(
                self.arrays.input_lengths[chunk], self.arrays.target_lengths[chunk],
                self.max_length)]
        # Cut across chunks: one batch of the epoch at most has empty rows.
        plan = [rows[i : i + self.rows] for i in range(0, len(rows), self.rows)]
        if self.shuffle:
            return [plan[i] for i in np.random.default_rng([self.seed, epoch]).permutation(
                len(plan))]
        return plan

    def _padded(self, rows):
        def pair_at(index):
            example = self.arrays[index]
            return example["inputs"], example["targets"]

        features = packed_features(rows, pair_at, self.max_length, self.rows)
        return features, features["targets"]


def packed_dataset(batches):
    """`batches` (PackedBatches) as a tf.data dataset of `(features, targets)`."""
    import tensorflow as tf

    from t2t_repro.data.batching import with_targets_as_labels

    spec = tf.TensorSpec((batches.rows, batches.max_length), tf.int32)
    dataset = tf.data.Dataset.from_generator(
        lambda: (features for features, _ in batches),
        output_signature={key: spec for key in PACKED_KEYS})
    return dataset.map(with_targets_as_labels)
