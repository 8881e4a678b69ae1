"""--checkpoint_path, shared by the commands that read a trained run's weights (decoder,
exporter, visualize, the CTranslate2 conversion) and by avg_checkpoints, so defined once here;
without --output_dir, one checkpoint names the run it belongs to."""

import os
import sys

from absl import flags

from t2t_repro.cli import run_flags  # noqa: F401 (--output_dir)
from t2t_repro.errors import ConfigurationError

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoint_path", None,
                    "Checkpoint file or directory (its latest checkpoint), such as "
                    "<output_dir>/best or avg_checkpoints' output; default: the latest in "
                    "--output_dir, which defaults to the run this names. avg_checkpoints "
                    "averages the --n checkpoints ending at it.")


def check_checkpoint_file(path, flag):
    """Raises ConfigurationError unless `path` is a checkpoint as training and avg_checkpoints
    write them: Keras weights in HDF5, named `*.weights.h5` (Keras loads nothing else)."""
    import h5py

    if not (path.endswith(".weights.h5") and h5py.is_hdf5(path)):
        raise ConfigurationError(
            f"{flag}={path} is not a checkpoint (Keras weights in HDF5, named "
            f"ckpt-<step>.weights.h5); name a checkpoint file, or a directory holding one.")


def resolve_checkpoint():
    """The checkpoint file --checkpoint_path (or --output_dir) names."""
    from t2t_repro.training.checkpoints import named_checkpoint

    path = FLAGS.checkpoint_path or FLAGS.output_dir
    if "," in path:
        raise ConfigurationError(f"--checkpoint_path={path} names several checkpoints (an "
                                 f"ensemble), which only the decoder takes; name one.")
    if os.path.isfile(path):
        check_checkpoint_file(
            path, "--checkpoint_path" if FLAGS.checkpoint_path else "--output_dir")
    return named_checkpoint(path)


def output_dir_from_checkpoint():
    """Sets --output_dir, when it is not given, from the one checkpoint --checkpoint_path
    names: the run it belongs to (its hparams.json beside it or one folder above, as in
    `<run>/best`), else the folder holding it; and says so in one line. Several checkpoints
    (an ensemble) may belong to several runs, so they name none."""
    from t2t_repro.training.run_records import run_dir_of

    named = FLAGS.checkpoint_path
    if FLAGS.output_dir or not named or "," in named:
        return
    checkpoint = resolve_checkpoint()
    run_dir = run_dir_of(checkpoint)
    if run_dir:
        FLAGS.output_dir = run_dir
        print(f"Using --output_dir={run_dir}, the run --checkpoint_path={named} belongs to.",
              file=sys.stderr)
    else:
        FLAGS.output_dir = os.path.dirname(os.path.abspath(checkpoint))
        print(f"Using --output_dir={FLAGS.output_dir}, the folder holding {checkpoint}.",
              file=sys.stderr)
