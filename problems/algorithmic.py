"""Algorithmic problems generated in-process (no download): copy and reverse a symbol sequence.

Symbols 0..num_symbols-1 are ids 2..num_symbols+1 (0 is padding, 1 is EOS). Training and eval
sequences come from different seeds, and eval sequences that also occur in training are
dropped, so eval accuracy is measured on held-out sequences.
"""

import collections
import dataclasses
import itertools

import numpy as np

from t2t_repro.data.packing import CHUNK_SIZE
from t2t_repro.data.problem import EVAL, TRAIN, Problem, UnencodableInputError
from t2t_repro.data.token_arrays import TokenArrays
from t2t_repro.registry import problems
from t2t_repro.names import EOS_ID

_RESERVED_IDS = 2  # padding and EOS


class AlgorithmicProblem(Problem):
    """Random symbol sequences of length 1..max_sequence_length and a target derived from each."""

    num_symbols = 10
    max_sequence_length = 20
    num_examples = {TRAIN: 100_000, EVAL: 1_000}
    seeds = {TRAIN: 1, EVAL: 2}

    def __init__(self, data_dir=None, data_hparams=""):
        super().__init__(data_dir, data_hparams)
        self.input_vocab_size = self.target_vocab_size = self.num_symbols + _RESERVED_IDS
        self._sequences = {}
        self._token_arrays = {}

    def target_of(self, sequence):
        """The target symbols of one sequence (a list of symbols): a problem's definition."""
        raise NotImplementedError

    def target_symbols(self, symbols):
        """`target_of` every sequence of `symbols` (a `SymbolSequences`), as one. Problems
        whose targets array operations give override it: a Python call per sequence takes
        a second for the 100,000 training sequences."""
        return SymbolSequences.from_lists([self.target_of(s) for s in symbols.as_lists()])

    def default_decode_hparams(self):
        """Targets are as long as inputs here, so outputs need little room beyond them."""
        hparams = super().default_decode_hparams()
        hparams.extra_length = 2
        return hparams

    def sequences(self, mode):
        """The mode's symbol sequences (lists of symbols)."""
        return self._symbols(mode).as_lists()

    def _symbols(self, mode):
        """The mode's `SymbolSequences`, generated once per problem object."""
        if mode not in self._sequences:
            sequences = SymbolSequences.random(self.seeds[mode], self.num_examples[mode],
                                               self.num_symbols, self.max_sequence_length)
            if mode == EVAL:
                sequences = sequences.without(self._symbols(TRAIN))
            self._sequences[mode] = sequences
        return self._sequences[mode]

    def _ids(self, symbols):
        return [s + _RESERVED_IDS for s in symbols] + [EOS_ID]

    def _input_and_target_ids(self, mode):
        """`(input ids, target ids)` of the mode's examples, each `(flat ids, lengths)` with
        every example's symbols as ids and EOS after them."""
        symbols = self._symbols(mode)
        return symbols.as_ids(), self.target_symbols(symbols).as_ids()

    def length_histogram(self, mode):
        lengths = self._symbols(mode).lengths + 1  # + EOS
        return collections.Counter(lengths.tolist())

    def examples(self, mode):
        from t2t_repro.data.records import rows_as_tensors

        return rows_as_tensors(self._ragged_rows(mode))

    def example_chunks(self, mode, repeat=False, shuffle=False, seed=None, shard=(0, 1)):
        """`Problem.example_chunks`'s chunks, batched straight from the ragged rows in memory:
        the same examples in the same order, without `ragged_batch`, whose first chunk takes
        0.1 to 0.6 s under tf.data's default autotuning, each time the trainer builds a
        pipeline."""
        index, count = shard
        rows = self._ragged_rows(mode).shard(count, index)
        return (rows.repeat() if repeat else rows).batch(CHUNK_SIZE)

    def _ragged_rows(self, mode):
        """The mode's examples, a dataset of `{"inputs", "targets"}` ragged rows."""
        import tensorflow as tf

        (inputs, input_lengths), (targets, target_lengths) = self._input_and_target_ids(mode)
        return tf.data.Dataset.from_tensor_slices({
            "inputs": tf.RaggedTensor.from_row_lengths(inputs, input_lengths),
            "targets": tf.RaggedTensor.from_row_lengths(targets, target_lengths),
        })

    def token_arrays(self, mode):
        """The same examples as `examples`, in the same order, held in memory."""
        if mode not in self._token_arrays:
            self._token_arrays[mode] = TokenArrays.from_flat(*self._input_and_target_ids(mode))
        return self._token_arrays[mode]

    def encode(self, text):
        """Space-separated symbols, e.g. "3 1 4", -> ids ending in EOS."""
        tokens = text.split()
        bad = [token for token in tokens
               if not (token.isascii() and token.isdigit() and int(token) < self.num_symbols)]
        if bad:
            raise UnencodableInputError(
                f"{self.name} accepts only the symbols 0..{self.num_symbols - 1} separated by "
                f"spaces; got {', '.join(repr(token) for token in bad)} in {text!r}."
            )
        return self._ids([int(token) for token in tokens])

    def graph_text(self):
        from t2t_repro.data.graph_text import SymbolGraphText

        return SymbolGraphText(self.num_symbols, _RESERVED_IDS, self.name)

    def decode(self, ids):
        symbols = []
        for token in ids:
            if token == EOS_ID:
                break
            if token >= _RESERVED_IDS:
                symbols.append(str(token - _RESERVED_IDS))
        return " ".join(symbols)


@dataclasses.dataclass(frozen=True)
class SymbolSequences:
    """Sequences of symbols held as arrays: `flat` int64 [total], every sequence's symbols back
    to back, and `lengths` int64 [count]."""

    flat: np.ndarray
    lengths: np.ndarray

    @classmethod
    def random(cls, seed, count, num_symbols, max_length):
        """`count` sequences of uniform random lengths 1..max_length and symbols."""
        rng = np.random.default_rng(seed)
        lengths = rng.integers(1, max_length + 1, size=count)
        return cls(rng.integers(0, num_symbols, size=int(lengths.sum())), lengths)

    @classmethod
    def from_lists(cls, lists):
        lengths = np.array([len(symbols) for symbols in lists], np.int64)
        flat = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(lengths.sum()))
        return cls(flat, lengths)

    def as_lists(self):
        return [part.tolist() for part in np.split(self.flat, np.cumsum(self.lengths)[:-1])]

    def as_ids(self):
        """`(ids int32 [total + count], lengths)`: each symbol s as id s + 2, EOS after each
        sequence."""
        ids = np.insert(self.flat + _RESERVED_IDS, np.cumsum(self.lengths), EOS_ID)
        return ids.astype(np.int32), self.lengths + 1

    def reversed(self):
        """Every sequence reversed, in the same order."""
        ends = np.repeat(np.cumsum(self.lengths), self.lengths)
        starts = ends - np.repeat(self.lengths, self.lengths)
        return SymbolSequences(self.flat[starts + ends - 1 - np.arange(len(self.flat))],
                               self.lengths)

    def without(self, other):
        """These sequences except those that also occur in `other`, in their order."""
        width = int(max(self.lengths.max(initial=0), other.lengths.max(initial=0)))
        # The smallest signed type holding every symbol and the padding -1.
        largest = int(max(self.flat.max(initial=0), other.flat.max(initial=0)))
        dtype = np.min_scalar_type(-largest - 1)
        kept = ~np.isin(self._row_keys(width, dtype), other._row_keys(width, dtype))
        return SymbolSequences(self.flat[np.repeat(kept, self.lengths)], self.lengths[kept])

    def _row_keys(self, width, dtype):
        """One opaque value per sequence, equal exactly when the sequences are: its symbols
        padded with -1 to `width`, as raw bytes."""
        rows = np.full((len(self.lengths), width), -1, dtype)
        rows[np.arange(width) < self.lengths[:, None]] = self.flat
        return rows.view(np.dtype((np.void, rows.itemsize * width))).ravel()


@problems.register
class AlgorithmicCopy(AlgorithmicProblem):
    """Output the input sequence unchanged."""

    def target_of(self, sequence):
        return list(sequence)

    def target_symbols(self, symbols):
        return symbols


@problems.register
class AlgorithmicReverse(AlgorithmicProblem):
    """Output the input sequence reversed."""

    def target_of(self, sequence):
        return list(reversed(sequence))

    def target_symbols(self, symbols):
        return symbols.reversed()
