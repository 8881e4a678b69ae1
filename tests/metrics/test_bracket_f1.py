"""Labelled bracket F1 with EVALB's COLLINS.prm conventions: hand-made trees with counts worked out
by hand, then the PTB sample's section 00 scored against itself and its round trip."""

import collections

import pytest

from problems.parsing_wsj import ParsingWsj
from t2t_repro.data.treebank import treebank_files
from t2t_repro.data.trees import clean_tree, linearise, parse_trees, read_mrg_file
from t2t_repro.metrics.bracket_f1 import (
    BracketScore,
    corpus_bracket_f1,
    evaluable_brackets,
    sentence_bracket_score,
    sentence_words,
)


def tree(text):
    (parsed,) = parse_trees(text)
    return parsed


def brackets(*triples):
    return collections.Counter(triples)


# The cat sat on the mat .  ->  non-punctuation positions 0..5; "." is left out of every span.
GOLD = tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat))))"
            " (. .)))")
GOLD_BRACKETS = brackets(("S", 0, 6), ("NP", 0, 2), ("VP", 2, 6), ("PP", 3, 6), ("NP", 4, 6))


def test_brackets_of_a_tree():
    assert evaluable_brackets(GOLD) == GOLD_BRACKETS


def test_perfect_parse():
    score = sentence_bracket_score(GOLD, GOLD)
    assert score == BracketScore(matched=5, gold=5, test=5)
    assert (score.precision, score.recall, score.f1) == (1.0, 1.0, 1.0)


def test_one_wrong_label():
    test = tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (ADJP (IN on) (NP (DT the) (NN mat)))"
                ") (. .)))")
    score = sentence_bracket_score(GOLD, test)
    assert score == BracketScore(matched=4, gold=5, test=5)
    assert (score.precision, score.recall, score.f1) == pytest.approx((0.8, 0.8, 0.8))


def test_one_wrong_span():
    # The PP attached to the sentence: VP covers 2-3, not 2-6.
    test = tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (PP (IN on) (NP (DT the) (NN mat)))"
                " (. .)))")
    assert sentence_bracket_score(GOLD, test) == BracketScore(matched=4, gold=5, test=5)


def test_a_missing_bracket_lowers_recall_only():
    test = tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (DT the) (NN mat)))"
                " (. .)))")
    score = sentence_bracket_score(GOLD, test)
    assert score == BracketScore(matched=4, gold=5, test=4)
    assert (score.precision, score.recall) == (1.0, 0.8)
    assert score.f1 == pytest.approx(2 * 0.8 / 1.8)


# --- punctuation and empty elements ------------------------------------------------------------

PUNCTUATED = tree("(TOP (S (NP (NNP John) (, ,)) (VP (VBD left)) (. .)))")


def test_a_span_differing_only_by_punctuation_still_matches():
    test = tree("(TOP (S (NP (NNP John)) (, ,) (VP (VBD left) (. .))))")
    assert evaluable_brackets(PUNCTUATED) == evaluable_brackets(test) == brackets(
        ("S", 0, 2), ("NP", 0, 1), ("VP", 1, 2))
    assert sentence_bracket_score(PUNCTUATED, test) == BracketScore(matched=3, gold=3, test=3)


@pytest.mark.parametrize("tag", [",", ":", "``", "''", "."])
def test_a_bracket_over_only_punctuation_is_dropped(tag):
    test = tree(f"(TOP (S (NP (NNP John)) (PRN ({tag} ,)) (VP (VBD left)) (. .)))")
    assert evaluable_brackets(test) == brackets(("S", 0, 2), ("NP", 0, 1), ("VP", 1, 2))


def test_other_punctuation_like_tags_are_words():
    # COLLINS.prm deletes only , : `` '' . ; brackets and dollar signs count as words.
    test = tree("(TOP (S (NP (-LRB- -LRB-) (NNP John)) (VP (VBD left)) (. .)))")
    assert evaluable_brackets(test) == brackets(("S", 0, 3), ("NP", 0, 2), ("VP", 2, 3))


def test_the_gold_tags_decide_which_words_are_punctuation():
    # Alone, the test tree's comma tagged NN is a word (EVALB would stop at "Length unmatch");
    # against the gold tree it is punctuation, as in the gold tree.
    test = tree("(TOP (S (NP (NNP John) (NN ,)) (VP (VBD left)) (. .)))")
    assert evaluable_brackets(test) == brackets(("S", 0, 3), ("NP", 0, 2), ("VP", 2, 3))
    assert sentence_bracket_score(PUNCTUATED, test) == BracketScore(matched=3, gold=3, test=3)
    # A word the gold tree tags as a word stays one, whatever the test tag: the test NP then
    # ends before it (0-1) and the gold NP after it (0-2).
    comma_outside = tree("(TOP (S (NP (NNP John)) (, ,) (VP (VBD left)) (. .)))")
    assert sentence_bracket_score(test, comma_outside) == BracketScore(matched=2, gold=3, test=3)


def test_empty_elements_and_what_dominates_only_them_are_removed():
    raw = tree("( (S (NP-SBJ (NNP John)) (VP (VBD said) (SBAR (-NONE- 0) (S (-NONE- *T*-1))))"
               " (. .)) )")
    clean = tree("(TOP (S (NP (NNP John)) (VP (VBD said)) (. .)))")
    assert sentence_words(raw) == ["John", "said", "."]
    assert evaluable_brackets(raw) == brackets(("S", 0, 2), ("NP", 0, 1), ("VP", 1, 2))
    assert sentence_bracket_score(raw, clean) == BracketScore(matched=3, gold=3, test=3)


def test_function_tags_and_indices_are_stripped():
    test = tree("(TOP (S-1 (NP-SBJ=2 (NNP John) (, ,)) (VP (VBD left)) (. .)))")
    assert sentence_bracket_score(PUNCTUATED, test) == BracketScore(matched=3, gold=3, test=3)


# --- labels ------------------------------------------------------------------------------------


def test_advp_and_prt_are_one_label():
    gold = tree("(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up)))))")
    test = tree("(TOP (S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up)))))")
    assert evaluable_brackets(gold) == evaluable_brackets(test) == brackets(
        ("S", 0, 3), ("NP", 0, 1), ("VP", 1, 3), ("ADVP", 2, 3))
    assert sentence_bracket_score(gold, test) == BracketScore(matched=4, gold=4, test=4)


@pytest.mark.parametrize("text", ["(TOP (NP (NN Yes)))", "( (NP (NN Yes)) )"])
def test_the_root_is_not_counted(text):
    assert evaluable_brackets(tree(text)) == brackets(("NP", 0, 1))


def test_a_root_with_a_phrase_label_is_counted():
    assert evaluable_brackets(tree("(S (NP (NN Yes)))")) == brackets(("S", 0, 1), ("NP", 0, 1))


def test_preterminals_are_not_brackets():
    only_tags = tree("(TOP (UH Yes) (. !))")
    assert evaluable_brackets(only_tags) == brackets()
    score = sentence_bracket_score(only_tags, only_tags)
    assert score == BracketScore(matched=0, gold=0, test=0)
    assert (score.precision, score.recall, score.f1) == (0.0, 0.0, 0.0)


# --- unary chains ------------------------------------------------------------------------------


def test_each_bracket_of_a_unary_chain_counts():
    assert evaluable_brackets(tree("(TOP (S (VP (VB Go))))")) == brackets(("S", 0, 1), ("VP", 0, 1))


def test_repeated_brackets_count_as_a_multiset():
    double = tree("(TOP (NP (NP (NNS men))))")
    single = tree("(TOP (NP (NNS men)))")
    assert evaluable_brackets(double) == collections.Counter({("NP", 0, 1): 2})
    assert sentence_bracket_score(double, single) == BracketScore(matched=1, gold=2, test=1)
    assert sentence_bracket_score(single, double) == BracketScore(matched=1, gold=1, test=2)
    assert sentence_bracket_score(double, double) == BracketScore(matched=2, gold=2, test=2)


# --- a corpus ----------------------------------------------------------------------------------


def test_the_corpus_score_pools_counts():
    yes_gold, yes_test = tree("(TOP (NP (NN Yes)))"), tree("(TOP (INTJ (UH Yes)))")
    score = corpus_bracket_f1([GOLD, yes_gold], [GOLD, yes_test])
    assert score == BracketScore(matched=5, gold=6, test=6)
    assert score == sentence_bracket_score(GOLD, GOLD) + sentence_bracket_score(yes_gold, yes_test)
    # 5/6, not the mean of the sentences' F1 (1 and 0).
    assert score.f1 == pytest.approx(5 / 6)
    assert corpus_bracket_f1([], []) == BracketScore()


def test_max_length_counts_words_without_empty_elements():
    # Four gold words (the trace is not one) and one word.
    long_gold = tree("( (S (NP-SBJ (-NONE- *)) (VP (VB Come) (ADVP (RB back) (RB here))) (. .)) )")
    long_test = tree("(TOP (S (VP (VB Come) (ADVP (RB back) (RB here))) (. .)))")
    yes = tree("(TOP (NP (NN Yes)))")
    gold, test = [long_gold, yes], [long_test, yes]
    assert corpus_bracket_f1(gold, test) == BracketScore(matched=4, gold=4, test=4)
    assert corpus_bracket_f1(gold, test, max_length=4) == BracketScore(matched=4, gold=4, test=4)
    assert corpus_bracket_f1(gold, test, max_length=3) == BracketScore(matched=1, gold=1, test=1)


def test_different_words_are_an_error_naming_the_sentence():
    other = tree("(TOP (S (NP (DT The) (NN dog)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat))))"
                 " (. .)))")
    with pytest.raises(ValueError) as raised:
        corpus_bracket_f1([GOLD, GOLD], [GOLD, other])
    message = str(raised.value)
    assert message.startswith("sentence 1: ")
    assert "['The', 'cat', 'sat', 'on', 'the', 'mat', '.']" in message
    assert "['The', 'dog', 'sat', 'on', 'the', 'mat', '.']" in message
    shorter = tree("(TOP (S (NP (NNP John)) (VP (VBD left))))")
    expected = r"gold \['John', ',', 'left', '.'\], test \['John', 'left'\]"
    with pytest.raises(ValueError, match=expected):
        sentence_bracket_score(PUNCTUATED, shorter)


def test_different_numbers_of_trees_are_an_error():
    with pytest.raises(ValueError, match="2 gold trees but 1 test trees"):
        corpus_bracket_f1([GOLD, GOLD], [GOLD])


# --- the PTB sample's section 00 ---------------------------------------------------------------


@pytest.fixture(scope="module")
def section_00(shared_data_dir):
    """`(raw trees, cleaned trees)` of the sample's section 00, as in the `.mrg` files."""
    paths = treebank_files(shared_data_dir / "ptb_sample" / "combined_mrg")[0]
    raw = [tree for path in paths for tree in read_mrg_file(path)]
    return raw, [clean_tree(tree) for tree in raw]


def test_section_00_scored_against_itself(section_00):
    raw, cleaned = section_00
    assert len(cleaned) == 1921
    for gold in cleaned:
        score = sentence_bracket_score(gold, gold)
        assert score.matched == score.gold == score.test > 0
    score = corpus_bracket_f1(cleaned, cleaned)
    assert score.f1 == 1.0
    # Traces, function tags and the unlabelled root make no difference to EVALB.
    assert corpus_bracket_f1(raw, cleaned) == score


def test_section_00_linearised_and_rebuilt_scores_one(section_00):
    raw, cleaned = section_00
    problem = ParsingWsj()
    rebuilt = [problem.tree_of(" ".join(tree.words()), " ".join(linearise(tree)))
               for tree in cleaned]
    assert corpus_bracket_f1(raw, rebuilt) == corpus_bracket_f1(cleaned, cleaned)
    assert corpus_bracket_f1(raw, rebuilt).f1 == 1.0
    # POS tags are not scored, punctuation included: the gold tags say which words are punctuation.
    untagged = [problem.tree_of(" ".join(tree.words()),
                                " ".join("XX" if token[0] not in "()" else token
                                         for token in linearise(tree)))
                for tree in cleaned]
    assert corpus_bracket_f1(raw, untagged).f1 == 1.0
