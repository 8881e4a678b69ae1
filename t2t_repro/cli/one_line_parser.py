"""An argparse parser for the commands built on argparse (`bench`, `paper`): a usage error is
one line on stderr with exit status 1, as the absl commands' errors are, instead of the usage
synopsis, the error and argparse's status 2; absl's help flags work as --help."""

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose usage error names the command and the problem in one line,
    points to --help and exits with status 1, and which takes absl's --helpshort and
    --helpfull as --help. Subparsers are of this class too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.add_help:
            self.add_argument("--helpshort", "--helpfull", action="help",
                              help=argparse.SUPPRESS)

    def error(self, message):
        self.exit(1, f"error: {self.prog}: {message} (--help lists the flags)\n")
