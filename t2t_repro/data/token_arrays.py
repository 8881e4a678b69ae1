"""Examples as flat int32 token arrays, memory-mapped: the storage read without TensorFlow.

Datagen writes two NumPy files per split beside the TFRecords:

    <name>-<mode>.ids.npy      int32 [tokens]: each example's input ids, then its target ids
    <name>-<mode>.offsets.npy  int64 [examples + 1, 2]: row i = where example i's inputs and
                               its targets start; the last row is (tokens, tokens)

Why this and not the TFRecords read without TensorFlow: a TFRecord shard is a stream of
`tf.train.Example` protos, read front to back and parsed record by record, so a shuffled pass
must read and parse everything first. Here the lengths the token-budget packer needs come from
the offsets alone, an example is two slices of a memory map (random access, nothing parsed,
nothing loaded that is not read), and the files take 4 bytes a token. `TokenArrays` has
`__len__` and `__getitem__` returning `{"inputs", "targets"}`, the random-access data source
protocol of JAX data loaders such as grain.
"""

import os

import numpy as np

from t2t_repro.utils.atomic_files import atomic_path, temporary_path

FEATURES = ("inputs", "targets")
_SUFFIXES = (".ids.npy", ".offsets.npy")


class TokenArrays:
    """Examples `{"inputs": int32[s], "targets": int32[t]}` held in one flat id array.

    Args:
        ids: int32 [tokens], every example's inputs then targets, back to back.
        offsets: int64 [examples + 1, 2], see the module docstring.
        swap: read each example with inputs and targets exchanged (a `_rev` problem's view).
    """

    def __init__(self, ids, offsets, swap=False):
        self.ids = ids
        self.offsets = offsets
        self.swap = swap
        starts = np.asarray(offsets, dtype=np.int64)
        stored_lengths = (starts[:-1, 1] - starts[:-1, 0], starts[1:, 0] - starts[:-1, 1])
        self.input_lengths, self.target_lengths = stored_lengths[::-1] if swap else stored_lengths

    @classmethod
    def from_pairs(cls, pairs):
        """From `(input_ids, target_ids)` sequences, in memory."""
        pieces, offsets, position = [], [], 0
        for inputs, targets in pairs:
            offsets.append((position, position + len(inputs)))
            position += len(inputs) + len(targets)
            pieces += [np.asarray(inputs, np.int32), np.asarray(targets, np.int32)]
        offsets.append((position, position))
        ids = np.concatenate(pieces) if pieces else np.zeros([0], np.int32)
        return cls(ids, np.asarray(offsets, np.int64).reshape(-1, 2))

    @classmethod
    def from_flat(cls, inputs, targets):
        """From `inputs` and `targets`, each `(ids [tokens], lengths [examples])`: every
        example's ids back to back, in memory."""
        (input_ids, input_lengths), (target_ids, target_lengths) = inputs, targets
        starts = np.concatenate([[0], np.cumsum(input_lengths + target_lengths)])
        ids = np.empty(starts[-1], np.int32)
        ids[_positions(starts[:-1], input_lengths)] = input_ids
        ids[_positions(starts[:-1] + input_lengths, target_lengths)] = target_ids
        target_starts = np.append(starts[:-1] + input_lengths, starts[-1])
        return cls(ids, np.stack([starts, target_starts], axis=1).astype(np.int64))

    @classmethod
    def load(cls, prefix):
        """The arrays `save`/`TokenArrayWriter` wrote at `prefix`, memory-mapped read-only."""
        ids_path, offsets_path = paths(prefix)
        return cls(np.load(ids_path, mmap_mode="r"), np.load(offsets_path, mmap_mode="r"))

    def __len__(self):
        return len(self.input_lengths)

    def __getitem__(self, index):
        input_start, target_start = self.offsets[index]
        end = self.offsets[index + 1][0]
        stored = (np.asarray(self.ids[input_start:target_start]),
                  np.asarray(self.ids[target_start:end]))
        return dict(zip(FEATURES, stored[::-1] if self.swap else stored))

    @property
    def lengths(self):
        """Each example's length as the batcher counts it: the longer of inputs and targets."""
        return np.maximum(self.input_lengths, self.target_lengths)

    def swapped(self):
        """The same examples with inputs and targets exchanged."""
        return TokenArrays(self.ids, self.offsets, swap=not self.swap)

    def padded(self, indices, input_width, target_width):
        """`{"inputs": [rows, input_width], "targets": [rows, target_width]}`, 0-padded, of the
        examples at `indices`; an index of -1 gives a row of padding only."""
        batch = {"inputs": np.zeros((len(indices), input_width), np.int32),
                 "targets": np.zeros((len(indices), target_width), np.int32)}
        for row, index in enumerate(indices):
            if index >= 0:
                example = self[index]
                for name in FEATURES:
                    batch[name][row, : len(example[name])] = example[name]
        return batch


def paths(prefix):
    """The id and offset files of the arrays at `prefix` (`<data_dir>/<name>-<mode>`)."""
    return tuple(prefix + suffix for suffix in _SUFFIXES)


def exist(prefix):
    return all(os.path.exists(path) for path in paths(prefix))


class TokenArrayWriter:
    """Writes examples one at a time into the arrays at `prefix` without holding the ids in
    memory: they stream to a temporary file, which `close` turns into the `.npy` files under
    their final names (the offsets last), so an interrupted write never looks complete.

    As a context manager it closes on success and removes its temporary file on an error."""

    def __init__(self, prefix):
        self.ids_path, self.offsets_path = paths(prefix)
        self._raw_path = temporary_path(self.ids_path + ".raw")
        self._raw = open(self._raw_path, "wb")
        self._offsets = []
        self._position = 0

    def add(self, inputs, targets):
        self._offsets.append((self._position, self._position + len(inputs)))
        self._raw.write(np.asarray(inputs, np.int32).tobytes())
        self._raw.write(np.asarray(targets, np.int32).tobytes())
        self._position += len(inputs) + len(targets)

    def close(self):
        self._raw.close()
        with atomic_path(self.ids_path) as temporary:
            with open(temporary, "wb") as out, open(self._raw_path, "rb") as raw:
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int32)),
                          "fortran_order": False, "shape": (self._position,)}
                np.lib.format.write_array_header_1_0(out, header)
                while block := raw.read(1 << 24):
                    out.write(block)
        os.remove(self._raw_path)
        offsets = np.asarray(self._offsets + [(self._position, self._position)], np.int64)
        with atomic_path(self.offsets_path) as temporary:
            with open(temporary, "wb") as out:
                np.save(out, offsets.reshape(-1, 2))

    def abort(self):
        """Removes what was written so far."""
        self._raw.close()
        os.remove(self._raw_path)

    def __enter__(self):
        return self

    def __exit__(self, error_type, error, traceback):
        if error_type is None:
            self.close()
        else:
            self.abort()


def _positions(starts, lengths):
    """The indices of runs of `lengths` beginning at `starts`, concatenated."""
    run_starts = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return run_starts + np.arange(int(np.sum(lengths)))
