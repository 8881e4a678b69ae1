"""What the commands that read a trained run share (decoder, exporter, visualize, the
CTranslate2 conversion): the flags its flags.txt recorded, --checkpoint_path, and loading the
weights."""

import filecmp
import os
import sys

from absl import flags

from t2t_repro.cli import checkpoint_flag, model_flags, problem_flags  # noqa: F401 (flags)
from t2t_repro.cli import usr_dir
from t2t_repro.training.run_records import (recorded_flags, recorded_problem, run_dir_of,
                                            unresolvable, unresolvable_error)
from t2t_repro.errors import ConfigurationError
from t2t_repro.names import FLAGS_FILENAME, HPARAMS_FILENAME, PATH_FLAGS

FLAGS = flags.FLAGS

flags.DEFINE_integer("max_input_tokens", None,
                     "The longest input the decoder, or the exporter's saved_model, accepts, in "
                     "tokens with EOS (default: hparam max_length); longer inputs are an error, "
                     "never truncated.", lower_bound=1)


def resolve_hparams():
    """The run's hparams (saved in --output_dir, or the flags checked against them), after
    checking --model. Without either, a lone checkpoint's stored hparams
    (`checkpoints.stored_hparams`) with --hparams applied, said in one line."""
    hparams = model_flags.resolve_hparams(FLAGS.output_dir, saved_when_no_set=True,
                                          base_when_no_set=lone_checkpoint_hparams(),
                                          reading=True)
    model_flags.check_model_name()
    return hparams


def leading_checkpoint_if_any():
    """The checkpoint --checkpoint_path (or --output_dir) names, or an ensemble's first member
    (`checkpoint_flag.leading_checkpoint`); None when the one path it names does not exist,
    which the command's later checks name."""
    named = FLAGS.checkpoint_path or FLAGS.output_dir
    if "," not in named and not os.path.exists(named):
        return None
    return checkpoint_flag.leading_checkpoint()[0]


def lone_checkpoint_hparams():
    """The hparams stored in the checkpoint --checkpoint_path (or --output_dir) names, or in an
    ensemble's first member, when no --hparams_set is given and --output_dir has no
    hparams.json; None otherwise."""
    from t2t_repro import hparams as hparams_lib
    from t2t_repro.training.checkpoints import stored_hparams

    if FLAGS.hparams_set or hparams_lib.load(FLAGS.output_dir) is not None:
        return None
    checkpoint = leading_checkpoint_if_any()
    if checkpoint is None:
        return None
    stored = stored_hparams(checkpoint)
    if stored is not None:
        print(f"Using the model hparams stored in {checkpoint} (no --hparams_set given).",
              file=sys.stderr)
    return stored


def load_model(problem, hparams):
    """`(checkpoint path, model with its weights)` for --model and --checkpoint_path; a
    checkpoint of another run must have been trained with `problem`'s vocabulary."""
    from t2t_repro.training.run import load_trained_model

    checkpoint = checkpoint_flag.resolve_checkpoint()
    run_dir = run_dir_of(checkpoint)
    if run_dir is not None and os.path.realpath(run_dir) != os.path.realpath(FLAGS.output_dir):
        named = (f"--checkpoint_path={FLAGS.checkpoint_path}" if FLAGS.checkpoint_path
                 else checkpoint)  # --output_dir a folder of checkpoints in another run
        check_run_vocabulary(named, run_dir, problem)
    return checkpoint, load_trained_model(FLAGS.model, hparams, problem, checkpoint)


def records_and_vocabularies(problem):
    """{what: path} of the files a command reading the trained run reads besides checkpoints:
    the run's hparams.json and flags.txt, and `problem`'s vocabulary files (one, shared by
    both sides, or a source and a target one)."""
    paths = problem.vocabulary_files()
    vocabularies = ({"vocabulary": path for path in paths.values()} if len(set(paths.values())) == 1
                    else {f"{side} vocabulary": path for side, path in paths.items()})
    return {f"run's {HPARAMS_FILENAME}": os.path.join(FLAGS.output_dir, HPARAMS_FILENAME),
            f"run's {FLAGS_FILENAME}": os.path.join(FLAGS.output_dir, FLAGS_FILENAME),
            **vocabularies}


def check_run_vocabulary(named, run_dir, problem):
    """ConfigurationError naming the checkpoint (`named`, as the message calls it) and both
    vocabulary files when `run_dir`, the run it belongs to, was trained on another vocabulary
    (either side) than `problem` decodes with. A run whose problem has no vocabulary file,
    that records no problem, or whose data folder is gone (moved: the checkpoint's vocabulary
    digests are checked when it loads), passes."""
    recorded = recorded_problem(run_dir)
    theirs = getattr(recorded, "vocabulary_paths", None)
    ours = getattr(problem, "vocabulary_paths", None)
    if theirs is None or theirs == ours or not os.path.isdir(recorded.data_dir or ""):
        return
    same = ours is not None and len(theirs) == len(ours) and all(
        os.path.exists(their_file) and filecmp.cmp(their_file, our_file, shallow=False)
        for their_file, our_file in zip(theirs, ours))
    if not same:
        raise ConfigurationError(
            f"{named} was trained with the vocabulary {' and '.join(theirs)}, not "
            f"{' and '.join(ours or ['none'])} that --problem decodes with; decode only with "
            f"models trained on one vocabulary.")


# What a trained run's flags.txt supplies when not given; the hparams come from its hparams.json.
RUN_FLAGS = ("problem", "data_dir", "t2t_usr_dir")
# The shared flags every command reading a trained run takes, for its --help
# (`entry_point.run`'s key_flags).
KEY_FLAGS = (*RUN_FLAGS, "output_dir", "checkpoint_path", "hparams_set", "hparams",
             "decode_hparams", "max_input_tokens")


def same_value(name, given, recorded):
    if unresolvable(name, recorded):
        return True  # nothing here to compare the given path with
    if name in PATH_FLAGS:  # `given` has its `~` expanded (`entry_point.expand_home`)
        return os.path.realpath(given) == os.path.realpath(recorded)
    return given == recorded


def adopt_run_flags():
    """Sets --problem, --data_dir and --t2t_usr_dir from --output_dir's flags.txt where they
    were not given, and says so in one line; a given value that disagrees with the run's is a
    ConfigurationError naming both, and so is a recorded relative path that names nothing
    from here. A given --data_dir replaces a recorded one that is gone (a data folder moved),
    saying so."""
    flags_path = os.path.join(FLAGS.output_dir, FLAGS_FILENAME)
    recorded = recorded_flags(FLAGS.output_dir)
    adopted = []
    for name in RUN_FLAGS:
        if name not in recorded:
            continue
        given = FLAGS[name].value
        if given is None:
            if unresolvable(name, recorded[name]):
                raise unresolvable_error(FLAGS.output_dir, name, recorded[name],
                                         f"run the command from that folder, or give --{name}")
            FLAGS[name].value = recorded[name]
            adopted.append(f"--{name}={recorded[name]}")
        elif not same_value(name, given, recorded[name]):
            if name == "data_dir" and not os.path.exists(recorded[name]):
                print(f"Using --data_dir={given}: {recorded[name]}, which {flags_path} "
                      f"records, is gone (moved?); the checkpoint's vocabulary digests check "
                      f"that this is its data.", file=sys.stderr)
                continue
            raise ConfigurationError(
                f"--{name}={given} disagrees with --{name}={recorded[name]} that "
                f"{flags_path} records for this run; leave --{name} out to use the run's, or "
                f"point --output_dir at another run.")
    if adopted:
        print(f"Using {' '.join(adopted)} from {flags_path}.", file=sys.stderr)


def adopt_stored_problem():
    """Sets --problem, when neither it nor the run's flags.txt gives one, to the problem stored
    in the checkpoint --checkpoint_path (or --output_dir) names, or in an ensemble's first
    member (`checkpoints.stored_problem`), and says so in one line."""
    from t2t_repro.training.checkpoints import stored_problem

    checkpoint = None if FLAGS.problem else leading_checkpoint_if_any()
    if checkpoint is None:
        return
    FLAGS.problem = stored_problem(checkpoint)
    if FLAGS.problem:
        print(f"Using --problem={FLAGS.problem} stored in {checkpoint}.", file=sys.stderr)


def start_trained_run_command(argv, takes_ensembles=False):
    """The start of a command that reads a trained run (an ensemble's first member's run, if
    it `takes_ensembles`): usage checked, the run's recorded flags adopted, --t2t_usr_dir
    imported."""
    from t2t_repro.cli.entry_point import check_usage

    checkpoint_flag.output_dir_from_checkpoint(takes_ensembles)
    check_usage(argv, ("output_dir",), hint="name the trained run, or give --checkpoint_path; "
                "see --helpfull")
    adopt_run_flags()
    adopt_stored_problem()
    missing_why = ("the run's flags.txt names none" if os.path.isdir(FLAGS.output_dir) else
                   f"--output_dir={FLAGS.output_dir} does not exist, so no flags.txt names one")
    check_usage(argv, ("problem",), hint=f"{missing_why}; see --helpfull")
    usr_dir.import_flagged_usr_dir()
