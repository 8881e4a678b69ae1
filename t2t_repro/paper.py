"""Checks this implementation against figures printed in the paper.

    python -m t2t_repro.paper table3 [--vocab_size N] ...    (t2t_repro/tables/parameter_counts.py)
    python -m t2t_repro.paper table1 [--plot FILE.png] ...   (t2t_repro/tables/layer_complexity.py)
    python -m t2t_repro.paper table2 ...                     (t2t_repro/tables/training_cost.py)

Each table's module computes it, adds its subcommand's arguments and prints it; this command
only dispatches.
"""

import os
import sys

# Table 1's memory column reads the CPU allocator's peak, which TensorFlow's default CPU allocator
# does not track on every CPU (AVX2 EPYCs, without oneDNN); its BFC allocator always does.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

from t2t_repro.cli import quiet_tensorflow  # noqa: E402

# Before the tables, whose imports import Keras and with it TensorFlow: its start-up lines
# would precede the table.
quiet_tensorflow.import_tensorflow()

from t2t_repro.cli.entry_point import report_user_errors  # noqa: E402
from t2t_repro.cli.one_line_parser import OneLineErrorParser  # noqa: E402
from t2t_repro.tables import layer_complexity, parameter_counts, training_cost  # noqa: E402

_TABLE1 = ("Table 1 measured here: time and memory of one self-attention, restricted "
           "self-attention, recurrent and convolutional layer against n, with growth exponents")
_TABLE2 = ("Table 2's training cost: FLOPs of base and big counted from the model, beside the "
           "paper's estimate")

# (command, module, help, description), in the order `--help` lists them.
_TABLES = (
    ("table3", parameter_counts,
     "parameter counts of every Table 3 row, built as Keras models, vs the paper",
     "Build every Table 3 model and compare its parameter count with the paper."),
    ("table1", layer_complexity, _TABLE1, _TABLE1),
    ("table2", training_cost, _TABLE2, _TABLE2),
)


def _parser():
    parser = OneLineErrorParser(
        prog="python -m t2t_repro.paper",
        description="Compare this implementation with figures printed in the paper.",
    )
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, module, summary, description in _TABLES:
        table_parser = commands.add_parser(name, help=summary, description=description)
        module.add_arguments(table_parser)
        table_parser.set_defaults(run=module.run)
    return parser


def main(argv=None):
    """Runs the command line `argv` (default: sys.argv[1:]); returns the exit status. Bad
    input, a user error and Ctrl-C end it as they end every command (one line, status 1 or
    130)."""
    args = _parser().parse_args(argv)
    return report_user_errors(lambda _: args.run(args))(argv)


if __name__ == "__main__":
    sys.exit(main())
