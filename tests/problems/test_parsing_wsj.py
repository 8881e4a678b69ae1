"""WSJ constituency parsing data on the real Penn Treebank sample (sections 00 and 01).

The expected examples come from the sample's reference conversion
(`reference_conversion/wsj_sec0?.clean.trees`: traces removed, function tags stripped, root TOP),
read and linearised here by a few lines of independent code, not by `t2t_repro.data.trees`.
"""

import collections
import pathlib
import re

import pytest
from conftest import lay_out

from problems.parsing_wsj import ParsingWsj, ParsingWsjSemisup
from t2t_repro import registry
from t2t_repro.data.raw_text import RawDataError
from t2t_repro.names import EOS_ID

SAMPLE_HPARAMS = "train_sections=01,eval_sections=00,vocab_size=2000,num_train_shards=2"


# --- an independent reading of the reference trees -----------------------------------------------


def bracketed(line):
    """`(label, children)` of one bracketed tree; a child is a word or a `(label, children)`."""
    tokens = re.findall(r"\(|\)|[^\s()]+", line)
    position = 0

    def node():
        nonlocal position
        assert tokens[position] == "("
        label, position = tokens[position + 1], position + 2
        children = []
        while tokens[position] != ")":
            if tokens[position] == "(":
                children.append(node())
            else:
                children.append(tokens[position])
                position += 1
        position += 1
        return label, children

    tree = node()
    assert position == len(tokens)
    return tree


def words_and_linearisation(line):
    """`(words, target)` text of a reference tree, as Vinyals et al. (2015) linearise it: the
    root left out, `(X ... )X` per phrase, the POS tag in place of each word."""
    words, target = [], []

    def visit(tree):
        label, children = tree
        if len(children) == 1 and isinstance(children[0], str):
            target.append(label)
            words.append(children[0])
            return
        target.append("(" + label)
        for child in children:
            visit(child)
        target.append(")" + label)

    label, children = bracketed(line)
    assert label == "TOP"
    for child in children:
        visit(child)
    return " ".join(words), " ".join(target)


def reference_lines(shared_data_dir, section):
    path = shared_data_dir / "ptb_sample" / "reference_conversion" / f"wsj_sec{section}.clean.trees"
    return path.read_text(encoding="utf-8").removesuffix("\n").split("\n")


def decoded(problem, mode):
    """`[(input_text, target_text)]` of the mode's stored examples, in reading order."""
    pairs = []
    for chunk in problem.example_chunks(mode):
        for inputs, targets in zip(chunk["inputs"].to_list(), chunk["targets"].to_list()):
            assert inputs[-1] == EOS_ID and targets[-1] == EOS_ID
            pairs.append((problem.decode(inputs), problem.decode(targets)))
    return pairs


@pytest.fixture(scope="module")
def treebank_dir(shared_data_dir):
    return shared_data_dir / "ptb_sample" / "combined_mrg"


@pytest.fixture(scope="module")
def wsj_problem(treebank_dir, tmp_path_factory):
    """parsing_wsj generated once from the sample: section 01 to train, 00 to evaluate."""
    problem = ParsingWsj(str(tmp_path_factory.mktemp("wsj_data")), SAMPLE_HPARAMS)
    problem.generate_data(str(treebank_dir), download=False)
    return problem


# --- the sample's sections -----------------------------------------------------------------------


def test_sample_sections_give_every_tree(wsj_problem, shared_data_dir):
    assert len(reference_lines(shared_data_dir, "01")) == 1993
    assert len(reference_lines(shared_data_dir, "00")) == 1921
    metadata = wsj_problem.metadata()
    assert metadata["splits"]["train"]["examples"] == 1993
    assert metadata["splits"]["eval"]["examples"] == 1921
    assert metadata["splits"]["train"]["shards"] == 2
    assert wsj_problem.vocabulary.vocab_size == 2000
    train_source, = metadata["splits"]["train"]["sources"]
    eval_source, = metadata["splits"]["eval"]["sources"]
    assert "100 .mrg files of WSJ sections 01: 1993 trees" in train_source
    assert "99 .mrg files of WSJ sections 00: 1921 trees" in eval_source
    assert sorted(p.name for p in pathlib.Path(wsj_problem.data_dir).glob("*.tfrecord")) == [
        "parsing_wsj-eval-00000-of-00001.tfrecord",
        "parsing_wsj-train-00000-of-00002.tfrecord",
        "parsing_wsj-train-00001-of-00002.tfrecord",
    ]


def test_eval_examples_are_the_reference_trees_in_order(wsj_problem, shared_data_dir):
    reference = reference_lines(shared_data_dir, "00")
    got = decoded(wsj_problem, "eval")
    assert len(got) == len(reference)
    for (input_text, output_text), line in zip(got, reference):
        assert (input_text, output_text) == words_and_linearisation(line)
        # The decoded text alone rebuilds the reference tree, bracket for bracket.
        assert wsj_problem.tree_of(input_text, output_text).to_string() == line


def test_first_eval_example_by_hand(wsj_problem):
    """wsj_0001's first sentence, linearised by hand from its reference tree."""
    input_text, output_text = decoded(wsj_problem, "eval")[0]
    assert input_text == (
        "Pierre Vinken , 61 years old , will join the board as a nonexecutive director Nov. 29 ."
    )
    assert output_text == (
        "(S (NP (NP NNP NNP )NP , (ADJP (NP CD NNS )NP JJ )ADJP , )NP "
        "(VP MD (VP VB (NP DT NN )NP (PP IN (NP DT JJ NN )NP )PP (NP NNP CD )NP )VP )VP . )S"
    )


def test_decode_metrics_score_gold_outputs_100_and_a_lost_bracket_by_hand(wsj_problem):
    """The F1 the trainer's eval reports: the gold linearisations of all of section 00 score
    100; the first sentence with the NP inside its ADJP left out keeps 10 of its 11 brackets
    (S, 5 NP, ADJP, 2 VP, PP; the root and punctuation are not brackets): precision 10/10,
    recall 10/11, F1 20/21."""
    inputs, targets = zip(*decoded(wsj_problem, "eval"))
    assert wsj_problem.decode_metrics(inputs, targets, targets) == {
        "bracket_precision": 100.0, "bracket_recall": 100.0, "bracket_f1": 100.0}
    without_inner_np = (
        "(S (NP (NP NNP NNP )NP , (ADJP CD NNS JJ )ADJP , )NP "
        "(VP MD (VP VB (NP DT NN )NP (PP IN (NP DT JJ NN )NP )PP (NP NNP CD )NP )VP )VP . )S"
    )
    scores = wsj_problem.decode_metrics(inputs[:1], [without_inner_np], targets[:1])
    assert scores == pytest.approx(
        {"bracket_precision": 100.0, "bracket_recall": 1000 / 11, "bracket_f1": 2000 / 21})


def test_train_examples_are_the_section_01_trees(wsj_problem, shared_data_dir):
    expected = [words_and_linearisation(line) for line in reference_lines(shared_data_dir, "01")]
    assert collections.Counter(decoded(wsj_problem, "train")) == collections.Counter(expected)


# --- sections the sample lacks, and bad specs ----------------------------------------------------


def test_default_sections_are_missing_from_the_sample(treebank_dir, tmp_path):
    problem = ParsingWsj(str(tmp_path / "data"))
    assert problem.data_hparams.train_sections == "02-21"
    assert problem.data_hparams.eval_sections == "22"
    with pytest.raises(RawDataError) as raised:
        problem.generate_data(str(treebank_dir), download=False)
    message = str(raised.value)
    assert "sections 02-21" in message
    assert "LDC" in message
    assert "wsj_SSNN.mrg" in message and "parsed/mrg/wsj" in message
    assert "sections found there: 00, 01" in message
    assert "--data_hparams=train_sections=" in message
    assert str(treebank_dir) in message
    assert not (tmp_path / "data").exists()


def test_missing_eval_section_is_named(treebank_dir, tmp_path):
    with pytest.raises(RawDataError, match=r"sections 22 .*sections found there: 00, 01"):
        ParsingWsj(str(tmp_path / "data"), "train_sections=01").generate_data(str(treebank_dir))


@pytest.mark.parametrize("spec", ["02-99", "x", "21-02", "-1", ""])
def test_bad_section_specs_are_rejected(treebank_dir, tmp_path, spec):
    problem = ParsingWsj(str(tmp_path / "data"), f"train_sections={spec}")
    with pytest.raises(RawDataError, match="WSJ section spec '" + re.escape(spec) + "'"):
        problem.generate_data(str(treebank_dir), download=False)
    assert not (tmp_path / "data").exists()


def test_a_symlinked_treebank_folder_is_found(treebank_dir, tmp_path):
    tmp_dir = lay_out(tmp_path / "raw", {"wsj": treebank_dir})
    problem = ParsingWsj(str(tmp_path / "data"), SAMPLE_HPARAMS)
    problem.generate_data(str(tmp_dir), download=False)
    assert problem.metadata()["splits"]["eval"]["examples"] == 1921


# --- the semi-supervised variant ---------------------------------------------------------------


@pytest.fixture
def semisup_tmp_dir(treebank_dir, tmp_path):
    """The sample's .mrg files (linked one by one) in a directory the extra file can go into."""
    return lay_out(tmp_path / "raw", {p.name: p for p in treebank_dir.glob("wsj_*.mrg")})


def test_semisup_adds_exactly_the_extra_trees(semisup_tmp_dir, shared_data_dir, tmp_path):
    extra = reference_lines(shared_data_dir, "01")[100:107]
    # A blank line in the file is not a tree.
    (semisup_tmp_dir / "parsing_wsj_semisup.trees").write_text(
        "\n".join(extra[:3]) + "\n\n" + "\n".join(extra[3:]) + "\n", encoding="utf-8")
    problem = ParsingWsjSemisup(str(tmp_path / "data"), SAMPLE_HPARAMS)
    problem.generate_data(str(semisup_tmp_dir), download=False)

    metadata = problem.metadata()
    assert metadata["splits"]["train"]["examples"] == 1993 + 7
    assert metadata["splits"]["eval"]["examples"] == 1921
    assert "parsing_wsj_semisup.trees: 7 trees" in metadata["splits"]["train"]["sources"][1]
    section_01 = [words_and_linearisation(line) for line in reference_lines(shared_data_dir, "01")]
    expected = collections.Counter(section_01)
    expected.update(map(words_and_linearisation, extra))
    assert collections.Counter(decoded(problem, "train")) == expected


def test_semisup_without_its_extra_file_names_the_file_and_format(semisup_tmp_dir, tmp_path):
    problem = ParsingWsjSemisup(str(tmp_path / "data"), SAMPLE_HPARAMS)
    with pytest.raises(RawDataError) as raised:
        problem.generate_data(str(semisup_tmp_dir), download=False)
    message = str(raised.value)
    assert str(semisup_tmp_dir / "parsing_wsj_semisup.trees") in message
    assert "one bracketed tree per line" in message and "PTB" in message
    assert "extra_trees_file" in message
    assert not (tmp_path / "data").exists()


def test_default_vocabulary_sizes():
    assert registry.problems["parsing_wsj"]().data_hparams.vocab_size == 16000
    assert registry.problems["parsing_wsj_semisup"]().data_hparams.vocab_size == 32000
