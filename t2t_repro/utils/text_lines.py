"""The one rule by which every command reads a text file as lines (no TensorFlow needed).

A line ends at "\\n" only, as sacreBLEU and `wc -l` count lines: a "\\r" directly before the
"\\n" belongs to the ending, while a lone "\\r", U+2028 or any other Unicode line separator stays
inside its line. A last line without a final "\\n" is still a line. A UTF-8 byte order mark
(which Windows editors write at the start of a file) marks the encoding and is no part of the
first line, as Python's "utf-8-sig" codec reads it; kept, it would become a piece of the first
sentence. The decoder, the BLEU command and the raw-corpus readers all use it, so a stray "\\r"
can never shift one file's lines against another's.
"""

import codecs

from t2t_repro.errors import UserError


class TextLinesError(UserError, ValueError):
    """A file that is not UTF-8 text (the message names the file and the line), or one a flag
    names that cannot be read."""


def iter_lines(binary, label):
    """Yields the UTF-8 lines of a binary stream without their endings.

    Splitting the bytes before decoding gives the exact line of a decoding error (a "\\n" byte
    never occurs inside a UTF-8 sequence), and reads one line at a time, so it suits stdin.

    Args:
        binary: a stream of bytes (an open file, a gzip or archive member, stdin's buffer).
        label: how error messages name the stream (usually its path).
    """
    for line_number, raw in numbered_raw_lines(binary):
        yield decode_line(raw, line_number, label)


def numbered_raw_lines(binary):
    """Yields `(line number, bytes)` for each line of a binary stream, the first line without
    a UTF-8 byte order mark (a stream holding the mark alone has no lines)."""
    for line_number, raw in enumerate(binary, 1):
        if line_number == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
            if not raw:
                return
        yield line_number, raw


def decode_line(raw, line_number, label):
    """The text of one line's bytes without its ending; a TextLinesError naming `label` and
    `line_number` when they are not UTF-8."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TextLinesError(
            f"{label} is not UTF-8 text: line {line_number} has {error.reason} at byte "
            f"{error.start} of the line; convert the file to UTF-8 (e.g. with iconv)."
        ) from error
    return line.removesuffix("\n").removesuffix("\r") if line.endswith("\n") else line


def open_flagged(path, flag):
    """`path` opened for reading bytes; a file that cannot be opened is a TextLinesError
    naming `flag` (such as "--reference"), the command-line flag that named it."""
    try:
        return open(path, "rb")
    except OSError as error:
        raise TextLinesError(f"cannot read {flag}={path}: {error.strerror}.") from error


def read_lines(path, flag=None):
    """The lines of the UTF-8 text file at `path`, as a list (see the module's rule).

    `flag`: the command-line flag that named the file. Errors then name the flag, and a file
    that cannot be opened is a TextLinesError (`open_flagged`), not an OSError."""
    with (open_flagged(path, flag) if flag else open(path, "rb")) as binary:
        return list(iter_lines(binary, f"{flag}={path}" if flag else path))


def read_aligned_lines(path, flag, other_path, other_flag):
    """The lines of two files that pair up line by line (translations and references, ...),
    each named by its flag; a TextLinesError naming both when their line counts differ."""
    lines, other = read_lines(path, flag), read_lines(other_path, other_flag)
    if len(lines) != len(other):
        raise TextLinesError(f"{flag}={path} has {len(lines)} lines but {other_flag}={other_path} "
                             f"has {len(other)}; they must be aligned line by line.")
    return lines, other


# What would break an output line apart: a line ending, and the tab between fields.
FIELD_BREAKS = "\n\r\t"
_AS_SPACES = str.maketrans(dict.fromkeys(FIELD_BREAKS, " "))


def output_field(text):
    """`text` (a model's output) as one field of an output line: each line break or tab in it
    a space. A model can emit them (byte-fallback pieces such as <0x0A>, sampled or from an
    undertrained model), and one would give an input two output lines, or shift the fields."""
    return text.translate(_AS_SPACES)


def beams_line(beams):
    """`[(text, score), ...]` -> `text<TAB>score<TAB>text<TAB>score...`, each text an
    `output_field`, scores to 4 decimals."""
    return "\t".join(f"{output_field(text)}\t{score:.4f}" for text, score in beams)


def source_target_pair(line):
    """`source<TAB>target` (a line to score) -> `(source, target)`; a ValueError saying what is
    wrong unless the line has exactly one tab."""
    fields = line.split("\t")
    if len(fields) != 2:
        raise ValueError(f"it has {len(fields) - 1} tabs; a line to score is source<TAB>target, "
                         f"with exactly one tab")
    return fields[0], fields[1]


def score_line(score, length):
    """A scored pair's output line: its log-probability to 6 decimals, a tab, its pieces."""
    return f"{score:.6f}\t{length}"
