"""Penn Treebank constituency trees for the English parsing problem.

Reads `.mrg` bracketings, cleans them the usual way for parsing (no traces, no empty
constituents, no function tags, root labelled TOP) and turns a tree into the target token
sequence of "Grammar as a Foreign Language" (Vinyals et al. 2015) and back: the words are the
model's input, the labelled brackets with POS tags in place of the words are its output.
"""

import dataclasses
import re

from t2t_repro.errors import UserError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_FUNCTION_TAG_OR_INDEX = re.compile(r"[-=]")
_EMPTY_ELEMENT = "-NONE-"
_UNKNOWN_POS = "XX"


class TreeError(UserError, ValueError):
    """A treebank string whose brackets do not form trees."""


@dataclasses.dataclass(repr=False)
class Tree:
    """A labelled constituent; each child is a `Tree` or a word (`str`).

    A preterminal is a tree whose only child is a word: its label is the POS tag.
    Trees compare equal when their labels and children are equal, all the way down.
    """

    label: str
    children: list = dataclasses.field(default_factory=list)

    @property
    def is_preterminal(self):
        """Whether this is a POS tag over one word."""
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def words(self):
        """The leaves, left to right."""
        leaves = []
        for child in self.children:
            if isinstance(child, str):
                leaves.append(child)
            else:
                leaves.extend(child.words())
        return leaves

    def to_string(self):
        """One-line PTB bracketing, as in the reference files: `(TOP (S ...))`, `((S ...))`."""
        parts = [child if isinstance(child, str) else child.to_string() for child in self.children]
        return "(" + " ".join(([self.label] if self.label else []) + parts) + ")"

    def __repr__(self):
        return f"Tree({self.to_string()!r})"


def _where(text, offset):
    """`line L, column C` of a character offset, for error messages."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def parse_trees(text):
    """All bracketed trees in `text`, in order.

    Accepts whole `.mrg` files (trees over several lines) as well as one tree per line. A
    bracket with no label, like the `.mrg` outer `( (S ...) )`, becomes a tree labelled "".
    Raises TreeError, naming the line and column, for a stray `)`, a word outside any
    bracket, or a bracket left open at the end.
    """
    trees = []
    open_trees = []  # (tree, offset of its "(") from the outermost in
    expecting_label = False
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == "(":
            open_trees.append((Tree(""), match.start()))
            expecting_label = True
        elif token == ")":
            if not open_trees:
                raise TreeError(f"unmatched ')' at {_where(text, match.start())}")
            tree, _ = open_trees.pop()
            (open_trees[-1][0].children if open_trees else trees).append(tree)
            expecting_label = False
        elif not open_trees:
            raise TreeError(f"word {token!r} outside any bracket at {_where(text, match.start())}")
        elif expecting_label:
            open_trees[-1][0].label = token
            expecting_label = False
        else:
            open_trees[-1][0].children.append(token)
    if open_trees:
        raise TreeError(f"'(' at {_where(text, open_trees[-1][1])} is never closed")
    return trees


def read_mrg_file(path):
    """The trees of one `.mrg` file (or any file of bracketed trees)."""
    with open(path, encoding="utf-8") as f:
        return parse_trees(f.read())


def _strip_function_tags(label):
    """`NP-SBJ-1`, `PP-LOC=2`, `NP=3` -> the bare category; `-LRB-`, `-NONE-` are kept whole."""
    if label.startswith("-"):
        return label
    return _FUNCTION_TAG_OR_INDEX.split(label, maxsplit=1)[0]


def _clean_constituent(tree):
    """`tree` without empty elements, empty phrases and function tags; None if nothing is left."""
    if tree.is_preterminal:
        return None if tree.label == _EMPTY_ELEMENT else Tree(tree.label, list(tree.children))
    children = []
    for child in tree.children:
        cleaned = child if isinstance(child, str) else _clean_constituent(child)
        if cleaned is not None:
            children.append(cleaned)
    if not children:
        return None
    return Tree(_strip_function_tags(tree.label), children)


def clean_tree(tree, root_label="TOP"):
    """The tree as parsers are trained and scored on it, with its root labelled `root_label`.

    Removes `-NONE-` preterminals (traces and other empty elements), then every constituent
    left without children, and strips function tags and co-indices from phrase labels
    (`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`; labels starting with `-` stay whole). POS tags are
    kept as they are. An unlabelled root (the `.mrg` outer bracket) or one already labelled
    `root_label` is relabelled; any other root is wrapped in a new `root_label` node. Returns
    None when nothing is left.
    """
    cleaned = _clean_constituent(tree)
    if cleaned is None:
        return None
    if cleaned.label in ("", root_label):
        return Tree(root_label, cleaned.children)
    return Tree(root_label, [cleaned])


def linearise(tree):
    """The target tokens of `tree`: `(LABEL` ... `)LABEL` per phrase, a POS tag per word.

    The root is left out (every tree has one) and words are dropped (they are the input), e.g.
    `(TOP (S (NP (NNP Pierre)) (. .)))` -> `["(S", "(NP", "NNP", ")NP", ".", ")S"]`. Every word
    must sit under a preterminal, as in cleaned trees.
    """
    tokens = []
    for child in tree.children:
        _linearise_constituent(child, tokens)
    return tokens


def _linearise_constituent(tree, tokens):
    """Appends the tokens of one constituent, in the order a model emits them."""
    if tree.is_preterminal:
        tokens.append(tree.label)
        return
    tokens.append("(" + tree.label)
    for child in tree.children:
        _linearise_constituent(child, tokens)
    tokens.append(")" + tree.label)


def _bracket_label(token, bracket):
    """The label of an opening/closing token like `(NP`/`)NP`, or None if `token` is not one."""
    label = token[1:]
    if token.startswith(bracket) and label and not _has_bracket_or_space(label):
        return label
    return None


def _has_bracket_or_space(token):
    """Such a token cannot be a label or POS tag: it would not survive `to_string` and parsing."""
    return "(" in token or ")" in token or any(c.isspace() for c in token)


def delinearise(tokens, words, root_label="TOP"):
    """The tree whose linearisation is `tokens`, with `words` as its leaves.

    The inverse of `linearise` for well-formed tokens. Model output may be malformed, so the
    result always has exactly `words` as leaves, in order, by these repairs:
      * a closing token `)X` closes the innermost open phrase, whatever its label;
      * a closing token with no phrase open is ignored;
      * phrases still open at the end are closed;
      * a phrase that ends up with no children is dropped;
      * a POS tag beyond the last word is dropped;
      * words left without a POS tag are attached to the root, at the end, as `XX` preterminals;
      * any token that is neither `(X`, `)X` nor a POS tag (a non-empty token without brackets
        or whitespace) is ignored: the empty string, a bare `(` or `)`, `((NP`, `NN)`, ...
    """
    root = Tree(root_label)
    open_phrases = [root]
    next_word = 0
    for token in tokens:
        opened = _bracket_label(token, "(")
        if opened is not None:
            open_phrases.append(Tree(opened))
        elif _bracket_label(token, ")") is not None:
            if len(open_phrases) > 1:
                _close_innermost(open_phrases)
        elif token and not _has_bracket_or_space(token):
            if next_word < len(words):
                open_phrases[-1].children.append(Tree(token, [words[next_word]]))
                next_word += 1
    while len(open_phrases) > 1:
        _close_innermost(open_phrases)
    root.children.extend(Tree(_UNKNOWN_POS, [word]) for word in words[next_word:])
    return root


def _close_innermost(open_phrases):
    """Pops the innermost open phrase and attaches it to its parent unless it is empty."""
    phrase = open_phrases.pop()
    if phrase.children:
        open_phrases[-1].children.append(phrase)
