"""What the entry points that read a trained model share (decoder, exporter): --checkpoint_path,
loading the weights, and reporting a user's mistake as one `error: ...` line."""

import os
import sys

from absl import flags

from t2t_repro import model_flags, problem_flags
from t2t_repro.model_flags import ConfigurationError

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoint_path", None,
                    "Checkpoint file or directory (its latest checkpoint); default: the latest "
                    "in --output_dir.")


def resolve_checkpoint():
    """The checkpoint file --checkpoint_path (or --output_dir) names."""
    from t2t_repro.training.checkpoints import latest_checkpoint

    path = FLAGS.checkpoint_path or FLAGS.output_dir
    if os.path.isfile(path):
        return path
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise ConfigurationError(
            f"no checkpoint (ckpt-<step>.weights.h5) in {path}; train first, or point "
            f"--checkpoint_path at a checkpoint file or a directory holding one."
        )
    return checkpoint


def resolve_hparams():
    """The run's hparams (saved in --output_dir, or the flags checked against them), after
    checking --model."""
    hparams = model_flags.resolve_hparams(FLAGS.output_dir, saved_suffices=True)
    model_flags.check_model_name()
    return hparams


def load_model(problem, hparams):
    """`(checkpoint path, model with its weights)` for --model and --checkpoint_path."""
    from t2t_repro.training.run import load_trained_model

    checkpoint = resolve_checkpoint()
    return checkpoint, load_trained_model(FLAGS.model, hparams, problem, checkpoint)


def run_reporting_errors(run, *more_errors):
    """Calls `run()`; a configuration, registry, hparams, file or data error (or one of
    `more_errors`) exits with `error: <message>` instead of a traceback."""
    from t2t_repro.hparams import HParamsError
    from t2t_repro.registry import RegistryError

    try:
        run()
    except (ConfigurationError, RegistryError, HParamsError, OSError,
            *problem_flags.data_errors(), *more_errors) as error:
        sys.exit(f"error: {error}")
