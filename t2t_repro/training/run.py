"""One training run, whatever the backend: build the model, resume, train in segments,
evaluate, checkpoint, report. `tensorflow.run.TensorFlowTrainingRun` runs it on TensorFlow
(tf.data, tf.distribute) and `jax.run.JaxTrainingRun` on JAX; each supplies its train step and
batches."""

import functools
import os

from t2t_repro import hparams as hparams_lib
from t2t_repro import names, registry
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.hparams import A_FRACTION, ABOVE_ZERO, HParamsError, at_least, check_ranges
from t2t_repro.models.flops import training_flops
from t2t_repro.models.transformer import DTYPE_POLICIES
from t2t_repro.training import (attention_images, best_checkpoint, checkpoints, run_records,
                                summaries, warm_start)
from t2t_repro.training.chunked_loss import hparams_chunk_tokens
from t2t_repro.training.losses import LabelSmoothedCrossEntropy, training_metrics
from t2t_repro.training.optimizer import create_optimizer
from t2t_repro.errors import ConfigurationError, UserError, is_whole_number


class NonFiniteLossError(UserError):
    """An update's loss or gradient was NaN or infinite; training stopped before saving it."""

    def __init__(self, step, last_checkpoint):
        kept = (f"the last good checkpoint, {last_checkpoint}, is kept" if last_checkpoint
                else "no checkpoint had been written yet")
        super().__init__(
            f"the loss or a gradient of step {step} is NaN or infinite, so training stopped "
            f"and nothing of that step was saved; {kept}. Lower the learning rate (or raise "
            f"learning_rate_warmup_steps), set clip_grad_norm, or check the data; then run the "
            f"same command to resume."
        )
        self.step = step
        self.last_checkpoint = last_checkpoint


# The values the training hparams take (`hparams.check_ranges`): at least one token per
# micro-batch, micro-batch per update and target position per chunk of the loss; a negative
# rate or warm-up would climb the loss, and smoothing or an Adam β of 1 leaves nothing to
# learn from.
TRAINING_RANGES = {
    **dict.fromkeys(("batch_size", "gradient_accumulation_steps", "loss_chunk_tokens"),
                    at_least(1)),
    "learning_rate_constant": ABOVE_ZERO,
    "learning_rate_warmup_steps": at_least(0),
    "label_smoothing": A_FRACTION,
    "optimizer_adam_beta1": A_FRACTION,
    "optimizer_adam_beta2": A_FRACTION,
    "optimizer_adam_epsilon": ABOVE_ZERO,
    "clip_grad_norm": at_least(0, " (0: no clipping)"),
}


def check_training_hparams(hparams, replicas=1):
    """HParamsError naming a training hparam out of its range (`TRAINING_RANGES`), or a
    batch_size below max_length × the `replicas` that share each batch (the longest examples
    could never fit in one), before anything is built or written."""
    check_ranges(hparams, TRAINING_RANGES)
    smallest_batch = hparams.max_length * replicas
    if hparams.batch_size < smallest_batch:
        raise HParamsError(
            f"hparam batch_size={hparams.batch_size} is below max_length={hparams.max_length} "
            f"× {replicas} replica(s), so the longest examples could never fit in a batch: "
            f"raise batch_size to at least {smallest_batch}, or lower max_length.")


def train_step_arguments(hparams, micro_batches=None):
    """The keyword arguments hparams give either backend's train step (`TensorFlowTrainStep`,
    `JaxTrainStep`): the loss's smoothing and chunks, micro-batches per update (`micro_batches`,
    when given, instead of hparam gradient_accumulation_steps) and gradient clipping."""
    return {"smoothing": hparams.label_smoothing,
            "accumulation_steps": micro_batches or hparams.gradient_accumulation_steps,
            "clip_norm": hparams.clip_grad_norm,
            "loss_chunk_tokens": hparams_chunk_tokens(hparams)}


def build_model(model_name, hparams, problem, dtype_policy="float32"):
    """The registered model for `problem`'s vocabularies, with all its weights created (the
    hparams as the problem's data needs them: `Problem.model_hparams`).

    Weights are float32 under every policy; training uses `hparams.dtype_policy`, inference
    float32, and either loads the other's checkpoints.
    """
    if dtype_policy not in DTYPE_POLICIES:
        raise HParamsError(f"hparam dtype_policy must be one of {', '.join(DTYPE_POLICIES)}, "
                           f"got '{dtype_policy}'.")
    model_class = registry.models[model_name]
    model = model_class(problem.model_hparams(hparams), problem.input_vocab_size,
                        problem.target_vocab_size, dtype=dtype_policy)
    model.vocabulary_digests = checkpoints.vocabulary_digests(problem)  # for its checkpoints
    model.problem_name = problem.name
    return model.build_weights()


def compile_for_training(model, hparams, jit_compile=False):
    model.compile(
        optimizer=create_optimizer(hparams),
        loss=LabelSmoothedCrossEntropy(hparams.label_smoothing),
        metrics=training_metrics(hparams.label_smoothing),
        jit_compile=jit_compile,
    )
    # Built now so that a checkpoint can restore the optimizer's slots before the first step.
    model.optimizer.build(model.trainable_variables)
    return model


def load_trained_model(model_name, hparams, problem, checkpoint_path):
    """The model with the weights of a training or averaged checkpoint, for inference.

    Not compiled: Keras then reads the model's variables and skips the optimizer's state that
    a training checkpoint also holds (Adam's two slots, twice the model's size), so nothing
    of it is read into memory. A checkpoint that does not fit the model is a
    CheckpointMismatchError: one of a run with other model hparams (`check_checkpoint_run`),
    one written by a model of other hparams (`check_stored_hparams`: the model's own, as the
    problem's data adapts them), one of another problem or vocabulary (`check_stored_problem`,
    `check_stored_vocabularies`), or one whose weights are missing, of other shapes or more
    than the model's."""
    check_checkpoint_run(checkpoint_path, hparams)
    model = build_model(model_name, hparams, problem)
    check_stored_hparams(checkpoint_path, model)
    check_stored_problem(checkpoint_path, problem)
    check_stored_vocabularies(checkpoint_path, problem, model.vocabulary_digests)
    try:
        model.load_weights(checkpoint_path)
    except OSError as error:
        if os.path.exists(checkpoint_path):
            raise
        raise checkpoints.removed_while_read(checkpoint_path) from error
    except ValueError as error:  # Keras: variables missing from the file, or of other shapes
        first_sentence = str(error).strip().split("\n")[0].split(". ")[0].rstrip(".:")
        raise CheckpointMismatchError(
            f"{checkpoint_path} does not fit this model: its weights have other names or "
            f"shapes than this model's (Keras: {first_sentence}); name a checkpoint of a run "
            f"with these hparams.") from error
    stored = stored_weight_count(checkpoint_path)
    if stored > len(model.weights):  # Keras ignores what the model has no place for
        raise CheckpointMismatchError(
            f"{checkpoint_path} does not fit this model: it holds {stored} weights, this model "
            f"has {len(model.weights)} (it is a deeper or larger model's checkpoint); name a "
            f"checkpoint of a run with these hparams.")
    return model


def stored_weight_count(checkpoint_path):
    """How many of a model's weights the Keras weights file holds (the optimizer's left out)."""
    import h5py

    count = 0

    def count_model_weight(name, item):
        nonlocal count
        count += isinstance(item, h5py.Dataset) and name.split("/")[0] != "optimizer"

    with h5py.File(checkpoint_path, "r") as weights:
        weights.visititems(count_model_weight)
    return count


class CheckpointMismatchError(UserError, ValueError):
    """A checkpoint whose weights do not fit the model built to load them."""


def check_checkpoint_run(checkpoint_path, hparams):
    """CheckpointMismatchError naming each model hparam in which the run `checkpoint_path`
    belongs to differs from `hparams`, where that run records its hparams. Checked before
    loading: Keras loads a deeper model's checkpoint into a shallower model without a word,
    reading the layers they share."""
    run_dir = run_records.run_dir_of(checkpoint_path)
    saved = hparams_lib.load(run_dir) if run_dir is not None else None
    _raise_if_different(checkpoint_path, hparams, saved, f"those of its run {run_dir}",
                        "its run")


def check_stored_hparams(checkpoint_path, model):
    """CheckpointMismatchError naming each hparam in which the model that wrote
    `checkpoint_path` (`checkpoints.stored_hparams`, where the file holds them) differs from
    `model`, built to load it: Keras loads the weights of a model with other heads or another
    normalization without a word, wherever the checkpoint lies."""
    _raise_if_different(checkpoint_path, model.hparams,
                        checkpoints.stored_hparams(checkpoint_path), "those stored in it",
                        "stored")


def check_stored_problem(checkpoint_path, problem):
    """CheckpointMismatchError when the model that wrote `checkpoint_path` was built for
    another problem than `problem`, where the file names it: a problem's reversed direction
    reads the same vocabulary, and its model would translate the wrong way without a word."""
    stored = checkpoints.stored_problem(checkpoint_path)
    if stored is not None and stored != problem.name:
        raise CheckpointMismatchError(
            f"{checkpoint_path} was trained on --problem={stored}, not {problem.name}; read it "
            f"with --problem={stored}, or name a checkpoint of {problem.name}.")


def check_stored_vocabularies(checkpoint_path, problem, digests):
    """CheckpointMismatchError naming the first side whose vocabulary file (`problem`'s, of
    `digests`) is not the one the model that wrote `checkpoint_path` was built for, where the
    file holds their digests: a model reads ids, and another vocabulary of the same size
    gives it other text without a word."""
    stored = checkpoints.stored_vocabulary_digests(checkpoint_path)
    differs = checkpoints.vocabulary_difference(stored or {}, problem, digests)
    if differs:
        raise CheckpointMismatchError(
            f"{checkpoint_path} was trained with {differs}; read it with the problem and "
            f"--data_dir it was trained with.")


def _raise_if_different(checkpoint_path, hparams, saved, whose, theirs):
    listed = warm_start.model_hparam_differences(hparams, saved, theirs) if saved else ""
    if listed:
        raise CheckpointMismatchError(
            f"{checkpoint_path} does not fit this model, whose hparams differ from {whose}: "
            f"{listed}; load it with the hparams it was trained with, or name a checkpoint "
            f"of a run with these.")


class TrainingRunBase:
    """Everything one `--output_dir` holds: model, optimizer state, checkpoints, summaries.
    The chief refuses a folder that holds a run of other hparams, and records the run's
    hparams.json and flags.txt there (`run_records`) as soon as the model is built.

    Args:
        problem: a Problem instance. hparams: its resolved HParams.
        output_dir: where checkpoints and TensorBoard events go.
        model: the compiled, built model (`compile_for_training`).
        train_step: called with an iterator of batches, takes one optimizer update and
            returns its `UpdateStats`.
        is_chief: whether this process writes the run's files.
        save_checkpoints_steps, save_checkpoints_minutes, keep_checkpoint_max: checkpointing.
        eval_every: training steps between evaluations. eval_steps: batches per evaluation
            (0: the whole eval set). log_every: steps between progress lines.
        decode_evaluation: optional `DecodeEvaluation` run at every evaluation: real BLEU or
            bracket F1 from beam search, written beside the teacher-forced scalars; the
            decoded texts go to `<output_dir>/eval/decodes-<step>.txt`, line by line with
            `inputs.txt` and `targets.txt` there.
        peak_tflops: the summed peak TFLOPS of the devices training, for model FLOPs
            utilisation (None: not reported).
        claim_output_dir: called by the chief once the model is built, before anything in
            `output_dir` is cleaned up or written (the trainer takes the folder's lock there).
        best_criterion: optional `best_checkpoint.Criterion`: every evaluation during
            training is ranked by it, the best checkpoint kept in `<output_dir>/best/`, and
            training ends early as it says.
        warm_start_from: optional checkpoint whose weights a run with no checkpoint of its own
            starts from, with a fresh optimizer at step 0 (fine-tuning; `warm_start` checks
            it fits first). A run that has checkpoints resumes from them instead.
        model_name: the registered model the subclass built, for flags.txt.

    Subclasses implement `_train_batches(step)` (an iterator of batches for the train step,
    resuming after `step` updates where the pipeline can) and `_eval_scalars()` (the
    teacher-forced eval metrics), and may extend `restore`.
    """

    def __init__(self, problem, hparams, output_dir, model, train_step, is_chief=True,
                 save_checkpoints_steps=1000, save_checkpoints_minutes=10.0,
                 keep_checkpoint_max=20, eval_every=1000, eval_steps=0, log_every=100,
                 decode_evaluation=None, peak_tflops=None, claim_output_dir=None,
                 best_criterion=None, warm_start_from=None, model_name="transformer",
                 print_fn=print):
        self.problem = problem
        self.hparams = hparams
        self.output_dir = output_dir
        self.model = model
        self.train_step = train_step
        self.is_chief = is_chief
        self.save_checkpoints_steps = save_checkpoints_steps
        self.save_checkpoints_minutes = save_checkpoints_minutes
        self.eval_every = eval_every
        self.eval_steps = eval_steps
        self.log_every = log_every
        self.decode_evaluation = decode_evaluation
        self.peak_tflops = peak_tflops
        self.print_fn = print_fn
        self.warm_start_from = warm_start_from
        if is_chief:
            run_records.check_recorded_problem(output_dir, problem.name)
            run_records.check_saved_hparams(output_dir, hparams)
            if claim_output_dir is not None:
                claim_output_dir()  # before anything in the folder is cleaned up or written
            run_records.save_run_record(output_dir, hparams, problem, model_name)
        self.checkpoints = checkpoints.CheckpointManager(
            output_dir, model, max_to_keep=keep_checkpoint_max, writes=is_chief
        )
        self.training_flops = training_flops(hparams, problem.target_vocab_size)
        self._writers = {}
        self._resumed_step = None  # `restore`'s, when it resumes from a checkpoint
        self._attention_example = None
        self.best = (best_checkpoint.BestCheckpoint(output_dir, best_criterion, writes=is_chief,
                                                    print_fn=print_fn)
                     if best_criterion else None)

    def _report_length_filter(self, mode):
        """Says how many of the mode's examples `max_length` leaves out (never truncated)."""
        counts = self.problem.dropped_by_max_length(mode, self.hparams.max_length)
        if counts is not None:
            dropped, total = counts
            self.print_fn(f"{mode} data: {total} examples, {dropped} ({dropped / total:.2%}) "
                          f"longer than max_length={self.hparams.max_length} left out.")

    def _writer(self, mode):
        if mode not in self._writers:
            self._writers[mode] = (
                summaries.ScalarWriter(os.path.join(self.output_dir, mode), self._resumed_step)
                if self.is_chief else summaries.NoWriter())
        return self._writers[mode]

    def restore(self):
        """Loads the latest checkpoint, if any, else the warm start's weights; returns the
        step it resumes from. A checkpoint of another vocabulary than the problem's (its data
        folder generated again from other text) is a CheckpointMismatchError."""
        latest = checkpoints.latest_checkpoint(self.output_dir)
        if latest is not None:
            check_stored_vocabularies(latest, self.problem,
                                      checkpoints.vocabulary_digests(self.problem))
        step = self.checkpoints.restore(latest)
        if step:
            self.print_fn(f"Resumed from {latest} at step {step}.")
            self._resumed_step = step
        elif self.warm_start_from:
            warm_start.load_weights_with_fresh_optimizer(self.model, self.warm_start_from)
            self.print_fn(f"Warm-started from {self.warm_start_from}: its weights, a fresh "
                          f"optimizer, step 0.")
        return step

    def train(self, train_steps, evaluate_every_segment=True):
        """Trains up to `train_steps` optimizer updates (counting those already done),
        evaluating every `eval_every` updates; checkpoints as configured and once more at the
        end. Each update takes `gradient_accumulation_steps` micro-batches.

        With a `best_criterion`, each evaluation updates the best checkpoint, and training
        ends (checkpointed) once early stopping says so, or at once when a resumed run's
        record says so already.

        Returns the scalars of the last evaluation, or None if none ran. Raises
        `NonFiniteLossError` (having saved nothing after the last good checkpoint) when an
        update's loss or gradient is NaN or infinite.
        """
        if not is_whole_number(train_steps) or train_steps < 1:
            raise ConfigurationError(f"train_steps={train_steps!r}: train to step 1 or later "
                                     f"(train_steps is a whole number of optimizer updates).")
        step = self.restore()
        eval_scalars = None
        if step >= train_steps:
            self.print_fn(f"Already trained {step} of {train_steps} steps; nothing to do.")
            return eval_scalars
        if self._stops_early(step):
            return eval_scalars
        self.problem.check_max_length(TRAIN, self.hparams.max_length)
        self._report_length_filter(TRAIN)
        iterator = self._train_batches(step)
        saver = checkpoints.CheckpointSchedule(
            self.checkpoints, self.save_checkpoints_steps, self.save_checkpoints_minutes
        )
        progress = summaries.ProgressReport(
            self._writer(TRAIN), train_steps, self.log_every, self.print_fn,
            flops_of=self._update_flops, peak_tflops=self.peak_tflops,
        )
        while step < train_steps:
            stats = self.train_step(iterator)
            previous, step = step, self.checkpoints.step()
            if not stats.finite:
                raise NonFiniteLossError(previous + 1, checkpoints.latest_checkpoint(
                    self.output_dir))
            if step == previous:  # a float16 step skipped by the loss scale
                continue
            progress.add(stats, step, summaries.learning_rate_of_update(
                self.model.optimizer, step))
            saver.after_update(step)
            if evaluate_every_segment and (step % self.eval_every == 0 or step == train_steps):
                eval_scalars = self.evaluate()
                if self._rank_evaluation(step, eval_scalars):
                    break
        self.checkpoints.save()
        return eval_scalars

    def _rank_evaluation(self, step, scalars):
        """Ranks the evaluation of `step` against the best; returns whether to stop early."""
        if self.best is None:
            return False
        decodes = (os.path.join(EVAL, f"decodes-{step}.txt")
                   if self.decode_evaluation is not None else None)
        self.best.add(step, scalars, functools.partial(checkpoints.save_weights, self.model),
                      decodes)
        return self._stops_early(step)

    def _stops_early(self, step):
        """Whether early stopping ends training at `step`; if so, says so."""
        if self.best is None or not self.best.should_stop(step):
            return False
        self.print_fn(self.best.stopping_line(step))
        return True

    def _update_flops(self, stats):
        """Model FLOPs (forward and backward) of an update, from its real lengths."""
        return self.training_flops.of_sums(stats.source_tokens, stats.target_tokens,
                                           stats.source_squares, stats.target_squares,
                                           stats.source_target_products)

    def _train_batches(self, step):
        raise NotImplementedError

    def _eval_scalars(self):
        raise NotImplementedError

    def evaluate(self):
        """Loss and token metrics on the eval set, and the decode evaluation's metrics,
        written to TensorBoard and printed."""
        scalars = self._eval_scalars()
        step = self.checkpoints.step()
        if self.decode_evaluation is not None:
            scalars.update(self._decode_and_score(step))
        self._writer(EVAL).write(scalars, step)
        if self.is_chief:
            self._write_attention_images(step)
        self.print_fn(f"eval at step {step} | {summaries.format_scalars(scalars)}")
        return scalars

    def _write_attention_images(self, step):
        """The fixed eval sentence's attention, every head, into `<output_dir>/eval_attention`
        (TensorBoard's images tab), so that a user watching the run sees the heads form."""
        if self._attention_example is None:
            self._attention_example = attention_images.fixed_eval_example(self.problem)
        images = attention_images.attention_images(self.model, self.problem,
                                                   *self._attention_example)
        attention_images.write_attention_images(
            os.path.join(self.output_dir, names.EVAL_ATTENTION_SUBDIR), step, images)

    def _decode_and_score(self, step):
        """The decode evaluation's metrics; writes its texts beside the eval events, so that
        the figures can be checked or recomputed with other tools."""
        evaluation = self.decode_evaluation
        decodes = evaluation.decode(self.model)
        if not self.is_chief:
            return evaluation.score(decodes)
        directory = os.path.join(self.output_dir, EVAL)
        os.makedirs(directory, exist_ok=True)
        for name, lines in (("inputs.txt", evaluation.input_texts),
                            ("targets.txt", evaluation.target_texts),
                            (f"decodes-{step}.txt", decodes)):
            with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
                f.writelines(f"{line}\n" for line in lines)
        return evaluation.score(decodes)
