"""Translation problems end to end: raw WMT-style layouts in --tmp_dir -> vocabulary and TFRecords.

Expected values come from the raw files themselves (line counts, the sentences), from
tensorflow-datasets' own WMT14 definitions (archive and member names), and from counts worked
out by hand for small corpora written here; never from the code under test.
"""

import collections
import gzip
import io
import json
import math
import os
import pathlib
import tarfile

import pytest
import tensorflow as tf
from conftest import MULTI30K_DATA_HPARAMS, lay_out

from problems.translate_ende import TranslateEnde
from problems.translate_enfr import TranslateEnfr
from t2t_repro import registry
from t2t_repro.data.problem import ProblemDataError
from t2t_repro.data.raw_text import ArchiveMember, RawDataError
from t2t_repro.data.translation import newstest_layouts, wmt14_training_layouts
from t2t_repro.names import EOS_ID, PAD_ID

# Small derived corpora: enough text for a 600-piece vocabulary, quick to generate.
SMALL_HPARAMS = "vocab_size=600,num_train_shards=2"
SMALL_TRAIN, SMALL_EVAL = 1500, 100


# --- helpers ------------------------------------------------------------------------------------


def read_lines(path):
    """A corpus file's lines, split on "\\n" only (the data README's layout)."""
    return pathlib.Path(path).read_text(encoding="utf-8").removesuffix("\n").split("\n")


def write_lines(path, lines):
    pathlib.Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def id_rows(problem, mode):
    """`[(input_ids, target_ids)]` of the mode's stored examples, in reading order (read in
    chunks: `examples()` yields them one by one, which is slow for tens of thousands)."""
    rows = []
    for chunk in problem.example_chunks(mode):
        rows += zip(chunk["inputs"].to_list(), chunk["targets"].to_list())
    return rows


def decoded(problem, mode):
    """`[(input_text, target_text)]` of the mode's stored examples, in reading order."""
    return [(problem.decode(i), problem.decode(t)) for i, t in id_rows(problem, mode)]


def file_state(directory):
    """`{name: (size, mtime_ns)}` of every file in `directory`."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns)
            for p in pathlib.Path(directory).iterdir()}


def records_in(path):
    return sum(int(batch.shape[0]) for batch in tf.data.TFRecordDataset(str(path)).batch(10000))


@pytest.fixture(scope="module")
def corpora(shared_data_dir):
    """The raw sentences of the shared corpora these tests lay out."""
    multi30k, wmt_de, wmt_fr = (shared_data_dir / folder
                                for folder in ("multi30k_ende", "wmt14_ende", "wmt14_enfr"))
    return {
        "train.en": read_lines(multi30k / "train.en"),
        "train.de": read_lines(multi30k / "train.de"),
        "newstest2013.en": read_lines(wmt_de / "newstest2013.en"),
        "newstest2013.de": read_lines(wmt_de / "newstest2013.de"),
        "fr/newstest2013.en": read_lines(wmt_fr / "newstest2013.en"),
        "fr/newstest2013.fr": read_lines(wmt_fr / "newstest2013.fr"),
        "fr/newstest2014.en": read_lines(wmt_fr / "newstest2014.en"),
        "fr/newstest2014.fr": read_lines(wmt_fr / "newstest2014.fr"),
    }


def small_plain_corpus(directory, corpora, train=SMALL_TRAIN, dev=SMALL_EVAL):
    """Writes the first lines of Multi30k train / newstest2013 as a plain-text layout."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.en", train), ("train.de", train),
                        ("newstest2013.en", dev), ("newstest2013.de", dev)):
        write_lines(directory / name, corpora[name][:count])
    return directory


@pytest.fixture(scope="module")
def ende_examples(ende_data_dir):
    """The session's translate_ende examples as id lists, and the problem that read them."""
    problem = TranslateEnde(data_dir=str(ende_data_dir))
    return problem, {mode: id_rows(problem, mode) for mode in ("train", "eval")}


# --- generation on Multi30k + newstest2013 -------------------------------------------------------


def test_datagen_writes_vocabulary_shards_and_metadata(ende_data_dir, multi30k_tmp_dir):
    train_lines = len(read_lines(multi30k_tmp_dir / "train.en"))
    assert train_lines == len(read_lines(multi30k_tmp_dir / "train.de")) == 29000
    eval_lines = len(read_lines(multi30k_tmp_dir / "newstest2013.en"))
    assert eval_lines == len(read_lines(multi30k_tmp_dir / "newstest2013.de")) == 3000

    train_shards = [f"translate_ende-train-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert sorted(os.listdir(ende_data_dir)) == sorted([
        "translate_ende.spm.model", "translate_ende.spm.vocab", "translate_ende.datagen.json",
        "translate_ende-eval-00000-of-00001.tfrecord", *train_shards,
        *(f"translate_ende-{mode}.{kind}.npy" for mode in ("train", "eval")
          for kind in ("ids", "offsets")),  # token arrays: training without TensorFlow
    ])

    metadata = json.loads((ende_data_dir / "translate_ende.datagen.json").read_text())
    assert metadata["problem"] == "translate_ende"
    assert metadata["data_hparams"]["vocab_size"] == 8000
    assert metadata["data_hparams"]["num_train_shards"] == 4
    assert metadata["vocab_size"] == 8000
    for mode, lines, shards in (("train", train_lines, 4), ("eval", eval_lines, 1)):
        split = metadata["splits"][mode]
        assert split["examples"] == lines
        assert split["shards"] == shards
        assert sum(split["length_histogram"].values()) == lines
        assert f"{lines} lines, {lines} kept, 0 dropped" in " ".join(split["sources"])

    # Round-robin sharding: 29000 records over 4 shards is 7250 each; eval is one shard.
    assert [records_in(ende_data_dir / name) for name in train_shards] == [7250] * 4
    assert records_in(ende_data_dir / "translate_ende-eval-00000-of-00001.tfrecord") == eval_lines

    # The human-readable vocabulary lists every piece, by id.
    vocab_lines = read_lines(ende_data_dir / "translate_ende.spm.vocab")
    assert [line.split("\t")[0] for line in vocab_lines] == [str(i) for i in range(8000)]


def test_eval_examples_decode_to_newstest2013_in_corpus_order(ende_examples, corpora):
    problem, examples = ende_examples
    expected = list(zip(corpora["newstest2013.en"], corpora["newstest2013.de"]))
    got = [(problem.decode(i), problem.decode(t)) for i, t in examples["eval"]]
    assert len(got) == 3000
    # Spot checks first, so a failure shows a readable pair, then every line.
    for index in (0, 1, 17, 1894, 2999):  # 1894 holds "black & white"
        assert got[index] == expected[index]
    assert got == expected
    # Read one by one (the pipeline's other path), the examples are the same, in the same order.
    one_by_one = [(list(ex["inputs"]), list(ex["targets"]))
                  for ex in problem.examples("eval").take(300).as_numpy_iterator()]
    assert one_by_one == examples["eval"][:300]


def test_train_examples_are_the_corpus_pairs_shuffled(ende_examples, corpora):
    problem, examples = ende_examples
    raw_pairs = list(zip(corpora["train.en"], corpora["train.de"]))
    index_of = {pair: i for i, pair in enumerate(raw_pairs)}
    got = [(problem.decode(i), problem.decode(t)) for i, t in examples["train"]]
    assert collections.Counter(got) == collections.Counter(raw_pairs)
    # Shuffled across and within shards: the first examples read are not the corpus's first.
    order = [index_of[pair] for pair in got[:200]]
    assert order != sorted(order)


def test_every_example_ends_in_one_eos(ende_examples):
    _, examples = ende_examples
    for mode in ("train", "eval"):
        for ids in (ids for pair in examples[mode] for ids in pair):
            assert ids[-1] == EOS_ID
            assert EOS_ID not in ids[:-1] and PAD_ID not in ids


# --- generating again, and data hparams -----------------------------------------------------------


def test_rerun_with_data_present_does_nothing(ende_data_dir, multi30k_tmp_dir, capsys):
    before = file_state(ende_data_dir)
    for overrides in (MULTI30K_DATA_HPARAMS, ""):
        problem = TranslateEnde(str(ende_data_dir), overrides)
        problem.generate_data(str(multi30k_tmp_dir), download=False)
        assert "nothing to do" in capsys.readouterr().out
    # No raw data is read either: it works without a tmp_dir and without downloading.
    TranslateEnde(str(ende_data_dir)).generate_data(None, download=False)
    assert "nothing to do" in capsys.readouterr().out
    assert file_state(ende_data_dir) == before


def test_conflicting_data_hparams_raise_and_load_nothing(ende_data_dir, multi30k_tmp_dir):
    before = file_state(ende_data_dir)
    problem = TranslateEnde(str(ende_data_dir), "vocab_size=4000")
    with pytest.raises(ProblemDataError) as raised:
        problem.generate_data(str(multi30k_tmp_dir), download=False)
    message = str(raised.value)
    assert "vocab_size" in message
    assert "Drop those from --data_hparams" in message and "another --data_dir" in message
    assert str(ende_data_dir) in message
    # Nothing was adopted or cached: the problem still holds what was asked, and still refuses.
    assert problem.data_hparams.vocab_size == 4000
    with pytest.raises(ProblemDataError, match="vocab_size"):
        problem.check_data()
    with pytest.raises(ProblemDataError):
        problem.examples("eval")
    assert file_state(ende_data_dir) == before


def test_without_overrides_the_stored_data_hparams_are_adopted(ende_data_dir):
    stored = json.loads((ende_data_dir / "translate_ende.datagen.json").read_text())["data_hparams"]
    problem = TranslateEnde(str(ende_data_dir))
    assert problem.data_hparams.vocab_size == 37000  # the default, until the data is looked at
    problem.check_data()
    assert problem.data_hparams.values() == stored
    assert problem.input_vocab_size == problem.target_vocab_size == 8000


def test_an_override_that_agrees_with_the_stored_value_is_accepted(ende_data_dir):
    problem = TranslateEnde(str(ende_data_dir), "vocab_size=8000")
    problem.check_data()
    assert problem.data_hparams.num_train_shards == 4


# --- the reversed problem ----------------------------------------------------------------------


def test_reversed_problem_reads_the_forward_files_swapped(ende_data_dir, ende_examples, capsys):
    _, forward = ende_examples
    before = file_state(ende_data_dir)
    reverse = registry.problems["translate_ende_rev"](data_dir=str(ende_data_dir))
    assert reverse.name == "translate_ende_rev"
    # No regeneration: no raw files are needed and nothing in data_dir changes.
    reverse.generate_data(None, download=False)
    assert "nothing to do" in capsys.readouterr().out
    assert file_state(ende_data_dir) == before
    assert reverse.vocabulary_path == str(ende_data_dir / "translate_ende.spm.model")
    assert reverse.data_hparams.vocab_size == 8000  # adopted from the forward problem's data

    for mode in ("train", "eval"):
        assert id_rows(reverse, mode) == [(t, i) for i, t in forward[mode]]
    one_by_one = [(list(ex["inputs"]), list(ex["targets"]))
                  for ex in reverse.examples("eval").take(200).as_numpy_iterator()]
    assert one_by_one == [(t, i) for i, t in forward["eval"][:200]]


# --- missing and broken raw data -----------------------------------------------------------------


def test_missing_raw_files_name_the_expected_files_and_the_download(tmp_path):
    tmp_dir, data_dir = tmp_path / "raw", tmp_path / "data"
    tmp_dir.mkdir()
    with pytest.raises(RawDataError) as raised:
        TranslateEnde(str(data_dir)).generate_data(str(tmp_dir), download=False)
    message = str(raised.value)
    for name in ("train.en", "train.de", "training-parallel-europarl-v7.tgz",
                 "training-parallel-commoncrawl.tgz", "training-parallel-nc-v9.tgz"):
        assert name in message
    assert str(tmp_dir) in message
    assert "tensorflow-datasets" in message and "wmt14_translate/de-en" in message
    assert "--nodownload" in message
    assert not (data_dir / "translate_ende.datagen.json").exists()


def test_missing_raw_files_message_also_names_the_dev_files(tmp_path):
    with pytest.raises(RawDataError) as raised:
        TranslateEnde(str(tmp_path / "data")).generate_data(str(tmp_path), download=False)
    for name in ("newstest2013.en", "newstest2013.de", "newstest2013-src.en.sgm", "dev.tgz"):
        assert name in str(raised.value)


@pytest.mark.parametrize("present, missing", [
    (["train.en"], "train.de"),
    (["train.en", "train.de", "newstest2013.en"], "newstest2013.de"),
])
def test_a_partly_present_layout_names_the_missing_file(tmp_path, multi30k_tmp_dir, fake_tfds,
                                                        present, missing):
    # Downloading is allowed, but a half-present layout must not fall back to it.
    calls = fake_tfds(FakeWmtBuilder({}, download_error=AssertionError("must not download")))
    tmp_dir = lay_out(tmp_path / "raw", {name: multi30k_tmp_dir / name for name in present})
    with pytest.raises(RawDataError) as raised:
        TranslateEnde(str(tmp_path / "data")).generate_data(str(tmp_dir), download=True)
    message = str(raised.value)
    assert f"not {missing}" in message
    assert str(tmp_dir) in message
    assert calls == []
    assert not (tmp_path / "data" / "translate_ende.datagen.json").exists()


@pytest.mark.parametrize("short_file", ["train.de", "newstest2013.de"])
def test_misaligned_parallel_files_fail_with_both_counts(tmp_path, corpora, short_file, capsys):
    tmp_dir = small_plain_corpus(tmp_path / "raw", corpora)
    full = read_lines(tmp_dir / short_file)
    write_lines(tmp_dir / short_file, full[:-1])
    data_dir = tmp_path / "data"
    with pytest.raises(RawDataError) as raised:
        TranslateEnde(str(data_dir), SMALL_HPARAMS).generate_data(str(tmp_dir), download=False)
    message = str(raised.value)
    long_file = short_file.replace(".de", ".en")
    assert f"{long_file} has {len(full)} lines" in message
    assert f"{short_file} has {len(full) - 1} lines" in message
    assert not (data_dir / "translate_ende.datagen.json").exists()

    # Nothing was marked complete: once the file is fixed, the data is generated for real.
    write_lines(tmp_dir / short_file, full)
    capsys.readouterr()
    problem = TranslateEnde(str(data_dir), SMALL_HPARAMS)
    problem.generate_data(str(tmp_dir), download=False)
    assert "nothing to do" not in capsys.readouterr().out
    assert problem.metadata()["splits"]["train"]["examples"] == SMALL_TRAIN
    assert problem.metadata()["splits"]["eval"]["examples"] == SMALL_EVAL


def test_empty_lines_are_dropped_and_counted(tmp_path, corpora, capsys):
    train_en, train_de = corpora["train.en"][:SMALL_TRAIN], corpora["train.de"][:SMALL_TRAIN]
    dev_en = corpora["newstest2013.en"][:SMALL_EVAL]
    dev_de = corpora["newstest2013.de"][:SMALL_EVAL]
    for index in (3, 10, 50):
        train_en[index] = ""
    train_en[300] = " \t "  # whitespace only counts as empty
    for index in (10, 77, 200, 201):  # line 10 is empty on both sides
        train_de[index] = ""
    dev_en[5] = ""
    dev_de[6] = dev_de[7] = ""
    tmp_dir = tmp_path / "raw"
    tmp_dir.mkdir()
    for name, lines in (("train.en", train_en), ("train.de", train_de),
                        ("newstest2013.en", dev_en), ("newstest2013.de", dev_de)):
        write_lines(tmp_dir / name, lines)

    problem = TranslateEnde(str(tmp_path / "data"), SMALL_HPARAMS)
    problem.generate_data(str(tmp_dir), download=False)
    out = capsys.readouterr().out
    # Train: inputs empty at 3, 10, 50, 300; targets at 10, 77, 200, 201 -> 7 distinct lines.
    # Eval: input empty at 5, targets at 6 and 7 -> 3 lines.
    expected = {
        "train": "1500 lines, 1493 kept, 7 dropped as empty (input 4, target 4)",
        "eval": "100 lines, 97 kept, 3 dropped as empty (input 1, target 2)",
    }
    metadata = problem.metadata()
    for mode, report in expected.items():
        assert report in out
        assert [report in source for source in metadata["splits"][mode]["sources"]] == [True]
    assert metadata["splits"]["train"]["examples"] == 1493
    assert metadata["splits"]["eval"]["examples"] == 97
    kept_dev = [(en, de) for en, de in zip(dev_en, dev_de) if en.strip() and de.strip()]
    assert decoded(problem, "eval") == kept_dev


# --- other layouts ------------------------------------------------------------------------------


def wmt_sgm(lines, root, setid, trglang=None, docs_of=40):
    """Text laid out like WMT's newstest SGM files: docs of <p>-wrapped numbered segments."""
    target = f' trglang="{trglang}"' if trglang else ""
    out = [f'<{root} setid="{setid}" srclang="any"{target}>']
    for start in range(0, len(lines), docs_of):
        docid = f"{start // docs_of}-news"
        out += [f'<doc sysid="ref" docid="{docid}" genre="news" origlang="en">', "<p>"]
        out += [f'<seg id="{i + 1}">{line}</seg>'
                for i, line in enumerate(lines[start:start + docs_of])]
        out += ["</p>", "</doc>"]
    return out + [f"</{root}>"]


def test_sgm_dev_files_are_read(tmp_path, corpora):
    tmp_dir = small_plain_corpus(tmp_path / "raw", corpora, dev=0)
    for name in ("newstest2013.en", "newstest2013.de"):
        (tmp_dir / name).unlink()
    dev_en, dev_de = corpora["newstest2013.en"][1850:1950], corpora["newstest2013.de"][1850:1950]
    assert any("&" in line for line in dev_en)  # WMT leaves "&" bare in SGM files
    write_lines(tmp_dir / "newstest2013-src.en.sgm", wmt_sgm(dev_en, "srcset", "newstest2013"))
    write_lines(tmp_dir / "newstest2013-ref.de.sgm",
                wmt_sgm(dev_de, "refset", "newstest2013", "de"))

    problem = TranslateEnde(str(tmp_path / "data"), SMALL_HPARAMS)
    problem.generate_data(str(tmp_dir), download=False)
    # sacreBLEU's reading of a segment: stripped, whitespace runs as one space.
    expected = [(" ".join(en.split()), " ".join(de.split())) for en, de in zip(dev_en, dev_de)]
    assert decoded(problem, "eval") == expected
    assert "newstest2013-src.en.sgm" in problem.metadata()["splits"]["eval"]["sources"][0]


def add_member(archive, name, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if name.endswith(".gz"):
        data = gzip.compress(data)
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def write_archives(directory, members):
    """`{archive name: {member name: lines}}` -> WMT-style archives (.tgz gzipped, .tar not)."""
    for archive_name, contents in members.items():
        mode = "w:gz" if archive_name.endswith(".tgz") else "w"
        with tarfile.open(directory / archive_name, mode) as archive:
            for member_name, lines in contents.items():
                add_member(archive, member_name, lines)


@pytest.mark.parametrize("language", ["de", "fr"])
def test_wmt_archives_are_read_in_place(tmp_path, corpora, language):
    if language == "de":
        problem_class, train_en, train_xx = TranslateEnde, corpora["train.en"], corpora["train.de"]
        dev_en, dev_xx = corpora["newstest2013.en"], corpora["newstest2013.de"]
    else:
        problem_class = TranslateEnfr
        train_en, train_xx = corpora["fr/newstest2014.en"], corpora["fr/newstest2014.fr"]
        dev_en, dev_xx = corpora["fr/newstest2013.en"], corpora["fr/newstest2013.fr"]
    archive_layout = wmt14_training_layouts(language)[1]
    # Each corpus gets its own slice of real text; each archive also holds a decoy member.
    members = collections.defaultdict(dict)
    expected_train = []
    per_corpus = 400
    for index, (en_member, xx_member) in enumerate(archive_layout.corpora):
        assert en_member.archive_path == xx_member.archive_path
        window = slice(index * per_corpus, (index + 1) * per_corpus)
        en, xx = train_en[window], train_xx[window]
        members[en_member.archive_path].update({
            "README": ["not a corpus"], en_member.member_name: en, xx_member.member_name: xx,
        })
        expected_train += zip(en, xx)
    members["dev.tgz"] = {"dev/newstest2012.en": ["decoy"],
                          "dev/newstest2013.en": dev_en[:SMALL_EVAL],
                          f"dev/newstest2013.{language}": dev_xx[:SMALL_EVAL]}
    tmp_dir = tmp_path / "raw"
    tmp_dir.mkdir()
    write_archives(tmp_dir, members)

    problem = problem_class(str(tmp_path / "data"), SMALL_HPARAMS)
    problem.generate_data(str(tmp_dir), download=False)
    assert collections.Counter(decoded(problem, "train")) == collections.Counter(expected_train)
    assert decoded(problem, "eval") == list(zip(dev_en, dev_xx))[:SMALL_EVAL]
    sources = problem.metadata()["splits"]["train"]["sources"]
    assert len(sources) == len(archive_layout.corpora)
    assert all(f"{per_corpus} lines, {per_corpus} kept" in source for source in sources)


@pytest.mark.parametrize("language", ["de", "fr"])
def test_archive_names_are_those_of_tensorflow_datasets_wmt14(language):
    """The archives and members accepted are the ones tfds's wmt14_translate downloads."""
    from tensorflow_datasets.translate import wmt, wmt14

    train_subsets = wmt14.Wmt14Translate._subsets.fget(None)["train"]
    expected = set()
    for name in train_subsets:
        subset = wmt.DATASET_MAP[name]
        if language in subset.sources and subset._urls[0].endswith((".tgz", ".tar")):
            archive = subset._urls[0].rsplit("/", 1)[1]
            xx, en = (path.format(src=language) for path in subset._paths)
            expected.add((ArchiveMember(archive, en), ArchiveMember(archive, xx)))
    archive_layout = wmt14_training_layouts(language)[1]
    assert set(archive_layout.corpora) == expected

    newstest2013 = wmt.DATASET_MAP["newstest2013"]
    xx, en = (path.format(src=language) for path in newstest2013._paths)
    dev_archive = newstest_layouts(2013, language)[-1]
    assert dev_archive.corpora == ((ArchiveMember("dev.tgz", en), ArchiveMember("dev.tgz", xx)),)
    assert newstest2013._urls[0].endswith("/dev.tgz")


def test_enfr_layouts_and_default_vocabulary_sizes(tmp_path):
    with pytest.raises(RawDataError) as raised:
        TranslateEnfr(str(tmp_path / "data")).generate_data(str(tmp_path), download=False)
    message = str(raised.value)
    for name in ("train.en", "train.fr", "training-parallel-europarl-v7.tgz",
                 "training-parallel-commoncrawl.tgz", "training-parallel-nc-v9.tgz",
                 "training-parallel-un.tgz", "training-giga-fren.tar", "wmt14_translate/fr-en"):
        assert name in message
    assert "train.de" not in message
    # Paper §5.1: a shared vocabulary of about 37000 (EN-DE) and 32000 word pieces (EN-FR).
    for name, size in (("translate_ende", 37000), ("translate_ende_rev", 37000),
                       ("translate_enfr", 32000), ("translate_enfr_rev", 32000)):
        assert registry.problems[name]().data_hparams.vocab_size == size


def test_tiny_enfr_run_from_plain_files(tmp_path, shared_data_dir, corpora):
    wmt = shared_data_dir / "wmt14_enfr"
    tmp_dir = lay_out(tmp_path / "raw", {
        "train.en": wmt / "newstest2014.en", "train.fr": wmt / "newstest2014.fr",
        "newstest2013.en": wmt / "newstest2013.en", "newstest2013.fr": wmt / "newstest2013.fr",
    })
    problem = TranslateEnfr(str(tmp_path / "data"), "vocab_size=1000,num_train_shards=2")
    problem.generate_data(str(tmp_dir), download=False)
    metadata = problem.metadata()
    assert metadata["splits"]["train"]["examples"] == len(corpora["fr/newstest2014.en"]) == 3003
    assert metadata["splits"]["eval"]["examples"] == len(corpora["fr/newstest2013.fr"]) == 3000
    assert problem.vocabulary.vocab_size == 1000
    assert decoded(problem, "eval") == list(zip(corpora["fr/newstest2013.en"],
                                                 corpora["fr/newstest2013.fr"]))
    assert sorted(p.name for p in (tmp_path / "data").iterdir() if "tfrecord" in p.name) == [
        "translate_enfr-eval-00000-of-00001.tfrecord",
        "translate_enfr-train-00000-of-00002.tfrecord",
        "translate_enfr-train-00001-of-00002.tfrecord",
    ]


# --- downloading through tensorflow-datasets (faked: no network) ----------------------------------


class FakeWmtBuilder:
    """Stands in for tfds's wmt14_translate/de-en builder and records how it is used."""

    name = "wmt14_translate"

    class builder_config:  # noqa: N801  (tfds's attribute name)
        name = "de-en"

    def __init__(self, splits, download_error=None):
        self.splits = splits
        self.download_error = download_error
        self.download_dirs = []
        self.splits_read = []

    def download_and_prepare(self, download_dir=None, **kwargs):
        self.download_dirs.append(download_dir)
        if self.download_error:
            raise self.download_error

    def as_dataset(self, split):
        self.splits_read.append(split)
        pairs = self.splits[split]
        return tf.data.Dataset.from_tensor_slices({
            "en": [en.encode("utf-8") for en, _ in pairs],
            "de": [de.encode("utf-8") for _, de in pairs],
        })


@pytest.fixture
def fake_tfds(monkeypatch):
    """Replaces `tensorflow_datasets.builder`; returns the list of calls made to it."""
    import tensorflow_datasets

    calls = []

    def install(builder):
        def fake_builder(name, **kwargs):
            calls.append((name, kwargs))
            return builder

        monkeypatch.setattr(tensorflow_datasets, "builder", fake_builder)
        return calls

    return install


def test_download_goes_through_tensorflow_datasets(tmp_path, corpora, fake_tfds):
    train = list(zip(corpora["train.en"][:SMALL_TRAIN], corpora["train.de"][:SMALL_TRAIN]))
    train[20] = (train[20][0], "")  # tfds pairs with an empty side are dropped, as from files
    validation = list(zip(corpora["newstest2013.en"][:SMALL_EVAL],
                          corpora["newstest2013.de"][:SMALL_EVAL]))
    builder = FakeWmtBuilder({"train": train, "validation": validation})
    calls = fake_tfds(builder)
    tmp_dir = tmp_path / "raw"
    tmp_dir.mkdir()

    problem = TranslateEnde(str(tmp_path / "data"), SMALL_HPARAMS)
    problem.generate_data(str(tmp_dir), download=True)

    assert [name for name, _ in calls] == ["wmt14_translate/de-en"]
    assert pathlib.Path(calls[0][1]["data_dir"]).is_relative_to(tmp_dir)
    assert len(builder.download_dirs) == 1
    assert pathlib.Path(builder.download_dirs[0]).is_relative_to(tmp_dir)
    assert set(builder.splits_read) == {"train", "validation"}

    kept_train = [pair for pair in train if pair[1]]
    assert collections.Counter(decoded(problem, "train")) == collections.Counter(kept_train)
    assert decoded(problem, "eval") == validation
    sources = problem.metadata()["splits"]
    assert "wmt14_translate/de-en 'train'" in sources["train"]["sources"][0]
    counts = f"{SMALL_TRAIN} pairs, {SMALL_TRAIN - 1} kept, 1 dropped"
    assert counts in sources["train"]["sources"][0]
    assert "'validation'" in sources["eval"]["sources"][0]


def test_a_failed_download_names_the_files_and_the_failure(tmp_path, fake_tfds):
    fake_tfds(FakeWmtBuilder({}, download_error=ConnectionError("no route to statmt.org")))
    tmp_dir = tmp_path / "raw"
    tmp_dir.mkdir()
    data_dir = tmp_path / "data"
    with pytest.raises(RawDataError) as raised:
        TranslateEnde(str(data_dir), SMALL_HPARAMS).generate_data(str(tmp_dir), download=True)
    message = str(raised.value)
    for name in ("train.en", "train.de", "training-parallel-europarl-v7.tgz", str(tmp_dir)):
        assert name in message
    assert "ConnectionError" in message and "no route to statmt.org" in message
    assert isinstance(raised.value.__cause__, ConnectionError)
    assert not (data_dir / "translate_ende.datagen.json").exists()


# --- reversed problems score in their own target language ---------------------------------------


def test_reversed_problems_swap_their_languages():
    for name, forward in (("translate_ende", ("en", "de")), ("translate_enfr", ("en", "fr"))):
        problem = registry.problems[name]()
        reverse = registry.problems[name + "_rev"]()
        assert (problem.input_language, problem.target_language) == forward
        assert (reverse.input_language, reverse.target_language) == forward[::-1]
        # Data is generated and stored the forward way round, and swapped on reading.
        assert problem.data_languages == reverse.data_languages == forward


def test_reversed_ende_scores_english_targets_as_english():
    hypotheses, references = ["It isn't a well-known case."], ["It isn't a well known case."]
    # tokenizer.perl -l en keeps "'t" whole and no compound split is done:
    #   hyp: It isn &apos;t a well-known case .      7 tokens
    #   ref: It isn &apos;t a well known case .      8 tokens
    # matches 6/7, 4/6 (not the two through "well-known"), 2/5, 1/4; BP = exp(1 - 8/7).
    expected = 100 * math.exp(1 - 8 / 7) * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** (1 / 4)
    reverse = registry.problems["translate_ende_rev"]()
    metrics = reverse.decode_metrics(None, hypotheses, references)
    assert set(metrics) == {"bleu", "bleu_tokenized"}
    assert metrics["bleu_tokenized"] == pytest.approx(expected)
    tokenized_line = reverse.decode_report(None, hypotheses, references)[1]
    assert "tokenizer.perl -l en," in tokenized_line
    assert tokenized_line.endswith(
        f"BLEU = {expected:.2f}, 85.7/66.7/40.0/25.0 (BP=0.867, ratio=0.875, hyp_len=7, ref_len=8)")
    forward = TranslateEnde().decode_metrics(None, hypotheses, references)
    assert set(forward) == {"bleu", "bleu_tokenized_compound_split"}


def test_reversed_problem_generates_forward_data_and_reads_german_inputs(tmp_path, corpora,
                                                                         fake_tfds):
    validation = list(zip(corpora["newstest2013.en"][:SMALL_EVAL],
                          corpora["newstest2013.de"][:SMALL_EVAL]))
    train = list(zip(corpora["train.en"][:SMALL_TRAIN], corpora["train.de"][:SMALL_TRAIN]))
    fake_tfds(FakeWmtBuilder({"train": train, "validation": validation}))
    tmp_dir = tmp_path / "raw"
    tmp_dir.mkdir()
    reverse = registry.problems["translate_ende_rev"](str(tmp_path / "data"), SMALL_HPARAMS)
    reverse.generate_data(str(tmp_dir), download=True)
    assert (tmp_path / "data" / "translate_ende.datagen.json").exists()
    assert decoded(reverse, "eval") == [(de, en) for en, de in validation]
    assert decoded(TranslateEnde(str(tmp_path / "data")), "eval") == validation
