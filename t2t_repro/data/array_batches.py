"""Token-budget batches from `TokenArrays` in NumPy: the input pipeline without TensorFlow.

The same examples, length filter and packing as the tf.data pipeline (`batching`): examples
longer than `max_length` are dropped, never truncated; within chunks of `CHUNK_SIZE` examples
the rest are sorted by length and cut greedily into batches of at most `budget` padded tokens
(`packing`). What differs:
- Shuffling: every epoch is one permutation of all the examples (the tf.data pipeline shuffles
  shard files and then within chunks), and the epoch's batches are served in random order.
- Position: an epoch's batches are a function of the seed and the epoch number alone, so
  `batches(start=n)` resumes at batch n exactly, computing lengths only (a resumed tf.data run
  starts its data afresh).
- Shapes (`fixed_shapes`): a jitted step compiles once per input shape, so each batch is padded
  to the length bucket of its longest example (`bucket_length`), inputs and targets alike, and
  to the number of rows that bucket's budget allows. Training then compiles once per bucket
  used (at most `len(bucket_boundaries(max_length))`) instead of once per batch.
"""

import queue
import threading

import numpy as np

from t2t_repro.data.packing import CHUNK_SIZE, batch_splits

_EVAL_BATCH_ORDER_SEED = 17


def bucket_boundaries(max_length):
    """Padded lengths of `fixed_shapes` batches up to `max_length`: multiples of 8 to 64, of 16
    to 128, of 32 to 256, of 64 beyond, and `max_length` itself. Consecutive buckets differ
    by at most 1/4, so padding to them costs at most about a fifth of a batch's tokens."""
    boundaries = [*range(8, 65, 8), *range(80, 129, 16), *range(160, 257, 32)]
    boundaries += range(320, max_length + 64, 64)
    return sorted({b for b in boundaries if b < max_length} | {max_length})


def bucket_length(lengths, max_length):
    """Each length (<= max_length) rounded up to its bucket boundary."""
    boundaries = np.asarray(bucket_boundaries(max_length))
    return boundaries[np.searchsorted(boundaries, lengths, side="left")]


class ArrayBatches:
    """Re-iterable `(features, targets)` batches of `TokenArrays`, features `{"inputs",
    "targets"}` int32 arrays 0-padded, targets the same array as features["targets"].

    Args:
        arrays: the examples (`TokenArrays`).
        budget: tokens per batch (longest example × rows, padding counted), all devices
            together.
        max_length: longer examples are left out.
        shuffle: a new example and batch order every epoch (training); otherwise examples in
            stored order and batches in one fixed mixed order (so that the first few eval
            batches are not all short sentences).
        repeat: epochs without end (training); otherwise one pass.
        seed: the shuffle's seed (None: 0).
        rows_multiple: rows per batch are a multiple of this (the number of devices sharing
            each batch); short batches get rows of padding.
        fixed_shapes: pad to bucket shapes (see the module docstring).
    """

    def __init__(self, arrays, budget, max_length, shuffle=False, repeat=False, seed=None,
                 rows_multiple=1, fixed_shapes=False):
        if budget < max_length * rows_multiple:  # max_length is its own bucket
            raise ValueError(
                f"batch_size ({budget} tokens) must be at least max_length ({max_length}) × "
                f"{rows_multiple} device(s), or the longest examples could never fit in a "
                f"batch.")
        self.arrays = arrays
        self.budget = budget
        self.max_length = max_length
        self.shuffle = shuffle
        self.repeat = repeat
        self.seed = seed or 0
        self.rows_multiple = rows_multiple
        self.fixed_shapes = fixed_shapes
        lengths = arrays.lengths
        self._kept = np.flatnonzero(lengths <= max_length)
        self._packed_lengths = (bucket_length(lengths[self._kept], max_length) if fixed_shapes
                                else lengths[self._kept])

    def epoch_plan(self, epoch):
        """The example indices of each batch of `epoch`, in serving order; -1 marks a filler
        row."""
        positions = np.arange(len(self._kept))
        if self.shuffle:
            positions = np.random.default_rng([self.seed, epoch]).permutation(positions)
        plan = []
        for start in range(0, len(positions), CHUNK_SIZE):
            chunk = positions[start : start + CHUNK_SIZE]
            order, splits = batch_splits(self._packed_lengths[chunk], self.budget,
                                         self.rows_multiple)
            examples = np.append(self._kept[chunk], -1)[order]  # index len(chunk): filler
            plan += np.split(examples, splits[1:-1])
        order_seed = [self.seed, epoch] if self.shuffle else _EVAL_BATCH_ORDER_SEED
        return [plan[i] for i in np.random.default_rng(order_seed).permutation(len(plan))]

    def batches(self, start=0):
        """The batches from batch number `start` on (counted over epochs), skipping what comes
        before by lengths alone."""
        epoch = 0
        while True:
            plan = self.epoch_plan(epoch)
            if not plan:
                return
            for indices in plan[start:]:
                yield self._padded(indices)
            start = max(start - len(plan), 0)
            epoch += 1
            if not self.repeat:
                return

    def __iter__(self):
        return self.batches()

    def _padded(self, indices):
        lengths = (self.arrays.input_lengths, self.arrays.target_lengths)
        real = indices[indices >= 0]
        if self.fixed_shapes:
            width = int(bucket_length([max(int(lengths[0][real].max()),
                                           int(lengths[1][real].max()))], self.max_length)[0])
            rows = self.budget // width
            rows -= rows % self.rows_multiple
            indices = np.concatenate([indices, np.full(rows - len(indices), -1)])
            widths = (width, width)
        else:
            widths = tuple(int(feature_lengths[real].max()) for feature_lengths in lengths)
        features = self.arrays.padded(indices, *widths)
        return features, features["targets"]


def prefetched(iterable, depth=2):
    """Iterates `iterable` on a background thread, `depth` items ahead, so that building the
    next batch overlaps the device's work on this one. Its exceptions reach the caller."""
    items = queue.Queue(maxsize=depth)
    done = object()

    def fill():
        try:
            for item in iterable:
                items.put(item)
            items.put(done)
        except BaseException as error:  # handed to the consuming thread
            items.put(error)

    threading.Thread(target=fill, daemon=True).start()
    while (item := items.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item
