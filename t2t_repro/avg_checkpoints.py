"""Averages the last N checkpoints of a training run, as the paper does before decoding.

    python -m t2t_repro.avg_checkpoints --output_dir=runs/ende_base --n=5
    python -m t2t_repro.avg_checkpoints --output_dir=runs/ende_big --n=20 --avg_dir=runs/big_avg
    python -m t2t_repro.avg_checkpoints --output_dir=runs/ende_base \
        --checkpoint_path=runs/ende_base/best

With --checkpoint_path (a checkpoint file, or a folder's newest such as the run's best/) the
average is of the N checkpoints ending at it: it, and the run's newest older than its step.
The average is written to `<avg_dir>/ckpt-<newest step>.weights.h5` (default avg_dir:
`<output_dir>/averaged`) beside copies of the run's hparams.json and flags.txt, so avg_dir is
itself an output_dir to decode from. The run's own checkpoints are only read.
"""

import os

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro.cli import entry_point, output_paths  # noqa: E402
from t2t_repro.cli import run_flags  # noqa: E402,F401 (--output_dir)
from t2t_repro.cli import checkpoint_flag  # noqa: E402,F401 (--checkpoint_path)
from t2t_repro.cli.entry_point import FlagAlias, apply_flag_aliases, check_usage  # noqa: E402
from t2t_repro.names import AVERAGED_SUBDIR  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_integer("n", 5, "How many of the newest checkpoints to average (paper: 5 for "
                     "base, 20 for big).", lower_bound=1)
flags.DEFINE_string("avg_dir", None, "Where the average goes (default: <output_dir>/averaged).")
flags.DEFINE_integer("num_last_checkpoints", None,
                     "tensor2tensor's name (utils/avg_checkpoints.py) for --n.", lower_bound=1)

ALIASES = (FlagAlias("num_last_checkpoints", "n"),)


def main(argv):
    from t2t_repro.training.averaging import average_run
    from t2t_repro.training.checkpoints import named_checkpoint

    checkpoint_flag.output_dir_from_checkpoint()
    check_usage(argv, ("output_dir",), hint="name the run, or give --checkpoint_path")
    apply_flag_aliases(ALIASES)
    avg_dir = FLAGS.avg_dir or os.path.join(FLAGS.output_dir, AVERAGED_SUBDIR)
    output_paths.check_output_dir(avg_dir, "--avg_dir")
    last = (named_checkpoint(FLAGS.checkpoint_path, f"--checkpoint_path={FLAGS.checkpoint_path}")
            if FLAGS.checkpoint_path else None)
    average_run(FLAGS.output_dir, avg_dir, FLAGS.n, last)


if __name__ == "__main__":
    entry_point.run(main, ("output_dir", "checkpoint_path"))
