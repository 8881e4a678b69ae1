"""argparse types of the `paper` subcommands: a bad value is a one-line usage error naming it."""

import argparse


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def positive_ints(text):
    """'16,32,64' -> (16, 32, 64): distinct positive integers, in increasing order."""
    values = sorted({positive_int(part.strip()) for part in text.split(",") if part.strip()})
    if len(values) < 2:
        raise argparse.ArgumentTypeError(
            f"expected at least two distinct positive integers separated by commas, got '{text}'")
    return tuple(values)
