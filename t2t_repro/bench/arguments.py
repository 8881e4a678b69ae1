"""Argument types for the benchmarks' parsers: numbers held to a range, named choices, and
comma-separated lists of them. argparse refuses a value outside it as a usage error naming the
flag, before anything is loaded, where the benchmark would otherwise fail minutes later or
measure nothing."""

import argparse

# Said by `bench --help` and `bench train --help`: the JAX benchmark's flags are its own.
JAX_HELP = ("--backend=jax runs `train` under JAX, with flags of its own: "
            "python -m t2t_repro.bench train --backend=jax --help")


def _number(kind, lowest, lowest_allowed=True):
    """An argparse type: `kind(text)`, at least `lowest` (above it if not `lowest_allowed`)."""
    wanted = (f"{'a whole number' if kind is int else 'a number'} "
              f"{'of at least' if lowest_allowed else 'above'} {lowest}")

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < lowest or (value == lowest and not lowest_allowed):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


def int_at_least(lowest):
    """An argparse type: a whole number of at least `lowest`."""
    return _number(int, lowest)


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
positive_float = _number(float, 0, lowest_allowed=False)
non_negative_float = _number(float, 0)


def one_of(*choices):
    """An argparse type: one of `choices` (strings)."""

    def parse(text):
        if text not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def comma_list(item_type, may_be_empty=False):
    """An argparse type: a comma-separated list of one or more `item_type` values (or none,
    when `may_be_empty`)."""

    def parse(text):
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items and not may_be_empty:
            raise argparse.ArgumentTypeError("names no value")
        return [item_type(item) for item in items]

    return parse
