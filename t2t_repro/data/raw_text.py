"""Readers for the raw translation corpora users put in `--tmp_dir`.

Plain parallel text, WMT's SGM files and WMT's .tgz/.tar archives (whose members may be
gzipped) are all read as streams of lines: a corpus of millions of sentences is never held in
memory and an archive is never extracted to disk.
"""

import dataclasses
import gzip
import itertools
import os
import random
import re
import tarfile

from t2t_repro.utils.text_lines import TextLinesError, iter_lines
from t2t_repro.errors import UserError

# How many of an archive's member names a missing-member error lists.
_MEMBER_NAMES_SHOWN = 10


class RawDataError(UserError, ValueError):
    """A raw corpus that cannot be read as asked; the message names the files and counts."""


class MissingRawDataError(RawDataError):
    """None of a split's accepted raw files are present: a download could supply them."""


@dataclasses.dataclass(frozen=True)
class ArchiveMember:
    """One file inside a .tgz, .tar.gz or .tar archive, read in place."""

    archive_path: str | os.PathLike
    member_name: str

    def __str__(self):
        return f"{self.member_name} (in {os.fspath(self.archive_path)})"


def _is_gzip(name):
    return name.endswith(".gz")


def _is_sgm(name):
    return name.endswith((".sgm", ".sgm.gz"))


def _label(source):
    """How messages name a source: its path, or its member and archive."""
    return str(source) if isinstance(source, ArchiveMember) else os.fspath(source)


def _decoded_lines(binary, name, label):
    """UTF-8 lines of a binary stream called `name` (gunzipped if .gz), without line endings,
    split by the rule of `t2t_repro.utils.text_lines` that the decoder and BLEU command share."""
    if _is_gzip(name):
        binary = gzip.GzipFile(fileobj=binary)
    try:
        yield from iter_lines(binary, label)
    except TextLinesError as error:
        raise RawDataError(str(error)) from error


def read_text_lines(path):
    """Yields the lines of a plain or .gz UTF-8 file, other whitespace kept as is."""
    name = os.fspath(path)
    with open(name, "rb") as binary:
        yield from _decoded_lines(binary, name, name)


# WMT's SGM files are not real SGML or XML: one <seg> per line and text left unescaped (they
# hold bare "&" and the odd "<"), so a markup parser would reject or alter them. The test sets
# are scored by sacreBLEU, so we read segments exactly as sacreBLEU 2.x does
# (sacrebleu/dataset/fake_sgml.py, FakeSGMLDataset._convert_format, and Dataset._clean in
# sacrebleu/dataset/base.py):
# - a segment is a line that starts with "<seg " in its first column; other lines are markup;
# - its text runs from the first ">" to the last "</seg>" on the line; text after that "</seg>"
#   is kept, and a line without "</seg>" is kept whole, tags included;
# - entities are not decoded ("&amp;" stays "&amp;", a bare "&" stays "&");
# - the text is stripped and every run of (Unicode) whitespace becomes one space.
_SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>")


def _segment_text(line):
    """The text of one `<seg ...>` line, by sacreBLEU's rule above."""
    match = _SEGMENT.match(line)
    text = match.group(1) + line[match.end() :] if match else line
    return " ".join(text.split())


def _sgm_segments(lines):
    for line in lines:
        if line.startswith("<seg "):
            yield _segment_text(line)


def read_sgm_segments(path):
    """Yields the text of each `<seg>` of a WMT .sgm or .sgm.gz file, in file order."""
    return _sgm_segments(read_text_lines(path))


def _find_member(archive, member):
    """The archive's regular file named `member.member_name`, reading headers only up to it."""
    present = []
    for info in archive:
        if info.isfile():
            if info.name == member.member_name:
                return info
            present.append(info.name)
    shown = ", ".join(present[:_MEMBER_NAMES_SHOWN])
    more = f", ... ({len(present)} in all)" if len(present) > _MEMBER_NAMES_SHOWN else ""
    raise RawDataError(
        f"Archive {os.fspath(member.archive_path)} has no member {member.member_name!r}; "
        f"its {len(present)} files include: {shown}{more}"
    )


def read_member_lines(member):
    """Yields the lines of one archive member, streamed out of the archive.

    The member is gunzipped if its name ends in .gz and read as SGM segments if it ends in
    .sgm or .sgm.gz; raises RawDataError if the archive has no such file.
    """
    with tarfile.open(member.archive_path, "r:*") as archive:
        binary = archive.extractfile(_find_member(archive, member))
        lines = _decoded_lines(binary, member.member_name, str(member))
        yield from _sgm_segments(lines) if _is_sgm(member.member_name) else lines


def open_lines(source):
    """Lines of a source: an ArchiveMember, or a path (.sgm/.sgm.gz read as SGM segments)."""
    if isinstance(source, ArchiveMember):
        return read_member_lines(source)
    if _is_sgm(os.fspath(source)):
        return read_sgm_segments(source)
    return read_text_lines(source)


@dataclasses.dataclass
class ParallelStats:
    """Counts from reading a parallel corpus; a pair with both sides empty counts on each."""

    lines: int = 0
    empty_input: int = 0
    empty_target: int = 0
    kept: int = 0

    @property
    def dropped(self):
        return self.lines - self.kept


_MISSING = object()


class ParallelReader:
    """The (input, target) pairs of two line-aligned sources, streamed, with counts.

    Iterating yields each pair as it is read, skipping pairs where either side is empty or
    whitespace-only; `stats` counts what the latest iteration has read so far. Sources of
    different lengths raise RawDataError, with both true line counts, when the shorter ends:
    silently zipping them would pair sentences that are not translations of each other.

    Args:
        source_input: path or ArchiveMember of the input-language side (see `open_lines`).
        source_target: path or ArchiveMember of the target-language side.

    Example:
        reader = ParallelReader("train.en", "train.de")
        pairs = list(reader)
        print(reader.describe())  # train.en / train.de: 29000 lines, 29000 kept, ...
    """

    def __init__(self, source_input, source_target):
        self.source_input = source_input
        self.source_target = source_target
        self.stats = ParallelStats()

    def __iter__(self):
        self.stats = stats = ParallelStats()
        inputs = open_lines(self.source_input)
        targets = open_lines(self.source_target)
        for input_text, target_text in itertools.zip_longest(inputs, targets, fillvalue=_MISSING):
            if input_text is _MISSING:
                self._raise_misaligned(stats.lines, stats.lines + 1 + sum(1 for _ in targets))
            if target_text is _MISSING:
                self._raise_misaligned(stats.lines + 1 + sum(1 for _ in inputs), stats.lines)
            stats.lines += 1
            input_empty = not input_text.strip()
            target_empty = not target_text.strip()
            stats.empty_input += input_empty
            stats.empty_target += target_empty
            if not (input_empty or target_empty):
                stats.kept += 1
                yield input_text, target_text

    def _raise_misaligned(self, input_lines, target_lines):
        raise RawDataError(
            f"Parallel sources are misaligned: {_label(self.source_input)} has {input_lines} "
            f"lines but {_label(self.source_target)} has {target_lines} lines."
        )

    def describe(self):
        """One line for logs: the two sources and what was kept and dropped."""
        stats = self.stats
        return (
            f"{_label(self.source_input)} / {_label(self.source_target)}: {stats.lines} lines, "
            f"{stats.kept} kept, {stats.dropped} dropped as empty "
            f"(input {stats.empty_input}, target {stats.empty_target})"
        )


def reservoir_sample(iterable, size, seed):
    """A uniform random sample of `size` items from a stream of unknown length.

    Every item is equally likely to be chosen (Vitter's algorithm R), holding only `size` items
    in memory. Returns a list of min(size, stream length) items in an order that is random but,
    like the choice itself, fixed by `seed`; a stream no longer than `size` comes back whole
    and in order.
    """
    if size < 0:
        raise ValueError(f"Sample size must be non-negative, got {size}.")
    rng = random.Random(seed)
    sample = []
    for index, item in enumerate(iterable):
        if index < size:
            sample.append(item)
        else:
            slot = rng.randrange(index + 1)
            if slot < size:
                sample[slot] = item
    return sample
