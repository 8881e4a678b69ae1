"""Treebank trees: reading `.mrg`, cleaning as the reference conversion does, linearising and
rebuilding a tree from any token sequence (model output can be malformed)."""

import random
import re

import pytest

from t2t_repro.data.trees import (
    Tree,
    TreeError,
    clean_tree,
    delinearise,
    linearise,
    parse_trees,
    read_mrg_file,
)

SECTION_SIZES = {"sec00": 1921, "sec01": 1993}


@pytest.fixture(scope="module")
def ptb_sample(shared_data_dir):
    """The sample's trees read from the `.mrg` files in file order, with each tree's file name."""
    folder = shared_data_dir / "ptb_sample"
    trees, fileids = [], []
    for path in sorted((folder / "combined_mrg").glob("wsj_*.mrg")):
        file_trees = read_mrg_file(path)
        trees.extend(file_trees)
        fileids.extend([path.name] * len(file_trees))
    return folder / "reference_conversion", trees, fileids


@pytest.fixture(scope="module")
def cleaned_sample(ptb_sample):
    _, trees, _ = ptb_sample
    return [clean_tree(tree) for tree in trees]


def reference_lines(reference, name):
    return (reference / name).read_text(encoding="utf-8").splitlines()


def test_mrg_files_read_in_the_reference_order_and_match_the_one_line_copy(ptb_sample):
    reference, trees, fileids = ptb_sample
    assert len(trees) == 3914
    assert fileids == reference_lines(reference, "wsj_all.fileids")
    one_line = reference_lines(reference, "wsj_all.mrg.oneline")
    assert [tree.to_string() for tree in trees] == one_line
    assert parse_trees("\n".join(one_line)) == trees


def test_cleaning_reproduces_the_reference_conversion(ptb_sample, cleaned_sample):
    reference, _, _ = ptb_sample
    cleaned = [tree.to_string() for tree in cleaned_sample]
    assert cleaned == reference_lines(reference, "wsj_all.clean.trees")
    assert [" ".join(tree.words()) for tree in cleaned_sample] == reference_lines(
        reference, "wsj_all.tokens"
    )
    start = 0
    for section, size in SECTION_SIZES.items():
        section_trees = reference_lines(reference, f"wsj_{section}.clean.trees")
        assert len(section_trees) == size
        assert cleaned[start : start + size] == section_trees
        start += size
    assert start == len(cleaned)


def test_every_cleaned_tree_survives_linearise_then_delinearise(cleaned_sample):
    for tree in cleaned_sample:
        assert delinearise(linearise(tree), tree.words()) == tree, tree.to_string()


MRG_SNIPPET = """
( (S-TPC-2
    (NP-SBJ-1 (PRP$ Its) (NN plan) )
    (VP (VBD was)
      (S-PRD
        (NP-SBJ (-NONE- *-1) )
        (VP (TO to)
          (VP (VB buy)
            (NP=3 (-LRB- -LRB-) (NNS shares) (-RRB- -RRB-) )
            (PP-LOC=2 (IN in) (NP (NNP Tokyo) ))
            (SBAR-TMP (-NONE- 0)
              (S (-NONE- *T*-4) ))))))
    (. .) ))
( (S (NP-SBJ (-NONE- *) ) ))
"""


def test_parse_trees_reads_every_tree_of_a_multi_line_file_with_unlabelled_roots():
    first, second = parse_trees(MRG_SNIPPET)
    assert first.label == ""
    assert [child.label for child in first.children] == ["S-TPC-2"]
    assert first.words() == [
        "Its", "plan", "was", "*-1", "to", "buy", "-LRB-", "shares", "-RRB-", "in", "Tokyo",
        "0", "*T*-4", ".",
    ]  # fmt: skip
    assert second == Tree("", [Tree("S", [Tree("NP-SBJ", [Tree("-NONE-", ["*"])])])])


def test_cleaning_drops_traces_and_emptied_phrases_and_strips_function_tags():
    first, second = parse_trees(MRG_SNIPPET)
    assert clean_tree(first).to_string() == (
        "(TOP (S (NP (PRP$ Its) (NN plan)) (VP (VBD was) (S (VP (TO to) (VP (VB buy)"
        " (NP (-LRB- -LRB-) (NNS shares) (-RRB- -RRB-)) (PP (IN in) (NP (NNP Tokyo))))))) (. .)))"
    )
    assert clean_tree(second) is None


@pytest.mark.parametrize(
    "tree, expected",
    [
        ("(S (NP-SBJ (NN it)) (VP (VBZ works)))", "(TOP (S (NP (NN it)) (VP (VBZ works))))"),
        ("(TOP (S (NN it)))", "(TOP (S (NN it)))"),
        ("(NN it)", "(TOP (NN it))"),
    ],
)
def test_a_labelled_root_is_relabelled_only_when_it_is_already_the_root_label(tree, expected):
    assert clean_tree(parse_trees(tree)[0]).to_string() == expected


def test_clean_tree_takes_the_root_label_as_given():
    tree = parse_trees("( (S (NN it)) )")[0]
    assert clean_tree(tree, root_label="ROOT") == Tree("ROOT", [Tree("S", [Tree("NN", ["it"])])])


def test_linearise_opens_and_closes_each_phrase_and_emits_pos_tags_for_words():
    tree = parse_trees(
        "(TOP (S (NP (PRP$ Its) (NN plan)) (VP (VBD was) (ADJP (JJ clear) (-LRB- -LRB-))) (. .)))"
    )[0]
    assert linearise(tree) == [
        "(S", "(NP", "PRP$", "NN", ")NP", "(VP", "VBD", "(ADJP", "JJ", "-LRB-", ")ADJP", ")VP",
        ".", ")S",
    ]  # fmt: skip


def test_tree_words_equality_and_repr():
    tree = Tree("TOP", [Tree("NP", [Tree("DT", ["the"]), Tree("NN", ["cat"])])])
    assert tree.words() == ["the", "cat"]
    assert tree == parse_trees("(TOP (NP (DT the) (NN cat)))")[0]
    assert tree != parse_trees("(TOP (NP (DT the) (NNS cat)))")[0]
    assert tree != parse_trees("(TOP (NP (DT the)) (NN cat))")[0]
    assert repr(tree) == "Tree('(TOP (NP (DT the) (NN cat)))')"


WORDS = ["Its", "plan", "was", "clear", "."]

REPAIRS = {
    "missing closers": (
        ["(S", "(NP", "PRP$", "NN", ")NP", "(VP", "VBD", "(ADJP", "JJ", "."],
        "(TOP (S (NP (PRP$ Its) (NN plan)) (VP (VBD was) (ADJP (JJ clear) (. .)))))",
    ),
    "extra closers": (
        [")S", "(NP", "PRP$", "NN", ")NP", ")NP", ")VP", "VBD", "JJ", "."],
        "(TOP (NP (PRP$ Its) (NN plan)) (VBD was) (JJ clear) (. .))",
    ),
    "mismatched closer labels": (
        ["(S", "(NP", "PRP$", "NN", ")VP", "(VP", "VBD", "JJ", ")NP", ".", ")S"],
        "(TOP (S (NP (PRP$ Its) (NN plan)) (VP (VBD was) (JJ clear)) (. .)))",
    ),
    "too many pos tags and a phrase left empty": (
        ["(S", "NN", "NN", "VBD", "JJ", ".", "NN", "(NP", "NN", ")NP", ")S"],
        "(TOP (S (NN Its) (NN plan) (VBD was) (JJ clear) (. .)))",
    ),
    "too few pos tags": (
        ["(S", "(NP", "PRP$", ")NP", ")S"],
        "(TOP (S (NP (PRP$ Its))) (XX plan) (XX was) (XX clear) (XX .))",
    ),
    "no tokens": ([], "(TOP (XX Its) (XX plan) (XX was) (XX clear) (XX .))"),
    "garbage tokens": (
        ["", "(", ")", "(S", "a b", "((NP", "PRP$", " ", "NN)", ")S"],
        "(TOP (S (PRP$ Its)) (XX plan) (XX was) (XX clear) (XX .))",
    ),
}


@pytest.mark.parametrize("tokens, expected", REPAIRS.values(), ids=REPAIRS.keys())
def test_delinearise_repairs_malformed_tokens_as_documented(tokens, expected):
    assert delinearise(tokens, WORDS).to_string() == expected


def test_delinearise_without_words_gives_an_empty_root():
    assert delinearise(["(S", "NN", ")S"], []) == Tree("TOP", [])


def random_tokens(rng, length):
    vocabulary = ["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")X", "NN", "VBD", "-LRB-", "", "(", ")"]
    return [rng.choice(vocabulary) for _ in range(length)]


def corrupted_linearisation(rng, tree):
    """A real tree's tokens with a few dropped, duplicated or swapped, as a weak model emits."""
    tokens = linearise(tree)
    for _ in range(rng.randint(1, 5)):
        i = rng.randrange(len(tokens))
        edit = rng.choice(["drop", "duplicate", "swap"])
        if edit == "drop":
            del tokens[i]
        elif edit == "duplicate":
            tokens.insert(i, tokens[i])
        else:
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
    return tokens


@pytest.mark.parametrize("seed", range(5))
def test_delinearise_keeps_the_words_in_order_whatever_the_tokens(seed, cleaned_sample):
    rng = random.Random(seed)
    for _ in range(200):
        tree = rng.choice(cleaned_sample)
        words = tree.words()
        if rng.random() < 0.5:
            tokens = random_tokens(rng, rng.randint(0, 3 * len(words)))
        else:
            tokens = corrupted_linearisation(rng, tree)
        repaired = delinearise(tokens, words)
        assert repaired.label == "TOP"
        assert repaired.words() == words
        # A repaired tree is well formed: it round-trips unchanged, so no phrase is empty.
        assert delinearise(linearise(repaired), words) == repaired


@pytest.mark.parametrize(
    "text, where",
    [
        ("( (S (NP (NN a) )", "'(' at line 1, column 3 is never closed"),
        ("((S (NN a))\n(S (NN b)))\n)", "unmatched ')' at line 3, column 1"),
        ("((S (NN a))) stray", "word 'stray' outside any bracket at line 1, column 14"),
    ],
)
def test_parse_trees_rejects_unbalanced_treebank_text_saying_where(text, where):
    with pytest.raises(TreeError, match=re.escape(where)):
        parse_trees(text)
    assert issubclass(TreeError, ValueError)
