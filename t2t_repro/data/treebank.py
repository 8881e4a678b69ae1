"""Penn Treebank WSJ sources for the parsing problems: `.mrg` files by section, tree files.

The treebank is licensed by the LDC and never downloaded: users copy its `.mrg` files (LDC99T42,
`parsed/mrg/wsj/SS/wsj_SSNN.mrg`, at any depth) into `tmp_dir`. A file's section is the first
two digits of its number (`wsj_0123.mrg` is in section 01). Each cleaned tree becomes one pair:
its words joined by spaces, and its linearisation joined by spaces (see `trees`).
"""

import os
import re

from t2t_repro.data.raw_text import RawDataError, read_text_lines
from t2t_repro.data.trees import clean_tree, linearise, parse_trees, read_mrg_file

_MRG_FILE = re.compile(r"wsj_(\d\d)\d\d\.mrg$", re.IGNORECASE)
_SECTIONS = range(25)


def parse_sections(spec):
    """WSJ sections of a spec like `02-21`, `00`, or `02-21,24`, as a sorted list of ints."""
    sections = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            low = high = -1
        if not (low in _SECTIONS and high in _SECTIONS and low <= high):
            raise RawDataError(
                f"bad WSJ section spec '{spec}': use sections 00-24 as '02-21', '00' or '02-21,24'."
            )
        sections.update(range(low, high + 1))
    if not sections:
        raise RawDataError(f"WSJ section spec '{spec}' names no sections.")
    return sorted(sections)


def treebank_files(tmp_dir):
    """`{section: [paths of its .mrg files, sorted]}` of every `wsj_SSNN.mrg` under `tmp_dir`."""
    by_section = {}
    for directory, _, names in os.walk(tmp_dir or "", followlinks=True):
        for name in names:
            match = _MRG_FILE.match(name)
            if match:
                by_section.setdefault(int(match.group(1)), []).append(os.path.join(directory, name))
    return {section: sorted(paths, key=os.path.basename) for section, paths in by_section.items()}


def tree_pair(tree):
    """`(words, linearised tree)` text of a cleaned tree."""
    return " ".join(tree.words()), " ".join(linearise(tree))


class TreebankPairs:
    """The pairs of the trees in some WSJ sections under `tmp_dir` (re-iterable)."""

    def __init__(self, tmp_dir, section_spec):
        self.section_spec = section_spec
        sections = parse_sections(section_spec)
        found = treebank_files(tmp_dir)
        self.paths = [path for section in sections for path in found.get(section, [])]
        if not self.paths:
            raise RawDataError(
                f"No Penn Treebank .mrg files of WSJ sections {section_spec} under "
                f"--tmp_dir={tmp_dir or '(none given)'} (sections found there: "
                f"{', '.join(f'{s:02d}' for s in sorted(found)) or 'none'}). The treebank is "
                f"licensed by the LDC (LDC99T42) and never downloaded: copy its "
                f"parsed/mrg/wsj/ folders (files wsj_SSNN.mrg, at any depth) into --tmp_dir, "
                f"or choose other sections with --data_hparams=train_sections=..,eval_sections=.."
            )
        self.trees = self.dropped = 0

    def __iter__(self):
        self.trees = self.dropped = 0
        for path in self.paths:
            for tree in read_mrg_file(path):
                yield from self._pair(tree)

    def _pair(self, tree):
        self.trees += 1
        cleaned = clean_tree(tree)
        if cleaned is None:
            self.dropped += 1
        else:
            yield tree_pair(cleaned)

    def describe(self):
        return (f"{len(self.paths)} .mrg files of WSJ sections {self.section_spec}: "
                f"{self.trees} trees, {self.dropped} empty after cleaning dropped")


class TreeLinePairs(TreebankPairs):
    """The pairs of a file of extra parsed sentences, one bracketed tree per line (re-iterable)."""

    def __init__(self, path):
        if not os.path.exists(path):
            raise RawDataError(
                f"No extra parsed sentences at {path}: the semi-supervised problem expects "
                f"one bracketed tree per line there (PTB format, as a parser prints them), "
                f"named by the extra_trees_file data hparam."
            )
        self.paths = [path]
        self.trees = self.dropped = 0

    def __iter__(self):
        self.trees = self.dropped = 0
        for line in read_text_lines(self.paths[0]):
            if line.strip():
                for tree in parse_trees(line):
                    yield from self._pair(tree)

    def describe(self):
        return f"{self.paths[0]}: {self.trees} trees, {self.dropped} empty after cleaning dropped"
