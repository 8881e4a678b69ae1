"""--checkpoint_path, shared by the commands that read a trained run's weights (decoder,
exporter, visualize, the CTranslate2 conversion) and by avg_checkpoints, so defined once here;
without --output_dir, the checkpoint it names (an ensemble's first member) names the run."""

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


def ensemble_paths():
    """The members --checkpoint_path names when it names several (comma-separated), else None."""
    path = FLAGS.checkpoint_path
    if not path or "," not in path:
        return None
    return [member.strip() for member in path.split(",")]


def member_checkpoint(path):
    """The checkpoint file an ensemble member names: itself, or the newest in its folder."""
    from t2t_repro.training.checkpoints import named_checkpoint

    if not path or not os.path.exists(path):
        raise ConfigurationError(f"--checkpoint_path member {path!r} does not exist; name runs, "
                                 f"folders of checkpoints or checkpoint files, comma-separated.")
    return named_checkpoint(path, f"--checkpoint_path member {path}")


def check_one_checkpoint(path):
    """ConfigurationError for several checkpoints in `path`, for the commands that read one."""
    if "," in path:
        raise ConfigurationError(f"--checkpoint_path={path} names several checkpoints (an "
                                 f"ensemble), which only the decoder takes; name one.")


def resolve_checkpoint():
    """The checkpoint file --checkpoint_path (or --output_dir) names."""
    from t2t_repro.training.checkpoints import named_checkpoint

    path = FLAGS.checkpoint_path or FLAGS.output_dir
    check_one_checkpoint(path)
    flag = "--checkpoint_path" if FLAGS.checkpoint_path else "--output_dir"
    return named_checkpoint(path, f"{flag}={path}")


def named_checkpoints():
    """Every checkpoint file --checkpoint_path (or --output_dir) names: one, or each member of
    an ensemble's."""
    members = ensemble_paths()
    return [resolve_checkpoint()] if members is None else list(map(member_checkpoint, members))


def leading_checkpoint():
    """`(checkpoint file, how to name it)` for the one checkpoint --checkpoint_path (or
    --output_dir) names, or an ensemble's first member, which speaks for the ensemble as
    fairseq's and Marian's first model does."""
    members = ensemble_paths()
    if members is None:
        return resolve_checkpoint(), f"--checkpoint_path={FLAGS.checkpoint_path}"
    return member_checkpoint(members[0]), f"the first --checkpoint_path member {members[0]}"


def output_dir_from_checkpoint(takes_ensembles=False):
    """Sets --output_dir, when it is not given, from the checkpoint --checkpoint_path names
    (`leading_checkpoint`): the run it belongs to (its hparams.json beside it or one folder
    above, as in `<run>/best`), else the folder holding it; and says so in one line. Several
    checkpoints are a ConfigurationError first unless the command `takes_ensembles`."""
    from t2t_repro.training.run_records import run_dir_of

    if FLAGS.checkpoint_path and not takes_ensembles:
        check_one_checkpoint(FLAGS.checkpoint_path)
    if FLAGS.output_dir or not FLAGS.checkpoint_path:
        return
    checkpoint, named = leading_checkpoint()
    run_dir = run_dir_of(checkpoint)
    if run_dir:
        FLAGS.output_dir = run_dir
        print(f"Using --output_dir={run_dir}, the run {named} belongs to.", file=sys.stderr)
    else:
        FLAGS.output_dir = os.path.dirname(os.path.abspath(checkpoint))
        print(f"Using --output_dir={FLAGS.output_dir}, the folder holding {checkpoint}.",
              file=sys.stderr)
