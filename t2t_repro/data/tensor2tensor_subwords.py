"""tensor2tensor's `SubwordTextEncoder` vocabularies, read from their vocabulary files, for
runs imported from tensor2tensor checkpoints (docs/importing.md).

The file lists one subtoken a line, usually in single quotes; id i is line i, and ids 0 and 1
are `<pad>` and `<EOS>`, as ours are. Encoding, as tensor2tensor does it: split the text into
runs of letters and digits and runs of other characters (dropping a single space between two
word runs), escape each token (`\\` -> `\\\\`, `_` -> `\\u`, a character outside the
vocabulary's alphabet -> `\\<code point>;`) and end it with `_`, then take the longest
subtoken that starts the rest of it, left to right. Decoding joins the subtokens, splits at
`_`, unescapes, and puts a space between two tokens that start with a letter or digit.

That greedy longest match over escaped tokens has no TensorFlow op, so this vocabulary has no
in-graph tokenizer: `graph_tokenizer` is a UserError, and a SavedModel export says so.
"""

import re
import sys
import unicodedata

from t2t_repro.data.vocabulary import VocabularyError
from t2t_repro.names import EOS_ID

# Characters tensor2tensor adds to every alphabet: those its escapes are written with.
ESCAPE_CHARACTERS = set("\\_u;0123456789")
_UNESCAPE = re.compile(r"\\u|\\\\|\\([0-9]+);")
_UNDEFINED_CHARACTER = "\u3013"


def _is_word_character(character):
    """Letters and digits (Unicode categories L* and N*): tensor2tensor's token classes."""
    return unicodedata.category(character)[0] in "LN"


def split_tokens(text):
    """tensor2tensor's tokenizer: runs of word characters and runs of others; a run that is a
    single space between two words is dropped (decoding puts it back)."""
    tokens = []
    start = 0
    for position in range(1, len(text)):
        if _is_word_character(text[position]) != _is_word_character(text[position - 1]):
            token = text[start:position]
            if token != " " or start == 0:
                tokens.append(token)
            start = position
    if text:
        tokens.append(text[start:])
    return tokens


def join_tokens(tokens):
    """The inverse of `split_tokens`: a space between two tokens that start with word
    characters."""
    pieces = []
    for i, token in enumerate(tokens):
        if i > 0 and _is_word_character(tokens[i - 1][0]) and _is_word_character(token[0]):
            pieces.append(" ")
        pieces.append(token)
    return "".join(pieces)


def _unescape_match(match):
    if match.group(1) is None:
        return "_" if match.group(0) == "\\u" else "\\"
    code = int(match.group(1))
    return chr(code) if code <= sys.maxunicode else _UNDEFINED_CHARACTER


class Tensor2TensorSubwords:
    """A tensor2tensor SubwordTextEncoder vocabulary file: text <-> ids in Python."""

    def __init__(self, model_path):
        self.model_path = model_path
        try:
            with open(model_path, encoding="utf-8") as f:
                lines = [line.rstrip() for line in f]
        except (OSError, UnicodeDecodeError) as error:
            raise VocabularyError(f"cannot read the tensor2tensor vocabulary {model_path}: "
                                  f"{error}.") from None
        self.subtokens = [line[1:-1] if len(line) > 1 and line[0] == line[-1] and line[0] in "'\""
                          else line for line in lines]
        if len(self.subtokens) < 3 or self.subtokens[:2] != ["<pad>", "<EOS>"]:
            raise VocabularyError(f"{model_path} is not a tensor2tensor subword vocabulary: it "
                                  f"does not start with '<pad>' and '<EOS>'.")
        self.ids = {subtoken: i for i, subtoken in enumerate(self.subtokens) if subtoken}
        self.longest = max(len(subtoken) for subtoken in self.subtokens)
        self.alphabet = {c for subtoken in self.subtokens for c in subtoken} | ESCAPE_CHARACTERS

    @property
    def vocab_size(self):
        return len(self.subtokens)

    def all_pieces(self):
        return list(self.subtokens)

    def _escape(self, token):
        token = token.replace("\\", "\\\\").replace("_", "\\u")
        return "".join(c if c in self.alphabet and c != "\n" else f"\\{ord(c)};"
                       for c in token) + "_"

    def _token_ids(self, token):
        escaped = self._escape(token)
        ids = []
        start = 0
        while start < len(escaped):
            for end in range(min(len(escaped), start + self.longest), start, -1):
                if escaped[start:end] in self.ids:
                    ids.append(self.ids[escaped[start:end]])
                    start = end
                    break
            else:
                raise VocabularyError(f"{self.model_path} cannot spell '{escaped[start:]}' "
                                      f"(a character of its alphabet has no subtoken).")
        return ids

    def encode(self, text):
        """Ids of `text` (no EOS); a list of strings gives a list of id lists."""
        if isinstance(text, list):
            return [self.encode(line) for line in text]
        return [i for token in split_tokens(text) for i in self._token_ids(token)]

    def decode(self, ids):
        """Text of `ids`, stopping at the first EOS; padding and unknown ids decode to
        nothing."""
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        joined = "".join(self.subtokens[i] for i in ids if 0 < i < self.vocab_size)
        tokens = [_UNESCAPE.sub(_unescape_match, part) for part in joined.split("_") if part]
        return join_tokens([token for token in tokens if token])

    def graph_tokenizer(self, name=None):
        raise VocabularyError(
            f"{self.model_path} is a tensor2tensor subword vocabulary, whose encoding (greedy "
            f"longest match over escaped tokens) has no TensorFlow op: a SavedModel cannot take "
            f"text; decode, score and fine-tune this run with the Python commands instead.")
