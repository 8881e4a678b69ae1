"""Algorithmic problems generated in-process (no download): copy and reverse a symbol sequence.

Symbols 0..num_symbols-1 are ids 2..num_symbols+1 (0 is padding, 1 is EOS). Training and eval
sequences come from different seeds, and eval sequences that also occur in training are
dropped, so eval accuracy is measured on held-out sequences.
"""

import collections
import itertools

import numpy as np

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
        raise NotImplementedError

    def default_decode_hparams(self):
        """Targets are as long as inputs here, so outputs need little room beyond them."""
        hparams = super().default_decode_hparams()
        hparams.extra_length = 2
        return hparams

    def sequences(self, mode):
        """The mode's symbol sequences (lists of symbols), generated once per process."""
        if mode not in self._sequences:
            sequences = self._random_sequences(self.seeds[mode], self.num_examples[mode])
            if mode == EVAL:
                seen = set(map(tuple, self.sequences(TRAIN)))
                sequences = [s for s in sequences if tuple(s) not in seen]
            self._sequences[mode] = sequences
        return self._sequences[mode]

    def _random_sequences(self, seed, count):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(1, self.max_sequence_length + 1, size=count)
        symbols = rng.integers(0, self.num_symbols, size=int(lengths.sum()))
        return [part.tolist() for part in np.split(symbols, np.cumsum(lengths)[:-1])]

    def _ids(self, symbols):
        return [s + _RESERVED_IDS for s in symbols] + [EOS_ID]

    def length_histogram(self, mode):
        return collections.Counter(len(sequence) + 1 for sequence in self.sequences(mode))  # + EOS

    def examples(self, mode):
        import tensorflow as tf

        from t2t_repro.data.records import rows_as_tensors

        sequences = self.sequences(mode)
        inputs = _ragged_ids([self._ids(s) for s in sequences])
        targets = _ragged_ids([self._ids(self.target_of(s)) for s in sequences])
        return rows_as_tensors(
            tf.data.Dataset.from_tensor_slices({"inputs": inputs, "targets": targets})
        )

    def token_arrays(self, mode):
        """The same examples as `examples`, in the same order, held in memory."""
        if mode not in self._token_arrays:
            self._token_arrays[mode] = TokenArrays.from_pairs(
                (self._ids(s), self._ids(self.target_of(s))) for s in self.sequences(mode))
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


def _ragged_ids(id_lists):
    """A ragged int32 tensor from lists of ids, built from flat values (tf.ragged.constant
    takes seconds on 100k short lists)."""
    import tensorflow as tf

    flat = np.fromiter(itertools.chain.from_iterable(id_lists), dtype=np.int32)
    return tf.RaggedTensor.from_row_lengths(flat, [len(ids) for ids in id_lists])


@problems.register
class AlgorithmicCopy(AlgorithmicProblem):
    """Output the input sequence unchanged."""

    def target_of(self, sequence):
        return list(sequence)


@problems.register
class AlgorithmicReverse(AlgorithmicProblem):
    """Output the input sequence reversed."""

    def target_of(self, sequence):
        return list(reversed(sequence))
