"""The Problem base class: what a registered task provides to the trainer and decoder."""

import tensorflow as tf

from t2t_repro.data import batching

TRAIN = "train"
EVAL = "eval"
MODES = (TRAIN, EVAL)


class Problem:
    """A task: its examples, vocabularies and the batched tf.data pipeline over them.

    Subclasses implement `examples(mode, data_dir)` (a dataset of
    `{"inputs": int32[None], "targets": int32[None]}` ending in EOS), the vocabulary sizes,
    and `encode`/`decode` between text and ids. `generate_data` writes whatever the problem
    needs on disk; problems generated in-process need nothing.
    """

    input_vocab_size = None
    target_vocab_size = None

    @property
    def name(self):
        from t2t_repro.registry import default_name

        return default_name(type(self))

    def generate_data(self, data_dir, tmp_dir):
        """Prepares the problem's data in `data_dir`; a no-op when nothing needs preparing."""

    def examples(self, mode, data_dir=None):
        raise NotImplementedError

    def encode(self, text):
        """Source text -> ids ending in EOS."""
        raise NotImplementedError

    def decode(self, ids):
        """Target ids -> text, stopping at the first EOS and dropping padding."""
        raise NotImplementedError

    def dataset(self, mode, hparams, data_dir=None, shuffle=None, repeat=None, seed=None):
        """Batched examples: length filter, shuffling (train), token-budget bucketing.

        Training data is shuffled and repeated forever; eval data keeps a fixed order and is
        read once. Each element is `(features, targets)` for `keras.Model.fit`.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got '{mode}'.")
        training = mode == TRAIN
        shuffle = training if shuffle is None else shuffle
        repeat = training if repeat is None else repeat
        dataset = self.examples(mode, data_dir)
        dataset = batching.filter_by_max_length(dataset, hparams.max_length)
        if shuffle:
            dataset = dataset.shuffle(10000, seed=seed)
        if repeat:
            dataset = dataset.repeat()
        dataset = batching.batch_by_token_budget(dataset, hparams.batch_size, hparams.max_length)
        dataset = dataset.map(lambda features: (features, features["targets"]))
        return dataset.prefetch(tf.data.AUTOTUNE)
