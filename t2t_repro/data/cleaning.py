"""Cleaning users' parallel text before training, with every dropped pair counted by its rule.

Lengths are whitespace-separated words, as Moses' `clean-corpus-n.perl` counts them. A pair
counts under the first rule it breaks, in this order:

    empty             a side is empty or whitespace only (`ParallelReader` drops these)
    max_length        a side has more than `max_length` words (0: off)
    max_length_ratio  the longer side has more than `max_length_ratio` times the words of the
                      shorter (0: off)
    duplicate         the same source and target as an earlier pair (with `deduplicate`)
"""

import collections
import dataclasses
import hashlib

from t2t_repro.data.text_problem import PairSources

RULES = ("empty", "max_length", "max_length_ratio", "duplicate")


@dataclasses.dataclass(frozen=True)
class CleaningRules:
    """The rules after `empty`, with their limits; zeros and False turn a rule off."""

    max_length: int = 0
    max_length_ratio: float = 0.0
    deduplicate: bool = False

    def broken_rule(self, source, target, seen):
        """The first rule the pair breaks, or None; `seen` holds the digests of the pairs kept
        so far (for `duplicate`) and gains this pair's when it is kept."""
        lengths = len(source.split()), len(target.split())
        if self.max_length and max(lengths) > self.max_length:
            return "max_length"
        if self.max_length_ratio and max(lengths) > self.max_length_ratio * min(lengths):
            return "max_length_ratio"
        if self.deduplicate:
            digest = _pair_digest(source, target)
            if digest in seen:
                return "duplicate"
            seen.add(digest)
        return None


def _pair_digest(source, target):
    """A short, stable digest of a pair: holds millions of pairs in memory where the text
    would not fit."""
    text = f"{source}\n{target}".encode()
    return hashlib.blake2b(text, digest_size=12).digest()


class CleanedPairs(PairSources):
    """The pairs of `ParallelReader`s, one after the other, that pass `rules`; `counts()`
    says, after an iteration, how many were read, dropped by each rule, and kept."""

    def __init__(self, readers, rules):
        super().__init__(readers)
        self.rules = rules
        self._dropped = collections.Counter()

    def __iter__(self):
        self._dropped = dropped = collections.Counter()
        seen = set()
        for source, target in super().__iter__():
            rule = self.rules.broken_rule(source, target, seen)
            if rule:
                dropped[rule] += 1
            else:
                yield source, target

    def counts(self):
        """`{"lines", <each rule>, "kept"}` of the latest iteration."""
        lines = sum(reader.stats.lines for reader in self.sources)
        dropped = {"empty": sum(reader.stats.dropped for reader in self.sources),
                   **{rule: self._dropped[rule] for rule in RULES[1:]}}
        return {"lines": lines, **dropped, "kept": lines - sum(dropped.values())}

    def describe(self):
        """Each reader's line, then one line of the cleaning counts."""
        counts = self.counts()
        rules = ", ".join(f"{counts[rule]} {rule}" for rule in RULES)
        return super().describe() + [
            f"cleaning: {counts['lines']} pairs, dropped {rules}; {counts['kept']} kept"]
