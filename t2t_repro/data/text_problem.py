"""Problems over text pairs: subword vocabularies, examples generated once into TFRecords.

`generate_data` reads the raw text pairs a subclass finds in `tmp_dir` (`raw_pairs`), trains the
vocabulary on a sample of the training pairs, encodes every pair and writes sharded TFRecords.
One vocabulary over both sides is the default (the paper's shared embedding); a problem whose
`shared_vocabulary` is false trains one per side, each on its own side's text. It writes
`<name>.datagen.json` last; that file marks the data as complete, so running datagen again does
nothing. The files in `data_dir`:

    <name>.spm.model / <name>.spm.vocab      the shared sentencepiece model, and its pieces for
                                             people (separate vocabularies:
                                             <name>.source.spm.model, <name>.target.spm.model)
    <name>-train-00000-of-00100.tfrecord ... training examples, shuffled across and within shards
    <name>-eval-00000-of-00001.tfrecord      eval examples, in corpus order
    <name>-train.ids.npy, .offsets.npy       the same examples as token arrays, in corpus order,
    <name>-eval.ids.npy, .offsets.npy        for reading without TensorFlow (`token_arrays`)
    <name>.datagen.json                      data hparams, counts, length histograms, sources

Data generated before the token arrays existed gets them from its TFRecords when datagen runs
again.

A `_rev` variant reads the same files with inputs and targets swapped (its source vocabulary
is the data's target one).
"""

import collections
import itertools
import json
import os
import time

from t2t_repro.utils.atomic_files import write_text_atomically
from t2t_repro.data import token_arrays
from t2t_repro.data.packing import CHUNK_SIZE
from t2t_repro.data.problem import EVAL, MODES, TRAIN, Problem, ProblemDataError
from t2t_repro.data.raw_text import MissingRawDataError, RawDataError, reservoir_sample
from t2t_repro.data.shard_files import shard_paths
from t2t_repro.data.tensor2tensor_subwords import Tensor2TensorSubwords
from t2t_repro.data.vocabulary import (MINIMUM_VOCAB_SIZE, MINIMUM_VOCAB_SIZE_NOTE,
                                         SubwordVocabulary, train_vocabulary)
from t2t_repro.hparams import HParams, at_least
from t2t_repro.names import EOS_ID

# The sides of the data as generated (a `_rev` variant's inputs are the data's targets).
SOURCE, TARGET = "source", "target"
_ENCODE_BATCH = 10000  # pairs encoded per sentencepiece call (it encodes a batch in parallel)
_SAMPLE_SEED = 1234
_SHUFFLE_SEED = 5678
# How vocabularies are stored: datagen trains sentencepiece models; a run imported from
# tensor2tensor keeps its SubwordTextEncoder vocabulary (metadata "vocabulary_format").
SENTENCEPIECE, TENSOR2TENSOR_SUBWORDS = "sentencepiece", "tensor2tensor_subwords"
VOCABULARY_SUFFIXES = {SENTENCEPIECE: ".spm.model", TENSOR2TENSOR_SUBWORDS: ".subwords"}
VOCABULARY_CLASSES = {SENTENCEPIECE: SubwordVocabulary,
                      TENSOR2TENSOR_SUBWORDS: Tensor2TensorSubwords}


def _shown(value):
    """A data hparam's value in a message: an empty one (a path not given) as "unset"."""
    return "unset" if value == "" else value


class PairSources:
    """The `(input_text, target_text)` pairs of one or more sources, one after the other.

    Re-iterable (datagen reads the training text twice: to sample the vocabulary's text, then
    to encode it). Each source is a re-iterable of pairs whose `describe()` says, after an
    iteration, where its pairs came from and what was dropped.
    """

    def __init__(self, sources):
        self.sources = sources

    def __iter__(self):
        return itertools.chain.from_iterable(self.sources)

    def describe(self):
        return [source.describe() for source in self.sources]


class TextPairProblem(Problem):
    """Text-to-text problems with sentencepiece vocabularies, stored as TFRecords.

    Subclasses set `default_vocab_size` and implement `raw_pairs(mode, tmp_dir, download)`,
    which returns the mode's `PairSources`. `source_vocabulary` encodes inputs and
    `target_vocabulary` targets; with `shared_vocabulary` they are one object.
    """

    default_vocab_size = 32000
    data_hparam_ranges = {"num_train_shards": at_least(1), "vocab_sample_pairs": at_least(1),
                          "vocab_size": at_least(MINIMUM_VOCAB_SIZE,
                                                 f" ({MINIMUM_VOCAB_SIZE_NOTE})")}
    shared_vocabulary = True  # one model over both sides; False: one per side
    vocab_split_by_script = True  # see `vocabulary.train_vocabulary`
    character_coverage = 1.0  # see `vocabulary.train_vocabulary`
    reverse = False  # True on `_rev` variants: inputs and targets swapped when read

    def __init__(self, data_dir=None, data_hparams=""):
        super().__init__(data_dir, data_hparams)
        self._metadata = None
        self._vocabularies = None  # {data side: SubwordVocabulary}

    def default_data_hparams(self):
        return HParams(
            vocab_size=self.default_vocab_size,
            # Training pairs the vocabulary is learnt from (a uniform sample; all if fewer).
            vocab_sample_pairs=500000,
            num_train_shards=100,
        )

    def raw_pairs(self, mode, tmp_dir, download):
        raise NotImplementedError

    @property
    def data_name(self):
        """The name the data files carry: a `_rev` variant shares its forward problem's files."""
        return self.name.removesuffix("_rev") if self.reverse else self.name

    def _path(self, suffix):
        if not self.data_dir:
            raise ProblemDataError(f"{self.name} needs --data_dir: where its data is generated.")
        return os.path.join(self.data_dir, self.data_name + suffix)

    @property
    def metadata_path(self):
        return self._path(".datagen.json")

    def vocabulary_file(self, side, vocabulary_format=SENTENCEPIECE):
        """The vocabulary file of a side of the data (SOURCE or TARGET, as generated): a
        sentencepiece model, or a tensor2tensor subword vocabulary (an imported run's)."""
        suffix = VOCABULARY_SUFFIXES[vocabulary_format]
        return self._path(suffix if self.shared_vocabulary else f".{side}{suffix}")

    @property
    def vocabulary_format(self):
        """How the data's vocabularies are stored, as its metadata records (sentencepiece
        unless an imported tensor2tensor run says otherwise; also before datagen)."""
        if self._metadata is None and not os.path.exists(self.metadata_path):
            return SENTENCEPIECE
        return self.metadata().get("vocabulary_format", SENTENCEPIECE)

    def _problem_side(self, side):
        """The data side that this problem's `side` reads (swapped on `_rev` variants)."""
        if self.reverse:
            return TARGET if side == SOURCE else SOURCE
        return side

    @property
    def source_vocabulary_path(self):
        return self.vocabulary_file(self._problem_side(SOURCE), self.vocabulary_format)

    @property
    def target_vocabulary_path(self):
        return self.vocabulary_file(self._problem_side(TARGET), self.vocabulary_format)

    @property
    def vocabulary_paths(self):
        """The distinct vocabulary files, source first: one when shared, else two."""
        return list(dict.fromkeys([self.source_vocabulary_path, self.target_vocabulary_path]))

    def vocabulary_files(self):
        return {SOURCE: self.source_vocabulary_path, TARGET: self.target_vocabulary_path}

    @property
    def vocabulary_path(self):
        """The shared vocabulary's file; an error for a problem with two."""
        self._check_shared()
        return self.source_vocabulary_path

    def _check_shared(self):
        if not self.shared_vocabulary:
            raise ProblemDataError(
                f"{self.name} has separate source and target vocabularies "
                f"({', '.join(self.vocabulary_paths)}); ask for source_vocabulary or "
                f"target_vocabulary.")

    def shard_paths(self, mode):
        splits = self.metadata()["splits"]
        if mode not in splits:
            raise ProblemDataError(
                f"{self.data_dir} holds the vocabularies of {self.data_name} but no {mode} "
                f"examples (an imported model's data folder): generate the data to train on "
                f"into another --data_dir with datagen, encoded with these vocabularies "
                f"(docs/importing.md).")
        paths = shard_paths(self._path(f"-{mode}"), splits[mode]["shards"])
        self._check_written(paths, f"the {mode} examples")
        return paths

    # --- Reading generated data -------------------------------------------------------------

    def metadata(self):
        """What datagen recorded; adopts its data hparams (explicit overrides must match)."""
        if self._metadata is None:
            if not os.path.exists(self.metadata_path):
                raise ProblemDataError(
                    f"No {self.data_name} data in {self.data_dir} ({self.metadata_path} is "
                    f"missing). Generate it with `python -m t2t_repro.datagen "
                    f"--problem={self.name} --data_dir={self.data_dir} --tmp_dir=<raw files>`, "
                    f"or add --generate_data and --tmp_dir to the trainer."
                )
            metadata = self._read_metadata()
            self._adopt_data_hparams(HParams(**metadata["data_hparams"]))
            self._metadata = metadata
        return self._metadata

    def _read_metadata(self):
        """datagen's record, read; one that is cut short or written over is a
        ProblemDataError naming it."""
        try:
            with open(self.metadata_path, "rb") as f:
                metadata = json.loads(f.read())
            if not (isinstance(metadata, dict) and isinstance(metadata.get("data_hparams"), dict)
                    and isinstance(metadata.get("splits"), dict)):
                raise ValueError("no data hparams and splits in it")
        except ValueError as error:  # JSONDecodeError and UnicodeDecodeError included
            raise ProblemDataError(
                f"{self.metadata_path} is not datagen's record of the {self.data_name} data "
                f"({error}); restore it from a copy, or generate the data again into a new "
                f"--data_dir.") from None
        return metadata

    def _check_written(self, paths, what):
        """ProblemDataError when files of the generated data (`what`: which) are gone: datagen
        wrote them, but something removed them since."""
        missing = [path for path in paths if not os.path.exists(path)]
        if missing:
            files, are, them = ((f"{missing[0]} ({what})", "is", "it") if len(missing) == 1 else
                                (f"{missing[0]} and {len(missing) - 1} more ({what})", "are",
                                 "them"))
            raise ProblemDataError(
                f"the {self.data_name} data in {self.data_dir} is incomplete: {files} {are} "
                f"gone since datagen wrote {them}. Restore {them} from a copy, or generate the "
                f"data again into a new --data_dir.")

    def _adopt_data_hparams(self, generated):
        conflicts = [
            f"{name}={_shown(getattr(self.data_hparams, name))} asked, "
            f"{_shown(getattr(generated, name))} there"
            for name in self.explicit_data_hparams
            if getattr(generated, name) != getattr(self.data_hparams, name)
        ]
        if conflicts:
            raise ProblemDataError(
                f"{self.data_dir} holds {self.data_name} data generated with other data hparams "
                f"({'; '.join(conflicts)}). Drop those from --data_hparams to use that data, or "
                f"generate into another --data_dir."
            )
        self.data_hparams = generated

    def check_data(self, modes=()):
        """Loads the metadata and the vocabularies, and finds the shards of `modes`' examples;
        raises if any is missing."""
        for mode in modes:
            self.shard_paths(mode)
        return self._loaded_vocabularies()

    def _loaded_vocabularies(self):
        """{data side: SubwordVocabulary}, loaded once; one object for both when shared."""
        if self._vocabularies is None:
            self.metadata()  # without generated data: the error that says how to generate it
            self._check_written(self.vocabulary_paths, "the vocabulary")
            vocabulary_format = self.vocabulary_format
            load = VOCABULARY_CLASSES[vocabulary_format]
            if self.shared_vocabulary:
                shared = load(self.vocabulary_file(SOURCE, vocabulary_format))
                self._vocabularies = {SOURCE: shared, TARGET: shared}
            else:
                self._vocabularies = {side: load(self.vocabulary_file(side, vocabulary_format))
                                      for side in (SOURCE, TARGET)}
        return self._vocabularies

    @property
    def source_vocabulary(self):
        return self._loaded_vocabularies()[self._problem_side(SOURCE)]

    @property
    def target_vocabulary(self):
        return self._loaded_vocabularies()[self._problem_side(TARGET)]

    @property
    def vocabulary(self):
        """The shared vocabulary; an error for a problem with two."""
        self._check_shared()
        return self.source_vocabulary

    def model_hparams(self, hparams):
        """Separate vocabularies need separate source and target embeddings: the hparam
        `shared_source_target_embedding` follows `shared_vocabulary` (as generated), unless
        both list the same pieces by id (an imported model's joint vocabulary, whose
        SentencePiece models differ per side), where one embedding means the same on both."""
        self.metadata()
        if (self.shared_vocabulary or not hparams.values().get("shared_source_target_embedding")
                or self.source_vocabulary.all_pieces() == self.target_vocabulary.all_pieces()):
            return hparams
        return HParams(**{**hparams.values(), "shared_source_target_embedding": False})

    @property
    def input_vocab_size(self):
        return self.source_vocabulary.vocab_size

    @property
    def target_vocab_size(self):
        return self.target_vocabulary.vocab_size

    def encode(self, text):
        return self.source_vocabulary.encode(text) + [EOS_ID]

    def encode_target(self, text):
        return self.target_vocabulary.encode(text) + [EOS_ID]

    def encode_target_prefix(self, text):
        return self.target_vocabulary.encode(text)

    def decode(self, ids):
        return self.target_vocabulary.decode(ids)

    def decode_inputs(self, ids):
        return self.source_vocabulary.decode(ids)

    def graph_text(self):
        from t2t_repro.data.graph_text import SubwordGraphText

        return SubwordGraphText(self.source_vocabulary, self.target_vocabulary)

    def length_histogram(self, mode):
        lengths = self.metadata()["splits"][mode]["length_histogram"]
        return {int(length): count for length, count in lengths.items()}

    def _oriented(self, dataset):
        if self.reverse:
            from t2t_repro.data.records import swapped_sides

            return dataset.map(swapped_sides)
        return dataset

    def examples(self, mode):
        from t2t_repro.data import records

        return self._oriented(records.read_shards(self.shard_paths(mode)))

    def token_arrays(self, mode):
        self.metadata()
        prefix = self._path(f"-{mode}")
        if not token_arrays.exist(prefix):
            raise ProblemDataError(
                f"{self.data_dir} has no token arrays of {self.data_name} ({prefix}.ids.npy), "
                f"which training without TensorFlow reads; its data was generated before they "
                f"existed. Run `python -m t2t_repro.datagen --problem={self.name} "
                f"--data_dir={self.data_dir}` once where TensorFlow is installed: it writes "
                f"them from the TFRecords.")
        arrays = token_arrays.TokenArrays.load(prefix)
        return arrays.swapped() if self.reverse else arrays

    def example_chunks(self, mode, repeat=False, shuffle=False, seed=None, shard=(0, 1)):
        """Split over input pipelines by shard file: pipeline i of n reads files i, i + n, ..."""
        index, count = shard
        paths = self.shard_paths(mode)
        if len(paths) < count:
            raise ValueError(
                f"{self.data_name} has {len(paths)} {mode} shard file(s), fewer than the "
                f"{count} input pipelines (workers) reading them; generate the data again with "
                f"--data_hparams=num_train_shards={count} or more.")
        from t2t_repro.data import records

        chunks = records.read_chunks(
            paths[index::count], CHUNK_SIZE, shuffle_files=shuffle, repeat=repeat, seed=seed
        )
        return self._oriented(chunks)

    # --- Generating data --------------------------------------------------------------------

    def generate_data(self, tmp_dir=None, download=True):
        """Raw text in `tmp_dir` (or downloaded) -> vocabulary and TFRecords in `data_dir`, once."""
        if os.path.exists(self.metadata_path):
            self.check_data(modes=self.metadata()["splits"])
            if not self._write_missing_token_arrays():
                print(f"{self.data_name}: data already generated in {self.data_dir}; nothing "
                      f"to do.")
            return
        started = time.time()
        sources = self._find_raw_pairs(tmp_dir, download)
        vocabularies = self._generate_vocabularies(sources[TRAIN])
        vocab_seconds = time.time() - started
        if self.shared_vocabulary:
            print(f"{self.data_name}: {vocabularies[SOURCE].vocab_size}-piece vocabulary "
                  f"in {vocab_seconds:.1f} s -> {vocabularies[SOURCE].model_path}")
        else:
            print(f"{self.data_name}: {vocabularies[SOURCE].vocab_size}-piece source and "
                  f"{vocabularies[TARGET].vocab_size}-piece target vocabularies in "
                  f"{vocab_seconds:.1f} s -> {vocabularies[SOURCE].model_path}, "
                  f"{vocabularies[TARGET].model_path}")
        # The eval split first: a fault in it (no pairs, misaligned files) shows in seconds,
        # not after the training shards.
        evaluation = self._write_split(EVAL, sources[EVAL], vocabularies, 1, shuffle=False)
        splits = {
            TRAIN: self._write_split(TRAIN, sources[TRAIN], vocabularies,
                                     self.data_hparams.num_train_shards, shuffle=True),
            EVAL: evaluation,
        }
        sizes = {f"{side}_vocab_size": vocabulary.vocab_size
                 for side, vocabulary in vocabularies.items()}
        metadata = {
            "problem": self.data_name,
            "data_hparams": self.data_hparams.values(),
            "vocab_size": vocabularies[SOURCE].vocab_size,
            **({} if self.shared_vocabulary else sizes),
            "vocabulary_format": vocabulary_format_of(vocabularies[SOURCE]),
            "splits": splits,
            "seconds": {"vocabulary": round(vocab_seconds, 1),
                        "total": round(time.time() - started, 1)},
        }
        write_text_atomically(self.metadata_path, json.dumps(metadata, indent=1))
        self._metadata, self._vocabularies = metadata, vocabularies
        print(f"{self.data_name}: data generated in {metadata['seconds']['total']:.1f} s.")

    def _write_missing_token_arrays(self):
        """Writes the token arrays of splits generated without them, from their TFRecords;
        returns whether there were any."""
        from t2t_repro.data import records

        missing = [mode for mode in MODES if not token_arrays.exist(self._path(f"-{mode}"))]
        for mode in missing:
            with token_arrays.TokenArrayWriter(self._path(f"-{mode}")) as arrays:
                for inputs, targets in records.read_id_arrays(self.shard_paths(mode)):
                    arrays.add(inputs, targets)
            print(f"{self.data_name} {mode}: token arrays written from the TFRecords.")
        return bool(missing)

    def _find_raw_pairs(self, tmp_dir, download):
        """Every split's sources, found before any work. Problems with the files in `tmp_dir`
        are reported for all splits at once, before anything is downloaded."""
        sources, missing, errors = {}, [], []
        for mode in MODES:
            try:
                sources[mode] = self.raw_pairs(mode, tmp_dir, download=False)
            except MissingRawDataError as error:
                missing.append(mode)
                errors.append(str(error))
            except RawDataError as error:
                errors.append(str(error))
        if len(errors) > len(missing) or (missing and not download):
            raise RawDataError("\n".join(errors))
        for mode in missing:
            sources[mode] = self.raw_pairs(mode, tmp_dir, download=True)
        return sources

    def generate_vocabulary(self, tmp_dir=None, download=True):
        """Only the shared vocabulary datagen would train (TensorFlow-free): for measuring with
        the problem's vocabulary where its TFRecords are not needed."""
        self._check_shared()
        return self._generate_vocabularies(self._find_raw_pairs(tmp_dir, download)[TRAIN])[SOURCE]

    def _generate_vocabularies(self, train_pairs):
        """{data side: vocabulary} of a sample of the training pairs: one model over both sides
        (the same object for both) when shared, else each side's over its own text; each also
        listed as `.vocab` for people."""
        sample = reservoir_sample(train_pairs, self.data_hparams.vocab_sample_pairs, _SAMPLE_SEED)
        if not sample:
            raise ProblemDataError(
                f"{self.data_name}: no training pair is left to learn a vocabulary from "
                f"({'; '.join(train_pairs.describe())}); check the files, or loosen the "
                f"rules that dropped the pairs.")
        created = not os.path.exists(self.data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        try:
            if self.shared_vocabulary:
                shared = self._new_vocabulary(SOURCE, [text for pair in sample for text in pair])
                vocabularies = {SOURCE: shared, TARGET: shared}
            else:
                vocabularies = {side: self._new_vocabulary(side, [pair[index] for pair in sample])
                                for index, side in enumerate((SOURCE, TARGET))}
        except BaseException:
            if created and not os.listdir(self.data_dir):  # nothing was written: leave nothing
                os.rmdir(self.data_dir)
            raise
        for vocabulary in dict.fromkeys(vocabularies.values()):
            if vocabulary_format_of(vocabulary) == SENTENCEPIECE:
                write_piece_listing(vocabulary)
        return vocabularies

    def vocab_size_hparam(self, side):
        """The data hparam that sets a side's vocabulary size (the shared one's: either side)."""
        return "vocab_size"

    def _new_vocabulary(self, side, sentences):
        """A BPE model trained on `sentences`, written to the side's `vocabulary_file`."""
        size_hparam = self.vocab_size_hparam(side)
        return train_vocabulary(sentences, getattr(self.data_hparams, size_hparam),
                                self.vocabulary_file(side), self.vocab_split_by_script,
                                self.character_coverage, size_hparam)

    def _write_split(self, mode, pairs, vocabularies, num_shards, shuffle):
        """Encodes `pairs` into the mode's shards; returns the split's metadata."""
        from t2t_repro.data import records

        lengths = collections.Counter()
        with token_arrays.TokenArrayWriter(self._path(f"-{mode}")) as arrays:
            records.write_shards(
                _also_written_to(arrays, _encoded_examples(pairs, vocabularies, lengths)),
                self._path(f"-{mode}"), num_shards,
                shuffle_seed=_SHUFFLE_SEED if shuffle else None,
            )
        count = sum(lengths.values())
        if not count:
            raise ProblemDataError(f"{self.name}: the {mode} split has no examples "
                                   f"({'; '.join(pairs.describe())}).")
        for line in pairs.describe():
            print(f"{self.data_name} {mode}: {line}")
        print(f"{self.data_name} {mode}: {count} examples in {num_shards} shard(s).")
        return {
            "examples": count,
            "shards": num_shards,
            "sources": pairs.describe(),
            "length_histogram": {str(length): lengths[length] for length in sorted(lengths)},
        }


def vocabulary_format_of(vocabulary):
    """The format name (a VOCABULARY_CLASSES key) of a vocabulary object."""
    return next(name for name, cls in VOCABULARY_CLASSES.items() if isinstance(vocabulary, cls))


def write_piece_listing(vocabulary):
    """`<model>.vocab` beside a vocabulary's `.model`: its pieces by id, for people."""
    write_text_atomically(vocabulary.model_path.removesuffix(".model") + ".vocab", "".join(
        f"{i}\t{piece}\n" for i, piece in enumerate(vocabulary.all_pieces())))


def _encoded_examples(pairs, vocabularies, lengths):
    """`(input_ids, target_ids)` of each pair (encoded with the {side: vocabulary} of its side),
    EOS appended; counts lengths into `lengths`."""
    pairs = iter(pairs)
    while batch := list(itertools.islice(pairs, _ENCODE_BATCH)):
        inputs = vocabularies[SOURCE].encode([pair[0] for pair in batch])
        targets = vocabularies[TARGET].encode([pair[1] for pair in batch])
        for input_ids, target_ids in zip(inputs, targets):
            input_ids.append(EOS_ID)
            target_ids.append(EOS_ID)
            lengths[max(len(input_ids), len(target_ids))] += 1
            yield input_ids, target_ids


def _also_written_to(writer, examples):
    """`examples`, each also added to the `TokenArrayWriter`."""
    for inputs, targets in examples:
        writer.add(inputs, targets)
        yield inputs, targets


def register_reversed(registry, problem_class):
    """Registers `<name>_rev`: `problem_class` with inputs and targets swapped (t2t's convention).

    Its `input_language` and `target_language`, where the class has them, are swapped too, so
    that what depends on the target language (BLEU's tokenizer) sees the reversed direction; its
    data stays the forward problem's, swapped on reading.
    """
    attributes = {
        "reverse": True,
        "__doc__": f"{problem_class.__doc__.splitlines()[0]} Reversed: targets -> inputs.",
    }
    if hasattr(problem_class, "input_language"):
        attributes["input_language"] = problem_class.target_language
        attributes["target_language"] = problem_class.input_language
    return registry.register(type(problem_class.__name__ + "Rev", (problem_class,), attributes))
