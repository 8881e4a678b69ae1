"""The usage checks every `python -m t2t_repro.<command>` makes before any work, and the
tensor2tensor flag names accepted as aliases of ours."""

import sys
from typing import Callable, NamedTuple

from absl import flags


def exit_on_usage_errors(argv, required_flags=(), hint="see --help"):
    """Exits with a one-line error when there are positional arguments (absl leaves anything
    that is not `--name=value` in argv) or a flag of `required_flags` is unset."""
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; flags look like --name=value.")
    missing = [name for name in required_flags if not flags.FLAGS[name].value]
    if missing:
        sys.exit(f"error: missing {', '.join('--' + name for name in missing)}; {hint}.")


class FlagAlias(NamedTuple):
    """tensor2tensor's name `name` for our flag `canonical`; `convert` maps its value to ours
    (e.g. seconds to minutes)."""

    name: str
    canonical: str
    convert: Callable = lambda value: value


def apply_flag_aliases(aliases, flag_values=flags.FLAGS):
    """Copies each alias given on the command line into its canonical flag; exits with a
    one-line error when both are given with different meanings."""
    for alias in aliases:
        given = flag_values[alias.name]
        if not given.present:
            continue
        value = alias.convert(given.value)
        canonical = flag_values[alias.canonical]
        if canonical.present and canonical.value != value:
            sys.exit(f"error: --{alias.name}={given.value} (tensor2tensor's name for "
                     f"--{alias.canonical}, i.e. --{alias.canonical}={value}) contradicts "
                     f"--{alias.canonical}={canonical.value}; give only one of them.")
        canonical.value = value
