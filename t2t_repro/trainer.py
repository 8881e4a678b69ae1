"""Trains and evaluates a registered model on a registered problem (tensor2tensor's flags).

    python -m t2t_repro.trainer --problem=algorithmic_reverse --hparams_set=transformer_tiny
        --output_dir=runs/reverse --train_steps=1500
    python -m t2t_repro.trainer --registry_help

Running the same command again resumes from the latest checkpoint in --output_dir, and so does
`python -m t2t_repro.trainer --flagfile=<output_dir>/flags.txt`; without --hparams_set, the
run's hparams.json gives the hparams (a run made from Python records no set in flags.txt).

With KERAS_BACKEND=jax it trains on JAX and imports no TensorFlow (`training.jax.run`).
"""

import contextlib
import math
import os

from t2t_repro.utils import backend
from t2t_repro.cli import quiet_tensorflow

if backend.is_tensorflow():
    quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro.cli import model_flags, output_paths, problem_flags, run_folder_lock  # noqa: E402
from t2t_repro.cli import usr_dir  # noqa: E402
from t2t_repro.cli import seed_flag  # noqa: E402,F401 (--random_seed)
from t2t_repro.utils.atomic_files import write_text_atomically  # noqa: E402
from t2t_repro.cli import entry_point  # noqa: E402
from t2t_repro.cli.entry_point import FlagAlias, apply_flag_aliases, check_usage  # noqa: E402
from t2t_repro.errors import ConfigurationError, UserError  # noqa: E402
from t2t_repro.training import run_records  # noqa: E402
from t2t_repro.training.strategy_names import STRATEGIES, WorkerFailureError  # noqa: E402
from t2t_repro.utils import out_of_memory  # noqa: E402
from t2t_repro.names import FLAGS_FILENAME, HPARAMS_FILENAME, PATH_FLAGS  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_bool("generate_data", False,
                  "Generate the problem's data in --data_dir first (from --tmp_dir), as "
                  "t2t_repro.datagen does; a no-op when it is there already.")
flags.DEFINE_integer("train_steps", None, "Total training steps (default: the set's train_steps).")
flags.DEFINE_integer("eval_steps", 0, "Eval batches per evaluation; 0 reads the whole eval set.")
flags.DEFINE_integer("eval_every", 1000, "Training steps between evaluations.")
flags.DEFINE_enum("schedule", "train_and_evaluate", ["train_and_evaluate", "train", "evaluate"],
                  "What to run.")
flags.DEFINE_bool("registry_help", False, "List registered problems, hparams sets and models.")
flags.DEFINE_integer("save_checkpoints_steps", None,
                     "Checkpoint every N steps (0: never; default: never for the paper's hparams "
                     "sets, which checkpoint every --save_checkpoints_minutes alone as §6.1 "
                     "says, 1000 for the others).")
flags.DEFINE_float("save_checkpoints_minutes", 10.0, "Checkpoint every N minutes (0: never).")
flags.DEFINE_integer("keep_checkpoint_max", 20, "How many of the newest checkpoints to keep.")
flags.DEFINE_integer("log_every", 100, "Steps between progress lines and train summaries.")
flags.DEFINE_enum("strategy", "auto", STRATEGIES,
                  "auto (Mirrored over several GPUs, else one device), default (one device), "
                  "mirrored (all local devices) or multi_worker (machines named by TF_CONFIG). "
                  "Under JAX: auto and mirrored train on all local devices (DataParallel), "
                  "default on one; multi_worker is not supported.")
flags.DEFINE_bool("jit_compile", False,
                  "Compile the train step with XLA (under JAX it always is).")
flags.DEFINE_float("peak_tflops", None,
                   "Peak TFLOPS of one device at the training dtype, for the model FLOPs "
                   "utilisation in progress lines (default: looked up for known GPUs; none on "
                   "CPUs).", lower_bound=0.0)
flags.DEFINE_integer("eval_decode_examples", 100,
                     "At every evaluation, beam-decode this many eval examples with "
                     "--decode_hparams and report the problem's decode metrics (sacreBLEU for "
                     "translation, bracket F1 for parsing); 0: none; -1: the whole eval set.",
                     lower_bound=-1)
flags.DEFINE_integer("decode_examples", 0,
                     "After training, greedy-decode this many eval examples, print the first "
                     "few beside their targets and report how many came out exactly right.",
                     lower_bound=0)
flags.DEFINE_string("eval_early_stopping_metric", None,
                    "The eval metric that ranks checkpoints for <output_dir>/best/ and early "
                    "stopping (default: the problem's main decode metric: bleu, bracket_f1 or "
                    "exact_match; loss when --eval_decode_examples=0). Any eval scalar: loss, "
                    "accuracy, neg_log_perplexity, or a decode metric.")
flags.DEFINE_bool("eval_early_stopping_metric_minimize", None,
                  "Whether lower values of the metric are better (default: only for loss).")
flags.DEFINE_float("eval_early_stopping_metric_delta", 0.0,
                   "The smallest gain over the best value that counts as an improvement.",
                   lower_bound=0.0)
flags.DEFINE_integer("eval_early_stopping_steps", 0,
                     "End training once this many steps have passed without an improvement "
                     "(checked at each evaluation); 0: never.", lower_bound=0)
flags.DEFINE_string("warm_start_from", None,
                    "Fine-tune: start from this run's weights (its newest checkpoint), or a "
                    "checkpoint file or a folder holding one (<run>/best, averaged), with a fresh "
                    "optimizer at step 0. Only training hparams may differ from that run's, and "
                    "the vocabulary must be the same; without --hparams_set, that run's hparams "
                    "(with --hparams) are this run's. A run with checkpoints of its own resumes "
                    "from them: there, only the --warm_start_from its flags.txt records is "
                    "taken.")
flags.DEFINE_integer("save_checkpoints_secs", None,
                     "tensor2tensor's name: --save_checkpoints_minutes in seconds.")
flags.DEFINE_integer("local_eval_frequency", None, "tensor2tensor's name for --eval_every.")
flags.DEFINE_integer("log_step_count_steps", None, "tensor2tensor's name for --log_every.")
flags.DEFINE_bool("xla_compile", None, "tensor2tensor's name for --jit_compile.")

ALIASES = (
    FlagAlias("save_checkpoints_secs", "save_checkpoints_minutes", lambda seconds: seconds / 60),
    FlagAlias("local_eval_frequency", "eval_every"),
    FlagAlias("log_step_count_steps", "log_every"),
    FlagAlias("xla_compile", "jit_compile"),
)

def trainer_flags_text(started_from=None):
    """The trainer's flags as `--name=value` lines, loadable again with `--flagfile`; aliases
    are recorded under our names, paths as absolute ones (`run_records.flag_line`).
    `started_from`: the --warm_start_from to record when the flag is not given, for a run
    resumed from its own checkpoints that the record says began there."""
    modules = {
        FLAGS.find_module_defining_flag(name)
        for name in ("problem", "hparams_set", "train_steps", "t2t_usr_dir", "random_seed")
    }
    aliases = {alias.name for alias in ALIASES}
    own_flags = sorted(
        [flag for module in modules for flag in FLAGS.get_flags_for_module(module)
         if flag.name not in aliases] + [FLAGS["output_dir"]],
        key=lambda flag: flag.name,
    )
    lines = [run_records.flag_line(flag.name, flag.value)
             if flag.name in PATH_FLAGS and flag.value else flag.serialize()
             for flag in own_flags]
    if started_from and not FLAGS.warm_start_from:
        lines.append(run_records.flag_line("warm_start_from", started_from))
    return "".join(line + "\n" for line in lines if line)  # unset flags serialize as ""


def save_flags(output_dir, train_steps, best=None):
    """For training schedules with steps left to train, flags.txt: the record `--flagfile`
    resumes training from, which a later `--schedule=evaluate`, or a call that finds the run
    trained to `train_steps` already or stopped early (by `best`, its BestCheckpoint), must
    not replace (the run wrote hparams.json)."""
    from t2t_repro.training import checkpoints

    newest = checkpoints.latest_checkpoint(output_dir)
    trained = checkpoints.checkpoint_step(newest) if newest else 0
    stopped = best is not None and best.should_stop(trained)
    if FLAGS.schedule != "evaluate" and trained < train_steps and not stopped:
        started_from = newest and run_records.recorded_flags(output_dir).get("warm_start_from")
        write_text_atomically(os.path.join(output_dir, FLAGS_FILENAME),
                              trainer_flags_text(started_from))


def show_decodes(problem, model, count):
    """Greedy-decodes (beam 1) the first `count` eval examples; prints a few beside their
    targets and the exact-match rate."""
    from t2t_repro.decoding.text_decoding import DecodeEvaluation, create_decode_hparams

    greedy = create_decode_hparams(problem, "beam_size=1,alpha=0.0")
    evaluation = DecodeEvaluation(problem, greedy, count)
    print(evaluation.exact_match_report(evaluation.decode(model), title="Greedy decoding"))


def decode_evaluation(problem):
    """The beam-search evaluation run at every eval, or None with --eval_decode_examples=0."""
    from t2t_repro.decoding.text_decoding import DecodeEvaluation, create_decode_hparams

    if not FLAGS.eval_decode_examples:
        return None
    decode_hparams = create_decode_hparams(problem, FLAGS.decode_hparams)
    return DecodeEvaluation(problem, decode_hparams, FLAGS.eval_decode_examples)


# What only evaluations read (--eval_early_stopping_steps, which stops training, is refused).
EVALUATION_FLAGS = ("eval_every", "eval_steps", "eval_decode_examples",
                    "eval_early_stopping_metric", "eval_early_stopping_metric_minimize",
                    "eval_early_stopping_metric_delta")


def best_criterion(problem):
    """What ranks the evaluations of a train_and_evaluate run (`best_checkpoint.Criterion`);
    None for other schedules, which evaluate no checkpoints as they train (--schedule=train
    names the evaluation flags given other values, which it leaves unused)."""
    from t2t_repro.training.best_checkpoint import choose_criterion

    if FLAGS.schedule != "train_and_evaluate":
        if FLAGS.eval_early_stopping_steps:
            raise ConfigurationError("--eval_early_stopping_steps needs evaluations during "
                                     "training: --schedule=train_and_evaluate.")
        unused = [FLAGS[name].serialize() for name in EVALUATION_FLAGS
                  if FLAGS[name].value != FLAGS[name].default]
        if FLAGS.schedule == "train" and unused:
            print(f"--schedule=train evaluates nothing: {', '.join(unused)} "
                  f"{'has' if len(unused) == 1 else 'have'} no effect "
                  f"(--schedule=train_and_evaluate evaluates as it trains).")
        return None
    criterion, note = choose_criterion(
        problem, decoding=bool(FLAGS.eval_decode_examples),
        metric=FLAGS.eval_early_stopping_metric,
        minimize=FLAGS.eval_early_stopping_metric_minimize,
        delta=FLAGS.eval_early_stopping_metric_delta, patience=FLAGS.eval_early_stopping_steps)
    if note:
        print(note)
    return criterion


def warm_start_source():
    """The checkpoint file --warm_start_from names, resolved once (None without the flag): a
    folder's newest checkpoint may change while the run starts."""
    if not FLAGS.warm_start_from:
        return None
    from t2t_repro.training import warm_start

    warm_start.check_resumed_run_starts_there(FLAGS.output_dir, FLAGS.warm_start_from)
    return warm_start.source_checkpoint(FLAGS.warm_start_from)


def warm_start_hparams(checkpoint):
    """Without --hparams_set, the hparams of the run `checkpoint` belongs to (None without
    it)."""
    if FLAGS.hparams_set or checkpoint is None:
        return None
    from t2t_repro.training import warm_start

    return warm_start.source_hparams(checkpoint)


def check_flag_values():
    """Flag values that make no sense are errors before anything is read or written."""
    from t2t_repro.training import checkpoints

    at_least = {"eval_every": 1, "log_every": 1, "keep_checkpoint_max": 1, "train_steps": 1,
                "eval_steps": 0, "save_checkpoints_steps": 0, "save_checkpoints_minutes": 0}
    for name in ("save_checkpoints_minutes", "peak_tflops", "eval_early_stopping_metric_delta"):
        value = getattr(FLAGS, name)  # absl's bounds let NaN through, and infinity above
        if value is not None and not math.isfinite(value):
            raise ConfigurationError(f"--{name}={value} makes no sense: give a finite number.")
    for name, lowest in at_least.items():
        value = getattr(FLAGS, name)
        if value is not None and value < lowest:
            raise ConfigurationError(f"--{name}={value} makes no sense: it must be at least "
                                     f"{lowest}.")
    output_dir = FLAGS.output_dir
    output_paths.check_output_dir(output_dir)
    if FLAGS.generate_data and FLAGS.data_dir:
        output_paths.check_output_dir(FLAGS.data_dir, "--data_dir")
    if FLAGS.schedule == "evaluate" and not checkpoints.list_checkpoints(output_dir):
        raise ConfigurationError(
            f"--schedule=evaluate needs a trained model, but {output_dir} has no checkpoint "
            f"(ckpt-<step>.weights.h5); train first, or point --output_dir at a trained run.")
    averaged_from = checkpoints.averaged_from(output_dir)
    if FLAGS.schedule != "evaluate" and averaged_from is not None:
        raise ConfigurationError(
            f"{output_dir} holds averaged checkpoints of {averaged_from} (avg_checkpoints wrote "
            f"it); training there would mix the average with new steps. Train in "
            f"{averaged_from} and average again, or evaluate and decode from {output_dir}.")


def save_checkpoints_steps():
    """--save_checkpoints_steps, or when not given the hparams set's default cadence."""
    from t2t_repro import registry
    from t2t_repro.training import checkpoints

    if FLAGS.save_checkpoints_steps is not None:
        return FLAGS.save_checkpoints_steps
    hparams_set = registry.hparams_sets[FLAGS.hparams_set] if FLAGS.hparams_set else None
    return checkpoints.default_save_checkpoints_steps(hparams_set, FLAGS.save_checkpoints_minutes)


def run():
    """Trains or evaluates as the flags say, holding --output_dir's lock from the moment the
    model is built (`run_folder_lock`): one trainer at a time writes a run folder."""
    with contextlib.ExitStack() as lock:
        train_or_evaluate(lambda: lock.enter_context(run_folder_lock.held(FLAGS.output_dir)))


def train_or_evaluate(claim_output_dir):
    from t2t_repro.data.problem import EVAL, TRAIN
    from t2t_repro.training.run_factory import create_training_run

    problem = problem_flags.create_problem()
    run_records.check_recorded_problem(FLAGS.output_dir, problem.name)
    warm_start_from = warm_start_source()
    hparams = model_flags.resolve_hparams(FLAGS.output_dir, saved_when_no_set=True,
                                          base_when_no_set=warm_start_hparams(warm_start_from))
    model_flags.check_model_name()
    if FLAGS.generate_data:
        problem.generate_data(FLAGS.tmp_dir, download=FLAGS.download)
    read = {"train": (TRAIN,), "evaluate": (EVAL,)}.get(FLAGS.schedule, (TRAIN, EVAL))
    problem.check_data(modes=read)  # before anything is written to --output_dir
    if FLAGS.schedule != "evaluate":
        problem.check_max_length(TRAIN, hparams.max_length)
    criterion = best_criterion(problem)
    if warm_start_from is not None:
        from t2t_repro.training import warm_start

        warm_start.check_source(warm_start_from, problem, hparams)
    run = create_training_run(
        problem,
        hparams,
        FLAGS.output_dir,
        strategy_name=FLAGS.strategy,
        jit_compile=FLAGS.jit_compile,
        seed=FLAGS.random_seed,
        model_name=FLAGS.model,
        save_checkpoints_steps=save_checkpoints_steps(),
        save_checkpoints_minutes=FLAGS.save_checkpoints_minutes,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        eval_every=FLAGS.eval_every,
        eval_steps=FLAGS.eval_steps,
        log_every=FLAGS.log_every,
        decode_evaluation=decode_evaluation(problem),
        peak_tflops=FLAGS.peak_tflops,
        claim_output_dir=claim_output_dir,
        best_criterion=criterion,
        warm_start_from=warm_start_from,
    )
    train_steps = FLAGS.train_steps or hparams.train_steps
    if run.is_chief:  # once the model is built: bad hparams leave nothing behind
        save_flags(FLAGS.output_dir, train_steps, run.best)
    if FLAGS.schedule == "evaluate":
        run.restore()
        eval_scalars = run.evaluate()
    else:
        eval_scalars = run.train(
            train_steps, evaluate_every_segment=FLAGS.schedule == "train_and_evaluate"
        )
    if FLAGS.decode_examples:
        show_decodes(problem, run.model, FLAGS.decode_examples)
    if eval_scalars:
        print(f"Final eval token accuracy on held-out data: {eval_scalars['accuracy']:.2%} "
              f"(step {run.checkpoints.step()}, output in {FLAGS.output_dir})")
    if run.best is not None and run.best.record is not None:
        record = run.best.record
        print(f"Best checkpoint: {run.best.path()} ({record['metric']} {record['value']:.4f} "
              f"at step {record['step']}).")


def main(argv):
    backend.check_training_backend()
    check_usage(argv)
    apply_flag_aliases(ALIASES)
    usr_dir.import_flagged_usr_dir()
    if FLAGS.registry_help:
        from t2t_repro import registry

        print(registry.help_text())
        return
    check_usage(argv, ("problem", "output_dir") if FLAGS.warm_start_from or saved_hparams()
                else ("problem", "hparams_set", "output_dir"),
                hint="see --helpfull, or --registry_help for the registered problems and "
                     "hparams sets")
    try:
        check_flag_values()
        run()
    except UserError:
        raise
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (entry_point.Terminated)
        if FLAGS.schedule == "evaluate":
            raise
        raise type(interrupt)(resume_line()) from None
    except Exception as error:
        if FLAGS.strategy == "multi_worker":
            exit_if_worker_failed(error)
        if out_of_memory.is_out_of_memory(error):
            raise out_of_memory.OutOfMemoryError(
                f"training ran out of memory ({out_of_memory.allocation(error)}): lower "
                f"batch_size in --hparams (the tokens of a batch; gradient_accumulation_steps=K "
                f"keeps the tokens of a step), or, where an evaluation's decoding ran out, "
                f"batch_size or beam_size in --decode_hparams; {resume_line()}") from None
        raise


def saved_hparams():
    """Whether --output_dir holds a run's hparams.json, which a resumed run without
    --hparams_set takes (as a run made from Python records none)."""
    return bool(FLAGS.output_dir) and os.path.exists(
        os.path.join(FLAGS.output_dir, HPARAMS_FILENAME))


def resume_line():
    """Where a trainer stopped by Ctrl-C resumes: its newest checkpoint."""
    from t2t_repro.training import checkpoints

    newest = checkpoints.latest_checkpoint(FLAGS.output_dir)
    if newest is None:
        return "no checkpoint was written yet; the same command starts the run again."
    return f"the same command resumes the run from {newest}."


def exit_if_worker_failed(error):
    """Exits with a one-line account when `error` is a multi-worker collective's report of a
    lost peer."""
    from t2t_repro.training import checkpoints
    from t2t_repro.training.tensorflow import strategy

    if isinstance(error, strategy.worker_failure_errors()):
        raise WorkerFailureError(strategy.describe_worker_failure(
            error, checkpoints.latest_checkpoint(FLAGS.output_dir))) from error


if __name__ == "__main__":
    entry_point.run(main, ("problem", "data_dir", "tmp_dir", "data_hparams", "download",
                           "output_dir", "model", "hparams_set", "hparams", "decode_hparams",
                           "random_seed", "t2t_usr_dir"))
