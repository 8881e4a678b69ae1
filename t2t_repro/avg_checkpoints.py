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

import json
import os

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro.cli import entry_point, run_flags  # noqa: E402,F401 (run_flags: --output_dir)
from t2t_repro.cli import checkpoint_flag  # noqa: E402,F401 (--checkpoint_path)
from t2t_repro.utils.atomic_files import write_text_atomically  # noqa: E402
from t2t_repro.cli.entry_point import FlagAlias, apply_flag_aliases, check_usage  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402
from t2t_repro.hparams import HPARAMS_FILENAME  # noqa: E402
from t2t_repro.names import FLAGS_FILENAME  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_integer("n", 5, "How many of the newest checkpoints to average (paper: 5 for "
                     "base, 20 for big).", lower_bound=1)
flags.DEFINE_string("avg_dir", None, "Where the average goes (default: <output_dir>/averaged).")
flags.DEFINE_integer("num_last_checkpoints", None,
                     "tensor2tensor's name (utils/avg_checkpoints.py) for --n.", lower_bound=1)

ALIASES = (FlagAlias("num_last_checkpoints", "n"),)

# The trainer's (t2t_repro.trainer defines flags of the same names, so it is not imported).


def copy_run_config(output_dir, avg_dir):
    """Copies hparams.json and flags.txt; flags.txt's --output_dir is pointed at avg_dir, so
    `--flagfile=<avg_dir>/flags.txt` loads the average rather than the run's last checkpoint."""
    hparams_path = os.path.join(output_dir, HPARAMS_FILENAME)
    if os.path.exists(hparams_path):
        with open(hparams_path, encoding="utf-8") as f:
            write_text_atomically(os.path.join(avg_dir, HPARAMS_FILENAME), f.read())
    flags_path = os.path.join(output_dir, FLAGS_FILENAME)
    if os.path.exists(flags_path):
        with open(flags_path) as f:
            lines = f.read().splitlines()
        lines = [f"--output_dir={avg_dir}" if line.startswith("--output_dir=") else line
                 for line in lines]
        write_text_atomically(os.path.join(avg_dir, FLAGS_FILENAME),
                              "".join(line + "\n" for line in lines))


def ending_at(found, last):
    """The run's `[(step, path)]` checkpoints `found` that come before the checkpoint file
    `last` (its best/ copy, say), then `last` itself."""
    from t2t_repro.training import checkpoints

    step = checkpoints.checkpoint_step(last)
    if step is None:
        raise ConfigurationError(f"--checkpoint_path names {last}, which is no "
                                 f"ckpt-<step>.weights.h5: its step orders the average.")
    return [(older, path) for older, path in found if older < step] + [(step, last)]


def average_last(output_dir, n, avg_dir, last=None):
    """Averages the newest `n` checkpoints of `output_dir` (with `last`, a checkpoint file:
    the `n` ending at it) into `avg_dir`; returns its path."""
    from t2t_repro.training import checkpoints
    from t2t_repro.training.averaging import average_checkpoints

    if os.path.realpath(avg_dir) == os.path.realpath(output_dir):
        raise ConfigurationError("--avg_dir must differ from --output_dir: the average would "
                                 "replace the run's newest checkpoint.")
    if not os.path.isdir(output_dir):
        raise ConfigurationError(f"--output_dir {output_dir} does not exist.")
    found = checkpoints.list_checkpoints(output_dir)
    if last is not None:
        found = ending_at(found, last)
    if not found:
        raise ConfigurationError(f"No checkpoints (ckpt-<step>.weights.h5) in {output_dir}.")
    if len(found) < n:
        print(f"Only {len(found)} checkpoint(s) in {output_dir}, fewer than --n={n}; "
              f"averaging all of them.")
    chosen = found[-n:]
    newest_step = chosen[-1][0]
    path = average_checkpoints(
        [path for _, path in chosen], checkpoints.checkpoint_path(avg_dir, newest_step)
    )
    copy_run_config(output_dir, avg_dir)
    write_text_atomically(os.path.join(avg_dir, checkpoints.AVERAGED_MARKER), json.dumps({
        "averaged_from": os.path.abspath(output_dir),
        "steps": [step for step, _ in chosen]}) + "\n")
    print(f"Averaged {len(chosen)} checkpoint(s) of {output_dir}, steps "
          f"{', '.join(str(step) for step, _ in chosen)}, into {path}.")
    return path


def main(argv):
    from t2t_repro.training.checkpoints import named_checkpoint

    check_usage(argv, ("output_dir",))
    apply_flag_aliases(ALIASES)
    avg_dir = FLAGS.avg_dir or os.path.join(FLAGS.output_dir, "averaged")
    last = named_checkpoint(FLAGS.checkpoint_path) if FLAGS.checkpoint_path else None
    average_last(FLAGS.output_dir, FLAGS.n, avg_dir, last)


if __name__ == "__main__":
    entry_point.run(main)
