"""The base of every error a user can fix: every command reports one as a single
`error: <message>` line with exit status 1, never a traceback."""

import numbers


class UserError(Exception):
    """A mistake in flags, files, data or a request that the user can fix; the message names
    the problem and the fix."""


class ConfigurationError(UserError):
    """A bad flag or flag combination; the message says what to change."""


def layer_choices(count):
    """The layer indices a flag or hparam may give for a stack of `count` layers, as an error
    message names them: "0 to N, or -1 for the last" ("0, or -1 for the last" for one)."""
    return f"{'0' if count == 1 else f'0 to {count - 1}'}, or -1 for the last"


def is_whole_number(value):
    """Whether `value` is an integer (NumPy's included) and not a bool, as a count or size
    given from Python must be."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
