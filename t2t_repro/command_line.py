"""The usage checks every `python -m t2t_repro.<command>` makes before any work."""

import sys

from absl import flags


def exit_on_usage_errors(argv, required_flags=(), hint="see --help"):
    """Exits with a one-line error when there are positional arguments (absl leaves anything
    that is not `--name=value` in argv) or a flag of `required_flags` is unset."""
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; flags look like --name=value.")
    missing = [name for name in required_flags if not flags.FLAGS[name].value]
    if missing:
        sys.exit(f"error: missing {', '.join('--' + name for name in missing)}; {hint}.")
