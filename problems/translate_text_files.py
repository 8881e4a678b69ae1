"""Translation between any two languages from parallel text files, configured with no code.

    python -m t2t_repro.datagen --problem=translate_text_files --data_dir=data \\
        --data_hparams=train_source=corpus/train.de,train_target=corpus/train.en,\\
eval_source=corpus/val.de,eval_target=corpus/val.en,source_language=de,target_language=en

Every setting is a data hparam (`--data_hparams`), recorded with the generated data in
`<data_dir>/translate_text_files.datagen.json`, so the trainer, decoder and exporter need only
`--problem` and `--data_dir`. The cleaning counts go to `translate_text_files.cleaning.json`.
With `shared_vocabulary=false` each side has its own SentencePiece model of `vocab_size` pieces
(`translate_text_files.source.spm.model`, `.target.spm.model`) and the model its own source
and target embeddings.
"""

import glob
import json
import os

from t2t_repro.data.cleaning import CleanedPairs, CleaningRules
from t2t_repro.data.problem import EVAL, TRAIN, ProblemDataError
from t2t_repro.data.raw_text import ParallelReader, RawDataError
from t2t_repro.data.text_problem import (SENTENCEPIECE, SOURCE, TARGET, TENSOR2TENSOR_SUBWORDS,
                                         VOCABULARY_CLASSES)
from t2t_repro.data.translation import TranslateProblem
from t2t_repro.data.vocabulary import (MINIMUM_VOCAB_SIZE, MINIMUM_VOCAB_SIZE_NOTE,
                                         VocabularyError)
from t2t_repro.hparams import at_least
from t2t_repro.metrics.bleu import LANGUAGE_CODE_RULE, is_language_code
from t2t_repro.registry import problems
from t2t_repro.utils.atomic_files import atomic_path, write_text_atomically

# The data hparams naming each split's (source, target) files.
FILE_HPARAMS = {TRAIN: ("train_source", "train_target"), EVAL: ("eval_source", "eval_target")}
REQUIRED_HPARAMS = (*FILE_HPARAMS[TRAIN], *FILE_HPARAMS[EVAL], "source_language",
                    "target_language")
# The data hparams naming given SentencePiece models: one shared, or one per side.
GIVEN_VOCABULARY_HPARAMS = ("vocabulary", "source_vocabulary", "target_vocabulary")
# The data hparams sizing the vocabularies trained here: the shared one, or each side's.
SIZE_HPARAMS = ("vocab_size", "source_vocab_size", "target_vocab_size")


def matched_files(name, pattern):
    """The files a path or glob pattern names, sorted; none, or a folder among them, is a
    RawDataError. An existing file is itself, though its name holds `[`, `*` or `?`."""
    path = os.path.expanduser(pattern)
    paths = [path] if os.path.isfile(path) else sorted(glob.glob(path))
    if not paths:
        raise RawDataError(f"{name}={pattern} matches no file.")
    folders = [path for path in paths if os.path.isdir(path)]
    if folders:
        raise RawDataError(
            f"{name}={pattern} names the folder {folders[0]}, not a text file; name a file in "
            f"it, or a glob pattern of its files.")
    return paths


def paired_files(source_name, source_pattern, target_name, target_pattern):
    """`[(source_file, target_file)]`, paired one to one in sorted order; different numbers of
    files are a RawDataError naming both lists."""
    sources = matched_files(source_name, source_pattern)
    targets = matched_files(target_name, target_pattern)
    same = [source for source, target in zip(sources, targets)
            if os.path.samefile(source, target)]
    if same:
        raise RawDataError(
            f"{source_name}={source_pattern} and {target_name}={target_pattern} both name "
            f"{same[0]}; give each side's file (a tab-separated corpus: split its columns "
            f"into two files, e.g. with cut -f1 and cut -f2).")
    if len(sources) != len(targets):
        raise RawDataError(
            f"{source_name}={source_pattern} matches {len(sources)} files "
            f"({', '.join(sources)}) but {target_name}={target_pattern} matches {len(targets)} "
            f"({', '.join(targets)}); source and target files are paired one to one.")
    return list(zip(sources, targets))


@problems.register
class TranslateTextFiles(TranslateProblem):
    """Any language pair from parallel text files (UTF-8, one sentence a line, aligned line by
    line) named by paths or glob patterns in --data_hparams; one shared vocabulary, or one per
    side (shared_vocabulary=false). Cleaning rules (`data.cleaning`) apply to the training
    pairs; the eval split drops only empty sides."""

    data_hparam_ranges = {
        **TranslateProblem.data_hparam_ranges,
        **{f"{side}_vocab_size": ((lambda value: value == 0 or value >= MINIMUM_VOCAB_SIZE),
                                  f"0 (vocab_size) or at least {MINIMUM_VOCAB_SIZE} "
                                  f"({MINIMUM_VOCAB_SIZE_NOTE})")
           for side in ("source", "target")},
        "character_coverage": ((lambda value: 0 < value <= 1), "above 0 and at most 1"),
        "max_length": at_least(0, " (0: no limit)"),
        # Any ratio below 1 drops every pair: the longer side is never shorter than the other.
        "max_length_ratio": ((lambda value: value == 0 or value >= 1),
                             "0 (no limit) or at least 1"),
        **{name: ((lambda value: value == "" or is_language_code(value)), LANGUAGE_CODE_RULE)
           for name in ("source_language", "target_language")},
    }

    def __init__(self, data_dir=None, data_hparams=""):
        super().__init__(data_dir, data_hparams)
        self._cleaning = {}

    def default_data_hparams(self):
        """Every problem's, plus the files, languages, vocabulary options and cleaning rules
        (docs/training.md, "Your own corpus"); empty strings are required values."""
        hparams = super().default_data_hparams()
        for name in REQUIRED_HPARAMS:
            hparams.add_hparam(name, "")
        hparams.add_hparam("shared_vocabulary", True)
        hparams.add_hparam("source_vocab_size", 0)  # separate vocabularies; 0: vocab_size
        hparams.add_hparam("target_vocab_size", 0)
        for name in GIVEN_VOCABULARY_HPARAMS:
            hparams.add_hparam(name, "")
        hparams.add_hparam("character_coverage", 1.0)
        hparams.add_hparam("max_length", 200)
        hparams.add_hparam("max_length_ratio", 0.0)
        hparams.add_hparam("deduplicate", False)
        return hparams

    @property
    def input_language(self):
        return self.data_hparams.source_language

    @property
    def target_language(self):
        return self.data_hparams.target_language

    @property
    def shared_vocabulary(self):
        return self.data_hparams.shared_vocabulary

    def vocab_size_hparam(self, side):
        """`<side>_vocab_size` for separate vocabularies where given, else `vocab_size`."""
        if self.shared_vocabulary:
            sided = [name for name in ("source_vocab_size", "target_vocab_size")
                     if getattr(self.data_hparams, name)]
            if sided:
                applies = "applies" if len(sided) == 1 else "apply"
                raise ProblemDataError(
                    f"{self.name}: {', '.join(sided)} {applies} to separate vocabularies "
                    f"(shared_vocabulary=false); a shared one has vocab_size pieces.")
            return "vocab_size"
        sided = f"{side}_vocab_size"
        return sided if getattr(self.data_hparams, sided) else "vocab_size"

    @property
    def character_coverage(self):
        return self.data_hparams.character_coverage

    @property
    def cleaning_path(self):
        return self._path(".cleaning.json")

    def raw_pairs(self, mode, tmp_dir, download):
        """The mode's files, read in place (`tmp_dir` and `download` do not apply)."""
        missing = [name for name in REQUIRED_HPARAMS if not getattr(self.data_hparams, name)]
        if missing:
            raise ProblemDataError(
                f"{self.name} needs {', '.join(missing)} in --data_hparams, e.g. "
                f"--data_hparams=train_source=train.de,train_target=train.en,...,"
                f"source_language=de,target_language=en.")
        source, target = FILE_HPARAMS[mode]
        files = paired_files(source, getattr(self.data_hparams, source),
                             target, getattr(self.data_hparams, target))
        return CleanedPairs([ParallelReader(*pair) for pair in files], self.cleaning_rules(mode))

    def cleaning_rules(self, mode):
        """The data hparams' rules for training; none but `empty` for eval, whose pairs are
        what the model is measured on."""
        if mode != TRAIN:
            return CleaningRules()
        hparams = self.data_hparams
        return CleaningRules(hparams.max_length, hparams.max_length_ratio, hparams.deduplicate)

    def _given_vocabulary_hparam(self, side):
        """The data hparam that may name a SentencePiece model for `side`'s vocabulary; one
        meant for the other layout (shared or separate) is an error."""
        expected = "vocabulary" if self.shared_vocabulary else f"{side}_vocabulary"
        misplaced = [name for name in GIVEN_VOCABULARY_HPARAMS
                     if getattr(self.data_hparams, name) and
                     (name == "vocabulary") != self.shared_vocabulary]
        if misplaced:
            layout = ("one shared vocabulary: give vocabulary=" if self.shared_vocabulary else
                      "separate vocabularies: give source_vocabulary= and target_vocabulary=")
            raise ProblemDataError(
                f"{self.name}: {', '.join(misplaced)} does not apply with shared_vocabulary="
                f"{str(self.shared_vocabulary).lower()}; {layout}.")
        return expected

    def _check_sizes_apply(self):
        """ProblemDataError for a size hparam given for vocabularies that are all given rather
        than trained here: it would size nothing."""
        named_by = {side: self._given_vocabulary_hparam(side) for side in (SOURCE, TARGET)}
        given = {side: getattr(self.data_hparams, name) for side, name in named_by.items()}
        for name in SIZE_HPARAMS:
            sized = [side for side in given if self.vocab_size_hparam(side) == name]
            if name in self.explicit_data_hparams and sized and all(given[s] for s in sized):
                models = list(dict.fromkeys(
                    f"{named_by[side]}={given[side]}" for side in sized))
                are_given = ("is given, with its own size" if len(models) == 1 else
                             "are given, with their own sizes")
                raise ProblemDataError(
                    f"{self.name}: {name}={getattr(self.data_hparams, name)} sizes a vocabulary "
                    f"trained here, but {' and '.join(models)} {are_given}; drop {name}.")

    def _generate_vocabularies(self, train_pairs):
        """As every problem's, after checking that a given tensor2tensor vocabulary is not
        paired with a SentencePiece one (the data records one format for both sides), and that
        no size is asked of a given vocabulary."""
        self._check_sizes_apply()
        if not self.shared_vocabulary:
            given = {name: getattr(self.data_hparams, name)
                     for name in ("source_vocabulary", "target_vocabulary")}
            subwords = [name for name, path in given.items() if path.endswith(".subwords")]
            if len(subwords) == 1:
                (other,) = set(given) - set(subwords)
                raise ProblemDataError(
                    f"{self.name}: {subwords[0]}={given[subwords[0]]} is a tensor2tensor "
                    f"vocabulary, so the other side's must be one too: give "
                    f"{other}=<a .subwords file> (the imported run's data folder has both).")
        return super()._generate_vocabularies(train_pairs)

    def _new_vocabulary(self, side, sentences):
        """The vocabulary a data hparam names (`vocabulary`, or `source_vocabulary` /
        `target_vocabulary`): a SentencePiece model, or a tensor2tensor subword vocabulary
        (`.subwords`, an imported tensor2tensor run's), copied into the data folder to encode
        a new corpus as a run to fine-tune was encoded; else a SentencePiece model trained
        here."""
        name = self._given_vocabulary_hparam(side)
        given = getattr(self.data_hparams, name)
        if not given:
            return super()._new_vocabulary(side, sentences)
        given = os.path.expanduser(given)
        vocabulary_format = (TENSOR2TENSOR_SUBWORDS if given.endswith(".subwords") else
                             SENTENCEPIECE)
        path = self.vocabulary_file(side, vocabulary_format)
        load = VOCABULARY_CLASSES[vocabulary_format]
        try:
            load(given)
        except (OSError, RuntimeError, VocabularyError) as error:
            kind = {SENTENCEPIECE: "a SentencePiece model",
                    TENSOR2TENSOR_SUBWORDS: "a tensor2tensor subword vocabulary"}
            raise RawDataError(
                f"{name}={given} is not {kind[vocabulary_format]} this can read "
                f"({getattr(error, 'reason', error)}); name a run's "
                f"<data_dir>/{os.path.basename(path)}.") from None
        with open(given, "rb") as original, atomic_path(path) as temporary, \
                open(temporary, "wb") as copy:
            copy.write(original.read())
        return load(path)

    def _write_split(self, mode, pairs, vocabularies, num_shards, shuffle):
        """The split, and its cleaning counts added to `cleaning.json` and the metadata."""
        split = super()._write_split(mode, pairs, vocabularies, num_shards, shuffle)
        split["cleaning"] = self._cleaning[mode] = pairs.counts()
        write_text_atomically(self.cleaning_path, json.dumps(self._cleaning, indent=1))
        return split
