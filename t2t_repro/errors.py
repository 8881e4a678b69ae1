"""The base of every error a user can fix: every command reports one as a single
`error: <message>` line with exit status 1, never a traceback."""


class UserError(Exception):
    """A mistake in flags, files, data or a request that the user can fix; the message names
    the problem and the fix."""


class ConfigurationError(UserError):
    """A bad flag or flag combination; the message says what to change."""
