"""The decoder's model: one checkpoint, or with `--checkpoint_path=A,B,...` an ensemble of
several (each a run's folder, a folder of checkpoints such as `<run>/best` or avg_checkpoints'
output, or a checkpoint file).

Each member is built with the hparams of the run it belongs to (the `hparams.json` beside its
checkpoint or in the folder above; else those stored in the checkpoint; else --output_dir's),
so members may differ in size. Their vocabularies must be one: a member whose run was trained
on another vocabulary file is an error naming both, before any weights are loaded.
"""

import os

from absl import flags

from t2t_repro import hparams as hparams_lib
from t2t_repro.cli import checkpoint_flag, trained_run
from t2t_repro.errors import ConfigurationError
from t2t_repro.training.run_records import run_dir_of

FLAGS = flags.FLAGS


def ensemble_paths():
    """The members --checkpoint_path names when it names several (comma-separated), else None."""
    path = FLAGS.checkpoint_path
    if not path or "," not in path:
        return None
    return [member.strip() for member in path.split(",")]


def member_checkpoint(path):
    """The checkpoint file a member names: itself, or the newest in its folder."""
    from t2t_repro.training.checkpoints import named_checkpoint

    if not path or not os.path.exists(path):
        raise ConfigurationError(f"--checkpoint_path member {path!r} does not exist; name runs, "
                                 f"folders of checkpoints or checkpoint files, comma-separated.")
    if os.path.isfile(path):
        checkpoint_flag.check_checkpoint_file(path, f"--checkpoint_path member {path}")
    return named_checkpoint(path)


def load_decoding_model(problem, hparams):
    """`(what was loaded, model)`: the checkpoint and its Transformer, or for several members
    their checkpoints and their `Ensemble`."""
    from t2t_repro.decoding.ensemble import Ensemble
    from t2t_repro.training.checkpoints import stored_hparams
    from t2t_repro.training.run import load_trained_model

    paths = ensemble_paths()
    if paths is None:
        return trained_run.load_model(problem, hparams)
    members = []
    for path in paths:
        checkpoint = member_checkpoint(path)
        run_dir = run_dir_of(checkpoint)
        if run_dir is not None:
            trained_run.check_run_vocabulary(f"--checkpoint_path member {path}", run_dir,
                                             problem)
        members.append((path, checkpoint, run_dir))
    models = []
    for path, checkpoint, run_dir in members:
        member_hparams = (hparams_lib.load(run_dir) if run_dir is not None else
                          stored_hparams(checkpoint) or hparams)
        models.append(load_trained_model(FLAGS.model, member_hparams, problem, checkpoint))
    description = f"an ensemble of {', '.join(checkpoint for _, checkpoint, _ in members)}"
    return description, Ensemble(models, names=paths)
