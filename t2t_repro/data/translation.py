"""Translation problems: where their raw parallel text comes from, and its layouts in `tmp_dir`.

For each split a problem lists the layouts it accepts in `tmp_dir`, in order of preference
(plain text files, WMT's SGM files, WMT's archives). The first layout whose files are all
present is read in place; a layout that is only partly present is an error naming the files it
still needs. With no layout present, the split is downloaded through tensorflow-datasets (the
real WMT14 sources) unless downloading is off.
"""

import dataclasses
import itertools
import os

from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.data.raw_text import (
    ArchiveMember,
    MissingRawDataError,
    ParallelReader,
    ParallelStats,
    RawDataError,
)
from t2t_repro.data.text_problem import PairSources, TextPairProblem
from t2t_repro.metrics.bleu import (bleu_report, sacre_bleu, sacre_bleu_signature, tokenized_bleu,
                                     tokenized_bleu_name)


# tensorflow-datasets' wmt14_translate splits: validation is newstest2013 (for these pairs).
WMT14_TFDS_SPLITS = {TRAIN: "train", EVAL: "validation"}


@dataclasses.dataclass(frozen=True)
class RawLayout:
    """One accepted way to lay out a split's raw text in `tmp_dir`.

    Args:
        description: what the files are, for messages ("plain text", "WMT14 archives").
        corpora: `(input_source, target_source)` pairs that together make the split; a
            source is a file name in `tmp_dir` or an ArchiveMember whose archive path is a
            file name in `tmp_dir`.
    """

    description: str
    corpora: tuple

    def file_names(self):
        """The files this layout needs in `tmp_dir`, each once, in order."""
        names = [
            source.archive_path if isinstance(source, ArchiveMember) else source
            for source in itertools.chain.from_iterable(self.corpora)
        ]
        return list(dict.fromkeys(names))

    def readers(self, tmp_dir):
        return [ParallelReader(_in_dir(tmp_dir, i), _in_dir(tmp_dir, t)) for i, t in self.corpora]


def _in_dir(tmp_dir, source):
    if isinstance(source, ArchiveMember):
        return ArchiveMember(os.path.join(tmp_dir, source.archive_path), source.member_name)
    return os.path.join(tmp_dir, source)


def find_layout(layouts, tmp_dir):
    """The first layout whose files are all in `tmp_dir`, or None if none has any file there.

    Raises RawDataError when no layout is complete but one is partly present.
    """
    present = {layout: [name for name in layout.file_names()
                        if os.path.exists(os.path.join(tmp_dir, name))] for layout in layouts}
    for layout in layouts:
        if len(present[layout]) == len(layout.file_names()):
            return layout
    for layout in layouts:
        if present[layout]:
            missing = [name for name in layout.file_names() if name not in present[layout]]
            raise RawDataError(
                f"{tmp_dir} has {', '.join(present[layout])} of the {layout.description} but "
                f"not {', '.join(missing)}. Add the missing files to {tmp_dir}, or remove the "
                f"others to download instead."
            )
    return None


class TfdsPairs:
    """The pairs of one split of a tensorflow-datasets translation builder (re-iterable);
    pairs with an empty side are dropped and counted, as from files."""

    def __init__(self, builder, split, input_language, target_language):
        self.builder = builder
        self.split = split
        self.input_language = input_language
        self.target_language = target_language
        self.stats = ParallelStats()

    def __iter__(self):
        self.stats = stats = ParallelStats()
        # A chunk of pairs a call: one at a time costs over 0.1 ms each, minutes for WMT14.
        chunks = self.builder.as_dataset(split=self.split).batch(1024).as_numpy_iterator()
        for chunk in chunks:
            for input_bytes, target_bytes in zip(chunk[self.input_language],
                                                 chunk[self.target_language]):
                input_text, target_text = input_bytes.decode("utf-8"), target_bytes.decode("utf-8")
                stats.lines += 1
                stats.empty_input += not input_text.strip()
                stats.empty_target += not target_text.strip()
                if input_text.strip() and target_text.strip():
                    stats.kept += 1
                    yield input_text, target_text

    def describe(self):
        stats = self.stats
        return (
            f"tensorflow-datasets {self.builder.name}/{self.builder.builder_config.name} "
            f"'{self.split}': {stats.lines} pairs, {stats.kept} kept, {stats.dropped} dropped "
            f"as empty (input {stats.empty_input}, target {stats.empty_target})"
        )


class TranslateProblem(TextPairProblem):
    """A translation problem whose raw text is found in `tmp_dir` or downloaded with tfds.

    Subclasses set the languages, `raw_layouts` (`{mode: (RawLayout, ...)}`), `tfds_name`
    and `tfds_splits` (`{mode: split}`).
    """

    main_decode_metric = "bleu"
    input_language = "en"
    target_language = None
    raw_layouts = {}
    tfds_name = None
    tfds_splits = {}

    def __init__(self, data_dir=None, data_hparams=""):
        super().__init__(data_dir, data_hparams)
        self._tfds_builder = None

    def raw_pairs(self, mode, tmp_dir, download):
        layout = find_layout(self.raw_layouts[mode], tmp_dir) if tmp_dir else None
        if layout is not None:
            return PairSources(layout.readers(tmp_dir))
        if not download or self.tfds_name is None:
            raise MissingRawDataError(self.missing_raw_data_message(mode, tmp_dir))
        return PairSources([TfdsPairs(self._downloaded_builder(mode, tmp_dir),
                                      self.tfds_splits[mode], *self.data_languages)])

    @property
    def data_languages(self):
        """(input, target) languages of the generated data: a `_rev` problem's languages are
        swapped, its data (shared with the forward problem) is not."""
        if self.reverse:
            return self.target_language, self.input_language
        return self.input_language, self.target_language

    def decode_metric_names(self):
        return ("bleu", tokenized_bleu_name(self.target_language))

    def decode_metrics(self, inputs, outputs, targets):
        """Real BLEU (sacreBLEU, detokenized) and the tokenized BLEU of the target language: the
        paper's compound-split one for German (`bleu_tokenized_compound_split`), without the
        German split for other languages (`bleu_tokenized`)."""
        return {
            "bleu": sacre_bleu(outputs, targets, self.target_language).score,
            tokenized_bleu_name(self.target_language): tokenized_bleu(
                outputs, targets, self.target_language
            ).score,
        }

    def check_decode_metrics(self):
        sacre_bleu_signature(self.target_language)  # sacreBLEU's tokenizer for the language

    def decode_report(self, inputs, outputs, targets):
        return bleu_report(outputs, targets, self.target_language)

    def missing_raw_data_message(self, mode, tmp_dir):
        """Names the files accepted for `mode`, where they go, and the download alternative."""
        layouts = "\n".join(
            f"  - {layout.description}: {', '.join(layout.file_names())}"
            for layout in self.raw_layouts[mode]
        )
        message = (
            f"No raw {mode} data for {self.name} in {_tmp_dir_phrase(tmp_dir)}. Put one of these "
            f"there "
            f"(text files: UTF-8, one sentence per line, aligned line by line):\n{layouts}"
        )
        if self.tfds_name is None:
            return message
        return (
            f"{message}\nor let datagen download it with tensorflow-datasets ({self.tfds_name}, "
            f"the WMT14 sources; needs network): run it without --nodownload."
        )

    def _downloaded_builder(self, mode, tmp_dir):
        if not tmp_dir:
            raise RawDataError(f"{self.name} needs --tmp_dir: where raw files are found or "
                               f"downloaded to.")
        if self._tfds_builder is None:
            import tensorflow_datasets as tfds

            builder = tfds.builder(self.tfds_name, data_dir=os.path.join(tmp_dir, "tfds"))
            print(f"{self.name}: downloading and preparing {self.tfds_name} "
                  f"into {tmp_dir}/tfds (done once).")
            try:
                builder.download_and_prepare(download_dir=os.path.join(tmp_dir, "downloads"))
            # Network, disk and checksum failures surface as many exception types.
            except Exception as error:  # noqa: BLE001
                raise RawDataError(
                    f"{self.missing_raw_data_message(mode, tmp_dir)}\nThe download through "
                    f"tensorflow-datasets failed: {type(error).__name__}: {error}"
                ) from error
            self._tfds_builder = builder
        return self._tfds_builder


def _tmp_dir_phrase(tmp_dir):
    return f"--tmp_dir={tmp_dir}" if tmp_dir else "--tmp_dir (none given)"


def wmt14_training_layouts(language):
    """The accepted layouts of WMT14's `<language>`-English training data, English as input.

    Plain `train.en` / `train.<language>`, or the WMT14 archives tensorflow-datasets also
    reads (member names as they are inside them). EN-FR adds the UN and Gigaword corpora.
    """
    def member(archive, path_pattern):
        return tuple(ArchiveMember(archive, path_pattern.format(side=side))
                     for side in ("en", language))

    corpora = [
        member("training-parallel-europarl-v7.tgz",
               f"training/europarl-v7.{language}-en.{{side}}"),
        member("training-parallel-commoncrawl.tgz", f"commoncrawl.{language}-en.{{side}}"),
        member("training-parallel-nc-v9.tgz",
               f"training/news-commentary-v9.{language}-en.{{side}}"),
    ]
    if language == "fr":
        corpora += [
            member("training-parallel-un.tgz", "un/undoc.2000.fr-en.{side}"),
            member("training-giga-fren.tar", "giga-fren.release2.fixed.{side}.gz"),
        ]
    return (
        RawLayout("plain text", (("train.en", f"train.{language}"),)),
        RawLayout("WMT14 training archives", tuple(corpora)),
    )


def newstest_layouts(year, language):
    """The accepted layouts of newstest<year> (English input): plain, SGM, or WMT's dev.tgz."""
    name = f"newstest{year}"
    return (
        RawLayout("plain text", ((f"{name}.en", f"{name}.{language}"),)),
        RawLayout("WMT SGM files", ((f"{name}-src.en.sgm", f"{name}-ref.{language}.sgm"),)),
        RawLayout("WMT dev archive", ((ArchiveMember("dev.tgz", f"dev/{name}.en"),
                                       ArchiveMember("dev.tgz", f"dev/{name}.{language}")),)),
    )
