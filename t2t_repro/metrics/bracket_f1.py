"""Labelled bracket precision, recall and F1 of constituency parses, as EVALB scores them with
COLLINS.prm (the parameters of the parsing literature, the paper's §6.3 included).

COLLINS.prm in short: brackets are compared as multisets of (label, start, end), labels without
function tags, with ADVP and PRT the same label; POS tags are not brackets; TOP (and the unlabelled
outer bracket of `.mrg` trees) is not counted; `-NONE-` elements and the punctuation tags
`, : `` '' .` are removed before spans are measured, and brackets left empty are dropped.

One departure: EVALB removes punctuation by each tree's own tags, so a parse that tags a comma `NN`
is an error there ("Length unmatch") and its sentence is skipped. Here the gold tags decide which
words are punctuation in both trees, so every parse over the right words is scored; where the tags
of punctuation agree, the counts are EVALB's.
"""

import collections
import dataclasses
import re

_EMPTY_ELEMENT = "-NONE-"
_PUNCTUATION_TAGS = frozenset([",", ":", "``", "''", "."])
# DELETE_LABEL TOP, plus the unlabelled root that `.mrg` files and `parse_trees` give.
_UNCOUNTED_LABELS = frozenset(["TOP", ""]) | _PUNCTUATION_TAGS | {_EMPTY_ELEMENT}
_EQUAL_LABELS = {"PRT": "ADVP"}
_FUNCTION_TAG_OR_INDEX = re.compile(r"[-=]")


@dataclasses.dataclass(frozen=True)
class BracketScore:
    """Bracket counts of one or more sentences; add scores to pool counts over a corpus (EVALB's
    summary is this micro-average, not a mean of per-sentence figures)."""

    matched: int = 0
    gold: int = 0
    test: int = 0

    def __add__(self, other):
        return BracketScore(self.matched + other.matched, self.gold + other.gold,
                            self.test + other.test)

    @property
    def precision(self):
        """Matched over test brackets; 0 without test brackets."""
        return self.matched / self.test if self.test else 0.0

    @property
    def recall(self):
        """Matched over gold brackets; 0 without gold brackets."""
        return self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self):
        """Harmonic mean of precision and recall; 0 when both are 0."""
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def _tagged_words(tree):
    """`(word, POS tag)` of the sentence's words, left to right, without `-NONE-` elements; a word
    placed directly under a phrase has tag None."""
    words = []
    for child in tree.children:
        if isinstance(child, str):
            words.append((child, None))
        elif child.is_preterminal:
            if child.label != _EMPTY_ELEMENT:
                words.append((child.children[0], child.label))
        else:
            words.extend(_tagged_words(child))
    return words


def sentence_words(tree):
    """The words EVALB compares and counts for length: the leaves without `-NONE-` elements."""
    return [word for word, _ in _tagged_words(tree)]


def _scored_label(label):
    """The label brackets are compared by: no function tags or indices, PRT as ADVP. Labels
    starting with `-` (`-NONE-`) stay whole."""
    bare = label if label.startswith("-") else _FUNCTION_TAG_OR_INDEX.split(label, maxsplit=1)[0]
    return _EQUAL_LABELS.get(bare, bare)


def evaluable_brackets(tree, punctuation=None):
    """The multiset of `(label, start, end)` brackets EVALB scores in `tree`.

    Spans count only words that are not punctuation, `end` exclusive. `punctuation` says which of
    `sentence_words(tree)` are punctuation (a sequence of bools); by default, those tagged with a
    punctuation tag in `tree` itself.
    """
    tagged = _tagged_words(tree)
    if punctuation is None:
        punctuation = [tag in _PUNCTUATION_TAGS for _, tag in tagged]
    elif len(punctuation) != len(tagged):
        raise ValueError(f"punctuation marks {len(punctuation)} words; the tree has "
                         f"{len(tagged)}: {[word for word, _ in tagged]}")
    brackets = collections.Counter()
    word_index, span_position = 0, 0

    def visit(node):
        nonlocal word_index, span_position
        start = span_position
        for child in node.children:
            if not isinstance(child, str) and not child.is_preterminal:
                visit(child)
            elif isinstance(child, str) or child.label != _EMPTY_ELEMENT:
                span_position += not punctuation[word_index]
                word_index += 1
        label = _scored_label(node.label)
        if span_position > start and label not in _UNCOUNTED_LABELS:
            brackets[(label, start, span_position)] += 1

    visit(tree)
    return brackets


def _score(gold_tree, test_tree, where=""):
    """The counts of one pair; `where` starts the error raised when the words differ."""
    gold_tagged = _tagged_words(gold_tree)
    gold_words, test_words = [word for word, _ in gold_tagged], sentence_words(test_tree)
    if gold_words != test_words:
        raise ValueError(f"{where}gold and test trees are over different words (EVALB: "
                         f"\"Words unmatch\"/\"Length unmatch\"): gold {gold_words}, "
                         f"test {test_words}")
    punctuation = [tag in _PUNCTUATION_TAGS for _, tag in gold_tagged]
    gold = evaluable_brackets(gold_tree, punctuation)
    test = evaluable_brackets(test_tree, punctuation)
    return BracketScore(matched=sum((gold & test).values()), gold=sum(gold.values()),
                        test=sum(test.values()))


def sentence_bracket_score(gold_tree, test_tree):
    """The bracket counts of a parse of one sentence. Raises ValueError if the trees' words (see
    `sentence_words`) differ."""
    return _score(gold_tree, test_tree)


def corpus_bracket_f1(gold_trees, test_trees, max_length=None):
    """The pooled `BracketScore` of parses `test_trees` against `gold_trees`, pair by pair.

    `max_length` keeps only sentences of at most that many gold words (EVALB's `len<=40` summary;
    `-NONE-` elements are not words). Raises ValueError, naming the sentence (0-based) and both word
    lists, when the numbers of trees differ or a pair's words differ.
    """
    gold_trees, test_trees = list(gold_trees), list(test_trees)
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees")
    total = BracketScore()
    for index, (gold_tree, test_tree) in enumerate(zip(gold_trees, test_trees)):
        score = _score(gold_tree, test_tree, f"sentence {index}: ")
        if max_length is None or len(sentence_words(gold_tree)) <= max_length:
            total += score
    return total
