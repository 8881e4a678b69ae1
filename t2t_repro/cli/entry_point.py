"""How every `python -m t2t_repro.<command>` starts and ends: its flags parsed by absl, the
usage checks made before any work, tensor2tensor's flag names accepted as aliases of ours, and
a user's mistake reported as one line."""

import functools
import gc
import io
import os
import signal
import sys
from typing import Callable, NamedTuple

from absl import app, flags

from t2t_repro.errors import ConfigurationError, UserError
from t2t_repro.names import PATH_FLAGS


# The exit status of a command stopped by Ctrl-C, as a shell reports one killed by SIGINT.
INTERRUPTED_EXIT_STATUS = 128 + 2
# ... and by SIGTERM, how a scheduler or `kill` stops a job.
TERMINATED_EXIT_STATUS = 128 + 15


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is as Ctrl-C's KeyboardInterrupt is, so that it stops
    the same way: its files written whole or not at all, and what it left said in one line
    (the trainer: the checkpoint it resumes from)."""


def _raise_terminated(signum, frame):
    raise Terminated()


def report_user_errors(main):
    """`main` that reports a UserError, or a file that cannot be read or written (OSError), as
    `error: <message>` and exit status 1 instead of a traceback; Ctrl-C as `interrupted`, with
    what the command left if it says (the KeyboardInterrupt's message), and exit status 130;
    SIGTERM (`Terminated`) as `terminated`, and 143. Path flags are read with `~` expanded
    first (`expand_home`)."""

    @functools.wraps(main)
    def main_reporting_user_errors(argv):
        try:
            expand_home(flags.FLAGS)
            return main(argv)
        except (UserError, OSError) as error:
            sys.exit(f"error: {one_line(error)}")
        except KeyboardInterrupt as interrupt:
            terminated = isinstance(interrupt, Terminated)
            print(f"{'terminated' if terminated else 'interrupted'}"
                  f"{': ' if str(interrupt) else ''}{interrupt}", file=sys.stderr)
            sys.exit(TERMINATED_EXIT_STATUS if terminated else INTERRUPTED_EXIT_STATUS)

    return main_reporting_user_errors


def expand_home(flag_values):
    """Expands a leading `~` (or `~user`) in every path flag's value, as tensor2tensor's
    commands did: a shell leaves `--output_dir=~/runs/x` as it is, and the path would name a
    folder `~` in the working folder."""
    for name in PATH_FLAGS:
        if name not in flag_values or not flag_values[name].value:
            continue
        value = flag_values[name].value
        if isinstance(value, str):
            expanded = ",".join(os.path.expanduser(path) for path in value.split(","))
        else:
            expanded = [os.path.expanduser(path) for path in value]
        if expanded != value:
            flag_values[name].value = expanded


def one_line(error):
    """The error's message on one line: text a library put into it (a YAML parser's message
    points at the place on lines of its own) joined with spaces."""
    return " ".join(line.strip() for line in str(error).strip().splitlines())


def run(main, key_flags=()):
    """The entry point of a command: absl parses the flags, then `main(argv)` runs with user
    errors reported as one line. `key_flags`: the flags the command reads that other modules
    define (`--output_dir`, `--problem` ...), which --help and --helpshort then list beside its
    own (absl lists only the main module's).

    What the command's imports made (TensorFlow's and Keras's hundreds of thousands of objects,
    alive as long as the process) is first frozen out of the garbage collector's full passes,
    which would otherwise walk it again and again while the first graphs are traced: a short
    decode takes about a quarter less time, a tiny training run a tenth (docs/performance.md,
    "Start-up").

    Standard output is written in UTF-8, as every command reads text, whatever the locale's
    encoding: in an ASCII or Latin-1 locale a translation would otherwise stop the command
    with a UnicodeEncodeError at its first character outside that encoding.

    SIGTERM stops a command as Ctrl-C does (`Terminated`), not at once with nothing said."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    for name in key_flags:  # absl names the main module's flags by its file, sys.argv[0]
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])
    gc.freeze()
    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.encoding != "utf-8":
        sys.stdout.reconfigure(encoding="utf-8")
    app.run(report_user_errors(main), flags_parser=parse_flags)


def parse_flags(argv):
    """absl's flag parsing, with a flag it cannot read (unknown, mistyped, out of its bounds)
    reported as every other mistake is: `error: <message>` on one line and exit status 1, where
    absl prints two lines beginning "FATAL"."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        sys.exit(f"error: {one_line(error)} (see --helpshort){_flagfile_giving(error, argv)}")
    except UnicodeDecodeError as error:  # absl reads a --flagfile as text
        path = flagfile_holding(None, argv[1:])
        sys.exit(f"error: a --flagfile{f' ({path})' if path else ''} is not UTF-8 text "
                 f"({error}); save it as UTF-8.")


def _flagfile_giving(error, argv):
    """"; <file> gives it: remove that line" when `error` names an unknown flag that a
    --flagfile gives rather than the command line (a run's flags.txt naming a removed flag);
    else ""."""
    name = getattr(error, "flagname", None)  # absl's UnrecognizedFlagError has one
    if not name or f"--{name}" in (argument.split("=")[0] for argument in argv[1:]):
        return ""
    holder = flagfile_holding(lambda line: line.lstrip("-").split("=")[0] == name, argv[1:])
    return f"; {holder} gives it: remove that line" if holder else ""


def _flagfiles(arguments):
    """The files `arguments` name with --flagfile, in either form absl reads."""
    files = []
    for argument, following in zip(arguments, [*arguments[1:], ""]):
        name, given, value = argument.partition("=")
        if name in ("--flagfile", "-flagfile"):
            files.append(value if given else following)
    return files


def flagfile_holding(is_the_line, arguments):
    """The first file a --flagfile of `arguments` names with a line (stripped) for which
    `is_the_line` is true; with `is_the_line` None, the first that is not UTF-8 text. None when
    none does (a file nested in another is not searched)."""
    for path in _flagfiles(arguments):
        try:
            with open(path, encoding="utf-8") as f:
                lines = [line.strip() for line in f]
        except UnicodeDecodeError:
            if is_the_line is None:
                return path
            continue
        except OSError:
            continue
        if is_the_line is not None and any(map(is_the_line, lines)):
            return path
    return None


def check_usage(argv, required_flags=(), hint="see --help"):
    """Raises ConfigurationError when there are positional arguments (absl leaves anything
    that is not `--name=value` in argv) or a flag of `required_flags` is unset."""
    if len(argv) > 1:
        read = [argument for argument in argv[1:] if argument not in sys.argv[1:]]
        holder = read and flagfile_holding(lambda line: line == read[0], sys.argv[1:])
        where = (f" ({holder} has {read[0]!r} on a line: make it a flag, or a comment with #)"
                 if holder else "")
        raise ConfigurationError(
            f"unexpected arguments {argv[1:]}; flags look like --name=value{where}.")
    missing = [name for name in required_flags if not flags.FLAGS[name].value]
    if missing:
        raise ConfigurationError(f"missing {', '.join('--' + name for name in missing)}; {hint}.")


class FlagAlias(NamedTuple):
    """tensor2tensor's name `name` for our flag `canonical`; `convert` maps its value to ours
    (e.g. seconds to minutes)."""

    name: str
    canonical: str
    convert: Callable = lambda value: value


def apply_flag_aliases(aliases, flag_values=flags.FLAGS):
    """Copies each alias given on the command line into its canonical flag, through the
    canonical flag's parser so that its bounds hold for the alias too; raises
    ConfigurationError when both are given with different meanings, or the value is out of the
    canonical flag's bounds."""
    for alias in aliases:
        given = flag_values[alias.name]
        if not given.present:
            continue
        value = alias.convert(given.value)
        canonical = flag_values[alias.canonical]
        named = f"--{alias.name}={given.value} (tensor2tensor's name for --{alias.canonical}"
        if canonical.present and canonical.value != value:
            raise ConfigurationError(f"{named}, i.e. --{alias.canonical}={value}) contradicts "
                                     f"--{alias.canonical}={canonical.value}; give only one of "
                                     f"them.")
        try:
            canonical.value = canonical.parser.parse(value)
        except ValueError as error:  # absl's parsers: a value out of the flag's bounds
            raise ConfigurationError(f"{named}): {error}.") from None
