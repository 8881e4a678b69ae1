"""The decoder's model: one checkpoint, or with `--checkpoint_path=A,B,...` an ensemble of
several (each a run's folder, a folder of checkpoints such as `<run>/best` or avg_checkpoints'
output, or a checkpoint file).

Each member is built with the hparams of the run it belongs to (the `hparams.json` beside its
checkpoint or in the folder above; else those stored in the checkpoint; else --output_dir's),
so members may differ in size. Their vocabularies must be one: a member whose run was trained
on another vocabulary file is an error naming both, before any weights are loaded.
"""

from absl import flags

from t2t_repro import hparams as hparams_lib
from t2t_repro.cli import checkpoint_flag, trained_run
from t2t_repro.training.run_records import run_dir_of

FLAGS = flags.FLAGS


def load_decoding_model(problem, hparams):
    """`(what was loaded, model)`: the checkpoint and its Transformer, or for several members
    their checkpoints and their `Ensemble`."""
    from t2t_repro.decoding.ensemble import Ensemble
    from t2t_repro.training.checkpoints import stored_hparams
    from t2t_repro.training.run import load_trained_model

    paths = checkpoint_flag.ensemble_paths()
    if paths is None:
        return trained_run.load_model(problem, hparams)
    members = []
    for path in paths:
        checkpoint = checkpoint_flag.member_checkpoint(path)
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
