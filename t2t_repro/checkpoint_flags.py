"""The --checkpoint_path flag of the entry points that read trained weights (decoder, exporter)."""

import os

from absl import flags

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
