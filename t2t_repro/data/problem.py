"""The Problem base class: what a registered task provides to the trainer and decoder."""

from t2t_repro.data.packing import CHUNK_SIZE
from t2t_repro.hparams import HParams, HParamsError, check_ranges
from t2t_repro.errors import UserError


class ProblemDataError(UserError, ValueError):
    """A problem's data is missing or does not match what was asked; the message says how
    to fix it."""


class UnencodableInputError(UserError, ValueError):
    """Source text the problem's `encode` cannot represent; the message says what it accepts.

    The decoder reports it with the file and line of the offending input."""


TRAIN = "train"
EVAL = "eval"
MODES = (TRAIN, EVAL)

# Batches held for shuffling after length batching, so consecutive steps differ in length.
_BATCH_SHUFFLE_BUFFER = 64
# Eval batches come out of a chunk sorted by length; they are put in a fixed pseudo-random
# order (up to this many at a time) so that `--eval_steps=N` does not see only short sentences.
_EVAL_BATCH_MIX_BUFFER = 1024
_EVAL_BATCH_MIX_SEED = 17


class Problem:
    """A task: its examples, vocabularies and the batched tf.data pipeline over them.

    Args:
        data_dir: where the problem's generated data lives (problems generated in-process
            need none).
        data_hparams: overrides of the problem's data settings (`default_data_hparams`), as
            `"name=value,..."`; e.g. `vocab_size=8000` for a small corpus.

    Subclasses implement `examples(mode)` (a dataset of `{"inputs": int32[None],
    "targets": int32[None]}` ending in EOS), the vocabulary sizes, and `encode`/`decode`
    between text and ids. `generate_data` writes whatever the problem needs in `data_dir`.
    """

    # The decode metric that ranks checkpoints by default (`training.best_checkpoint`).
    main_decode_metric = "exact_match"
    # The data hparams' allowed values (`hparams.check_ranges`), checked on construction.
    data_hparam_ranges = {}

    def __init__(self, data_dir=None, data_hparams=""):
        self.data_dir = data_dir
        self.data_hparams = self.default_data_hparams().override_from_string(data_hparams or "",
                                                                             "data hparam")
        check_ranges(self.data_hparams, self.data_hparam_ranges, "data hparam")
        # The names set explicitly: checked against data generated earlier.
        self.explicit_data_hparams = [
            item.partition("=")[0].strip()
            for item in (data_hparams or "").split(",") if item.strip()
        ]

    @property
    def name(self):
        from t2t_repro.registry import default_name

        return default_name(type(self))

    def default_data_hparams(self):
        """The problem's data settings (vocabulary size, splits ...); none by default."""
        return HParams()

    def generate_data(self, tmp_dir=None, download=True):
        """Prepares the problem's data in `data_dir`; a no-op when nothing needs preparing."""

    def check_data(self, modes=()):
        """Raises ProblemDataError, saying how to generate it, when the data is not ready: what
        every command reads, and the examples of `modes` (those a trainer reads)."""

    def examples(self, mode):
        raise NotImplementedError

    def token_arrays(self, mode):
        """The mode's examples as `TokenArrays` (`data.token_arrays`), for input pipelines
        without TensorFlow."""
        raise NotImplementedError(f"{self.name} has no token arrays (Problem.token_arrays), so "
                                  f"it cannot be trained without TensorFlow.")

    def first_examples(self, mode, count):
        """`[(input_ids, target_ids)]` of the mode's first `count` examples (-1: all), NumPy
        arrays ending in EOS; from the token arrays where the problem has them."""
        try:
            arrays = self.token_arrays(mode)
        except (NotImplementedError, ProblemDataError):
            examples = self.examples(mode).take(count).as_numpy_iterator()
            return [(example["inputs"], example["targets"]) for example in examples]
        count = len(arrays) if count < 0 else min(count, len(arrays))
        return [(arrays[i]["inputs"], arrays[i]["targets"]) for i in range(count)]

    def example_chunks(self, mode, repeat=False, shuffle=False, seed=None, shard=(0, 1)):
        """The mode's examples as ragged chunks of `CHUNK_SIZE` (the batching pipeline's input).

        `shard=(i, n)`: only input pipeline i of n's part, examples i, i + n, ... (problems
        with sharded files split by file instead)."""
        index, count = shard
        examples = self.examples(mode).shard(count, index)
        if repeat:
            examples = examples.repeat()
        return examples.ragged_batch(CHUNK_SIZE)

    def length_histogram(self, mode):
        """`{length: count}` of the mode's examples (length: the longer of inputs and targets),
        or None when unknown before reading them; used to report what `max_length` drops."""
        return None

    def vocabulary_files(self):
        """{"source": path, "target": path} of the files the problem encodes each side with
        (one path twice when the vocabulary is shared); {} when its tokens are ids."""
        return {}

    def encode(self, text):
        """Source text -> ids ending in EOS; raises UnencodableInputError for text outside
        what the problem accepts."""
        raise NotImplementedError

    def encode_target(self, text):
        """Target text -> ids ending in EOS, as training encodes targets (to score a given
        translation): the source encoding unless a problem's targets have a codec of their own."""
        return self.encode(text)

    def encode_target_prefix(self, text):
        """Target text -> its ids, no EOS: the start a decoder is made to begin its output
        with. By default `encode` without its EOS, right for the problems whose sources and
        targets share one vocabulary; one with a separate target vocabulary overrides it."""
        return self.encode(text)[:-1]

    def decode(self, ids):
        """Target ids -> text, stopping at the first EOS and dropping padding."""
        raise NotImplementedError

    def decode_inputs(self, ids):
        """Input ids -> text (as `decode`, for problems with one vocabulary)."""
        return self.decode(ids)

    def model_hparams(self, hparams):
        """The model hparams as this problem's data needs them (unchanged by default)."""
        return hparams

    def graph_text(self):
        """The problem's `encode`/`decode` as TensorFlow ops (`data.graph_text`), which an
        exported model runs in its graph."""
        raise NotImplementedError(
            f"{self.name} has no in-graph text codec (Problem.graph_text), so it cannot be "
            f"exported; implement graph_text() for it."
        )

    def default_decode_hparams(self):
        """Beam search settings: the paper's for translation (§6.1): beam 4, length penalty
        α = 0.6, outputs up to the input length + 50; `batch_size` counts sentences."""
        return HParams(beam_size=4, alpha=0.6, extra_length=50, batch_size=32)

    def decode_metric_names(self):
        """The names `decode_metrics` reports, known before any evaluation (a class that
        overrides one overrides both; see `training.best_checkpoint.declared_decode_metrics`)."""
        return ("exact_match",)

    def decode_metrics(self, inputs, outputs, targets):
        """Scores decoded text against the references: `{name: value}` for TensorBoard.

        Args: the source texts, the decoded texts and the reference texts, aligned.
        By default the share of outputs equal to their reference.
        """
        exact = sum(output == target for output, target in zip(outputs, targets))
        return {"exact_match": exact / max(len(outputs), 1)}

    def check_decode_metrics(self):
        """Raises a UserError when `decode_metrics` cannot be computed here (a package they
        need is missing), so that it is said before any decoding; these always can."""

    def decode_report(self, inputs, outputs, targets):
        """Printable lines scoring decoded text against references (the decoder prints them)."""
        metrics = self.decode_metrics(inputs, outputs, targets)
        return [f"{name}: {value:.4f}" for name, value in metrics.items()]

    def check_max_length(self, mode, max_length):
        """Raises HParamsError when `max_length` leaves out every one of the mode's examples
        (training would have no batch to take); passes when the problem cannot count them
        without reading them (`length_histogram` None)."""
        histogram = self.length_histogram(mode)
        if histogram and min(histogram) > max_length:
            raise HParamsError(
                f"hparam max_length={max_length} leaves out every {mode} example of {self.name}: "
                f"they are {min(histogram)} to {max(histogram)} tokens long (the longer of "
                f"inputs and targets, EOS included). Raise it: --hparams=max_length="
                f"{max(histogram)} keeps them all.")

    def dropped_by_max_length(self, mode, max_length):
        """`(dropped, total)`: how many of the mode's examples are longer than `max_length`,
        or None when the problem cannot tell without reading them."""
        histogram = self.length_histogram(mode)
        if histogram is None:
            return None
        dropped = sum(count for length, count in histogram.items() if length > max_length)
        return dropped, sum(histogram.values())

    def dataset(self, mode, hparams, shuffle=None, repeat=None, seed=None, num_replicas=1,
                input_context=None):
        """Batches for `keras.Model.fit`: `(features, targets)` of at most `hparams.batch_size`
        tokens (global across replicas), examples longer than `hparams.max_length` dropped.

        Training data is shuffled and repeated forever; eval data keeps a fixed order and is
        read once. Batches have a multiple of `num_replicas` rows (some may be empty rows,
        all padding), so that a distribution strategy splits each evenly.

        With a tf.distribute `input_context` (`distribute_datasets_from_function`), the batches
        are one input pipeline's (one worker's): its own part of the examples, no example read
        by two pipelines in a pass, batched to one replica's share of the token budget. With
        hparam `packed`, training batches are packed rows from the token arrays
        (`data.packed_batches`).
        """
        import tensorflow as tf

        from t2t_repro.data import batching

        _check_mode(mode)
        training = mode == TRAIN
        shuffle = training if shuffle is None else shuffle
        repeat = training if repeat is None else repeat
        budget, shard = hparams.batch_size, (0, 1)
        if input_context is not None:  # this pipeline's part, per-replica batches
            budget //= input_context.num_replicas_in_sync
            num_replicas = 1
            shard = (input_context.input_pipeline_id, input_context.num_input_pipelines)
        if training and is_packed(hparams):
            from t2t_repro.data.packed_batches import PackedBatches, packed_dataset

            return packed_dataset(PackedBatches(
                self.token_arrays(mode), budget, hparams.max_length, shuffle=shuffle,
                repeat=repeat, seed=seed, rows_multiple=num_replicas, shard=shard))
        chunks = self.example_chunks(mode, repeat=repeat, shuffle=shuffle, seed=seed,
                                     shard=shard)
        batches = batching.batch_by_token_budget(
            chunks, budget, hparams.max_length, shuffle=shuffle, seed=seed,
            rows_multiple=num_replicas,
        )
        if shuffle:
            batches = batches.shuffle(_BATCH_SHUFFLE_BUFFER, seed=seed)
        else:
            batches = batches.shuffle(_EVAL_BATCH_MIX_BUFFER, seed=_EVAL_BATCH_MIX_SEED,
                                      reshuffle_each_iteration=False)
        batches = batches.map(batching.with_targets_as_labels)
        return batches.prefetch(tf.data.AUTOTUNE)

    def array_batches(self, mode, hparams, seed=None, num_devices=1, fixed_shapes=True):
        """The batches of `dataset`, from the token arrays in NumPy (`data.array_batches`):
        `(features, targets)` of at most `hparams.batch_size` tokens over all `num_devices`,
        examples longer than `hparams.max_length` dropped; training shuffled and repeated
        forever, eval read once. With `fixed_shapes`, padded to a few bucket shapes for
        jitted steps; with hparam `packed`, training batches are packed rows (one shape)."""
        from t2t_repro.data.array_batches import ArrayBatches

        _check_mode(mode)
        training = mode == TRAIN
        if training and is_packed(hparams):
            from t2t_repro.data.packed_batches import PackedBatches

            return PackedBatches(self.token_arrays(mode), hparams.batch_size, hparams.max_length,
                                 seed=seed, rows_multiple=num_devices)
        return ArrayBatches(self.token_arrays(mode), hparams.batch_size, hparams.max_length,
                            shuffle=training, repeat=training, seed=seed,
                            rows_multiple=num_devices, fixed_shapes=fixed_shapes)


def is_packed(hparams):
    """Whether training batches are packed rows (hparam `packed`; runs saved before it
    existed are not)."""
    return "packed" in hparams and bool(hparams.packed)


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got '{mode}'.")
