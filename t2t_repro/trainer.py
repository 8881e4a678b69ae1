"""Trains and evaluates a registered model on a registered problem (tensor2tensor's flags).

    python -m t2t_repro.trainer --problem=algorithmic_reverse --hparams_set=transformer_tiny
        --output_dir=runs/reverse --train_steps=1500
    python -m t2t_repro.trainer --registry_help

Running the same command again resumes from the latest checkpoint in --output_dir, and so does
`python -m t2t_repro.trainer --flagfile=<output_dir>/flags.txt`.
"""

import os
import sys

# TensorFlow's C++ start-up chatter (CPU features, missing CUDA) hides the progress lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from t2t_repro import problem_flags  # noqa: E402
from t2t_repro.training.strategy import STRATEGIES  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("model", "transformer", "Registered model.")
flags.DEFINE_string("hparams_set", None, "Registered hparams set.")
flags.DEFINE_string("hparams", "", 'Overrides of the set, "name=value,name2=value2".')
flags.DEFINE_string("output_dir", None, "Checkpoints, TensorBoard events, hparams.json, flags.txt.")
flags.DEFINE_bool("generate_data", False,
                  "Generate the problem's data in --data_dir first (from --tmp_dir), as "
                  "t2t_repro.datagen does; a no-op when it is there already.")
flags.DEFINE_integer("train_steps", None, "Total training steps (default: the set's train_steps).")
flags.DEFINE_integer("eval_steps", 0, "Eval batches per evaluation; 0 reads the whole eval set.")
flags.DEFINE_integer("eval_every", 1000, "Training steps between evaluations.")
flags.DEFINE_enum("schedule", "train_and_evaluate", ["train_and_evaluate", "train", "evaluate"],
                  "What to run.")
flags.DEFINE_bool("registry_help", False, "List registered problems, hparams sets and models.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps (0: never).")
flags.DEFINE_float("save_checkpoints_minutes", 10.0, "Checkpoint every N minutes (0: never).")
flags.DEFINE_integer("keep_checkpoint_max", 20, "How many of the newest checkpoints to keep.")
flags.DEFINE_integer("log_every", 100, "Steps between progress lines and train summaries.")
flags.DEFINE_enum("strategy", "auto", STRATEGIES,
                  "auto (Mirrored over several GPUs, else one device), default (one device), "
                  "mirrored (all local devices) or multi_worker (machines named by TF_CONFIG).")
flags.DEFINE_bool("jit_compile", False, "Compile the train step with XLA.")
flags.DEFINE_integer("random_seed", None, "Seed for weights, dropout and data order.")
flags.DEFINE_integer("decode_examples", 0,
                     "After training, greedy-decode this many eval examples, print the first "
                     "few beside their targets and report how many came out exactly right.")

FLAGS_FILENAME = "flags.txt"
_SHOWN_DECODES = 5


class ConfigurationError(Exception):
    """A bad flag combination; the message says what to change."""


def resolve_hparams(output_dir):
    """The set with overrides applied, checked against what `output_dir` was trained with."""
    from t2t_repro import hparams as hparams_lib

    hparams = hparams_lib.create_hparams(FLAGS.hparams_set, FLAGS.hparams)
    saved = hparams_lib.load(output_dir)
    if saved is not None and saved != hparams:
        raise ConfigurationError(
            f"{output_dir} holds a run trained with different hparams "
            f"({', '.join(hparams.differences(saved))} differ). Resume it with the same "
            f"--hparams_set and --hparams (see {output_dir}/{hparams_lib.HPARAMS_FILENAME} and "
            f"{FLAGS_FILENAME}), or start a new run in another --output_dir."
        )
    return hparams


def trainer_flags_text():
    """The trainer's flags as `--name=value` lines, loadable again with `--flagfile`."""
    modules = {FLAGS.find_module_defining_flag(name) for name in ("problem", "hparams_set")}
    own_flags = sorted(
        (flag for module in modules for flag in FLAGS.get_flags_for_module(module)),
        key=lambda flag: flag.name,
    )
    lines = [flag.serialize() for flag in own_flags]
    return "".join(line + "\n" for line in lines if line)  # unset flags serialize as ""


def save_run_config(hparams, output_dir):
    from t2t_repro import hparams as hparams_lib

    hparams_lib.save(hparams, output_dir)
    with open(os.path.join(output_dir, FLAGS_FILENAME), "w") as f:
        f.write(trainer_flags_text())


def show_decodes(problem, model, hparams, count):
    """Greedy-decodes `count` eval examples; prints a few and the exact-match rate."""
    from t2t_repro.data.problem import EVAL
    from t2t_repro.decoding.greedy import greedy_decode

    examples = problem.dataset(EVAL, hparams)
    decoded_count = correct = 0
    for features, targets in examples:
        batch = features["inputs"][: count - decoded_count]
        decoded = greedy_decode(model, batch, max_output_length=targets.shape[1] + 10)
        for source, target, output in zip(batch.numpy(), targets.numpy(), decoded):
            expected, produced = problem.decode(target), problem.decode(output)
            correct += expected == produced
            if decoded_count < _SHOWN_DECODES:
                print(f"  input:  {problem.decode(source)}\n  target: {expected}\n"
                      f"  output: {produced}  [{'ok' if expected == produced else 'WRONG'}]")
            decoded_count += 1
        if decoded_count >= count:
            break
    print(f"Greedy decoding: {correct}/{decoded_count} held-out sequences exactly right "
          f"({correct / max(decoded_count, 1):.1%}).")


def run():
    import keras

    from t2t_repro import registry
    from t2t_repro.training.loop import TrainingRun
    from t2t_repro.training.strategy import create_strategy

    problem = problem_flags.create_problem()
    hparams = resolve_hparams(FLAGS.output_dir)
    if FLAGS.model not in registry.models:
        raise ConfigurationError(registry.models.unknown_name_message(FLAGS.model))
    if FLAGS.generate_data:
        problem.generate_data(FLAGS.tmp_dir, download=FLAGS.download)
    problem.check_data()  # before anything is written to --output_dir
    save_run_config(hparams, FLAGS.output_dir)
    if FLAGS.random_seed is not None:
        keras.utils.set_random_seed(FLAGS.random_seed)
    run = TrainingRun(
        problem,
        hparams,
        FLAGS.output_dir,
        create_strategy(FLAGS.strategy),
        model_name=FLAGS.model,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        save_checkpoints_minutes=FLAGS.save_checkpoints_minutes,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        eval_every=FLAGS.eval_every,
        eval_steps=FLAGS.eval_steps,
        log_every=FLAGS.log_every,
        jit_compile=FLAGS.jit_compile,
    )
    train_steps = FLAGS.train_steps or hparams.train_steps
    if FLAGS.schedule == "evaluate":
        run.restore()
        eval_scalars = run.evaluate()
    else:
        eval_scalars = run.train(
            train_steps, evaluate_every_segment=FLAGS.schedule == "train_and_evaluate"
        )
    if FLAGS.decode_examples:
        show_decodes(problem, run.model, hparams, FLAGS.decode_examples)
    if eval_scalars:
        print(f"Final eval token accuracy on held-out data: {eval_scalars['accuracy']:.2%} "
              f"(step {run.checkpoints.step()}, output in {FLAGS.output_dir})")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; flags look like --name=value.")
    if FLAGS.registry_help:
        from t2t_repro import registry

        print(registry.help_text())
        return
    from t2t_repro.hparams import HParamsError
    from t2t_repro.registry import RegistryError

    missing = [name for name in ("problem", "hparams_set", "output_dir") if not FLAGS[name].value]
    try:
        if missing:
            raise ConfigurationError(
                f"missing {', '.join('--' + m for m in missing)}; see --helpfull, or "
                f"--registry_help for the registered problems and hparams sets."
            )
        run()
    except (ConfigurationError, RegistryError, HParamsError, *problem_flags.data_errors()) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    app.run(main)
