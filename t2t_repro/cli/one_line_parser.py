"""An argparse parser for the commands built on argparse (`bench`, `paper`): a usage error is
one line on stderr, as the absl commands' errors are, instead of the usage synopsis and then
the error."""

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose usage error names the command and the problem in one line
    and points to --help, with argparse's exit status 2. Subparsers are of this class too."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message} (--help lists the flags)\n")
