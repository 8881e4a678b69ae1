"""Moses `tokenizer.perl` with its default options, as the paper's BLEU tooling ran it in 2017.

Reproduces mosesdecoder's `scripts/tokenizer/tokenizer.perl` at commit 59119c0 (Dec 2016, the
version current until Feb 2018) run as `tokenizer.perl -l <language>`: no `-a`, XML escaping on,
no protected patterns. Later versions differ (PR #204, Nov 2018, splits every sentence-final
period: `iPhone 5.` -> `iPhone 5 .`).

Why not sacremoses: its character tables miss whole scripts (Hangul syllables and CJK extension
ideographs are not letters to it, so `풵-풵` splits), and it treats U+001C..U+001F as spaces and
drops lines of only whitespace, where the Perl deletes them and echoes the line. Here the
character classes are the `regex` module's Unicode properties, which are Perl's
(`\\p{IsAlnum}` = Alphabetic or Nd, `\\p{IsN}`, `\\p{IsAlpha}`, `\\p{IsLower}` = Lowercase);
they can differ from Perl's only on characters whose Unicode properties changed between the two
programs' Unicode versions. The abbreviation lists are sacremoses' copies of mosesdecoder's.
"""

import functools
import importlib.resources

import regex

# Perl's \s on Unicode text (tokenizer.perl reads with :utf8): unlike Python's, not U+001C..U+001F.
_PERL_SPACE = r"\t\n\x0b\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_SPACES = regex.compile(f"[{_PERL_SPACE}]+")
_BLANK_LINE = regex.compile(f"[{_PERL_SPACE}]*")
_CONTROL = regex.compile(r"[\x00-\x1f]")
_ALNUM = r"\p{Alphabetic}\p{Nd}"
_SPECIAL = regex.compile(rf"([^{_ALNUM}{_PERL_SPACE}.'`,\-])")
_MULTI_DOT = regex.compile(r"\.(\.+)")
_COMMA_AFTER_NON_NUMBER = regex.compile(r"([^\p{N}]),")
_COMMA_BEFORE_NON_NUMBER = regex.compile(r",([^\p{N}])")
_FINAL_COMMA_AFTER_NUMBER = regex.compile(r"(\p{N}),$")
_FINAL_PERIOD_QUOTE = regex.compile(r"\.' ?$")
_STARTS_LOWERCASE = regex.compile(r"\p{Lowercase}")
_STARTS_DIGIT = regex.compile(r"[0-9]")
_HAS_LETTER = regex.compile(r"\p{Alphabetic}")

# Apostrophe rules, in order: English keeps it on the right part (`don 't`, `1990 's`), French,
# Italian and Irish on the left part (`l' homme`); other languages split it off on both sides.
_A, _NOT_A = r"\p{Alphabetic}", r"[^\p{Alphabetic}]"
_APOSTROPHE_RULES = {
    "en": ((rf"({_NOT_A})'({_NOT_A})", r"\1 ' \2"),
           (r"([^\p{Alphabetic}\p{N}])'(\p{Alphabetic})", r"\1 ' \2"),
           (rf"({_A})'({_NOT_A})", r"\1 ' \2"),
           (rf"({_A})'({_A})", r"\1 '\2"),
           (r"(\p{N})'(s)", r"\1 '\2")),
    "fr": ((rf"({_NOT_A})'({_NOT_A})", r"\1 ' \2"),
           (rf"({_NOT_A})'({_A})", r"\1 ' \2"),
           (rf"({_A})'({_NOT_A})", r"\1 ' \2"),
           (rf"({_A})'({_A})", r"\1' \2")),
}
_APOSTROPHE_RULES["it"] = _APOSTROPHE_RULES["ga"] = _APOSTROPHE_RULES["fr"]
_OTHER_APOSTROPHE_RULES = ((r"'", " ' "),)

_ESCAPES = (("&", "&amp;"), ("|", "&#124;"), ("<", "&lt;"), (">", "&gt;"), ("'", "&apos;"),
            ('"', "&quot;"), ("[", "&#91;"), ("]", "&#93;"))

# Entries sacremoses' lists carry that mosesdecoder added after 59119c0 ("Rs", Nov 2019).
_ADDED_SINCE_2017 = {"en": {"Rs"}}
_NUMERIC_ONLY = regex.compile(r"(.*)\s+#NUMERIC_ONLY#")


@functools.lru_cache(maxsize=None)
def nonbreaking_prefixes(language):
    """`{prefix: 1 or 2}` as tokenizer.perl loads `nonbreaking_prefix.<language>` (English when
    there is none): 2 marks `#NUMERIC_ONLY#` prefixes, kept only before a number."""
    folder = importlib.resources.files("sacremoses") / "data" / "nonbreaking_prefixes"
    path = folder / f"nonbreaking_prefix.{language}"
    if not path.is_file():
        language, path = "en", folder / "nonbreaking_prefix.en"
    prefixes = {}
    for item in path.read_text(encoding="utf-8").split("\n"):
        # Perl's truth test: "" and "0" are false.
        if item in ("", "0") or item.startswith("#"):
            continue
        numeric_only = _NUMERIC_ONLY.match(item)
        if numeric_only:
            prefixes[numeric_only[1]] = 2
        else:
            prefixes[item] = 1
    for added in _ADDED_SINCE_2017.get(language, ()):
        prefixes.pop(added, None)
    return prefixes


def _split_final_periods(text, prefixes):
    """A word-final period becomes a token unless the word is an abbreviation: it contains
    another period and a letter, it is a nonbreaking prefix, or the next word is lowercase."""
    # Perl's split(/\s/): one field per space (empty between doubled spaces), trailing ones dropped.
    words = text.split(" ")
    while words and not words[-1]:
        words.pop()
    out = []
    for i, word in enumerate(words):
        has_next = i < len(words) - 1
        if len(word) > 1 and word.endswith("."):
            prefix = word[:-1]
            keep = (("." in prefix and _HAS_LETTER.search(prefix))
                    or prefixes.get(prefix) == 1
                    or (has_next and _STARTS_LOWERCASE.match(words[i + 1])))
            keep = keep or (prefixes.get(prefix) == 2 and has_next
                            and _STARTS_DIGIT.match(words[i + 1]))
            if not keep:
                word = prefix + " ."
        out.append(word)
    return " ".join(out)


def _squeeze(text):
    return regex.sub(" +", " ", text).removeprefix(" ").removesuffix(" ")


def moses_tokenize(line, language="de"):
    """`line` as `tokenizer.perl -l <language>` (2017, default options) writes it: punctuation
    split off, hyphens kept, XML characters escaped (`"` -> `&quot;`). A line of only
    whitespace comes back unchanged, as the Perl echoes it; the result may end in a space
    (a final `.'`), as the Perl's does."""
    if _BLANK_LINE.fullmatch(line):
        return line
    text = _CONTROL.sub("", _SPACES.sub(" ", f" {line} "))
    text = _squeeze(text)
    text = _SPECIAL.sub(r" \1 ", text)
    # Runs of periods are hidden as DOTMULTI... words, one "DOT" per extra period.
    text = _MULTI_DOT.sub(r" DOTMULTI\1", text)
    while "DOTMULTI." in text:
        text = regex.sub(r"DOTMULTI\.([^.])", r"DOTDOTMULTI \1", text)
        text = text.replace("DOTMULTI.", "DOTDOTMULTI")
    text = _COMMA_AFTER_NON_NUMBER.sub(r"\1 , ", text)
    text = _COMMA_BEFORE_NON_NUMBER.sub(r" , \1", text)
    text = _FINAL_COMMA_AFTER_NUMBER.sub(r"\1 ,", text)
    for pattern, replacement in _APOSTROPHE_RULES.get(language, _OTHER_APOSTROPHE_RULES):
        text = regex.sub(pattern, replacement, text)
    text = _squeeze(_split_final_periods(text, nonbreaking_prefixes(language)))
    text = _FINAL_PERIOD_QUOTE.sub(" . ' ", text, count=1)
    while "DOTDOTMULTI" in text:
        text = text.replace("DOTDOTMULTI", "DOTMULTI.")
    text = text.replace("DOTMULTI", ".")
    for character, escaped in _ESCAPES:
        text = text.replace(character, escaped)
    return text
