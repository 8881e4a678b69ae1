"""One training run: build under a strategy, resume, train in segments, evaluate, checkpoint."""

import os
import warnings

import tensorflow as tf

from t2t_repro import registry
from t2t_repro.hparams import HParamsError
from t2t_repro.models.flops import training_flops
from t2t_repro.models.transformer import DTYPE_POLICIES
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.training import checkpoints, summaries
from t2t_repro.training import strategy as strategy_lib
from t2t_repro.training.local_evaluation import evaluate_locally
from t2t_repro.training.losses import LabelSmoothedCrossEntropy, training_metrics
from t2t_repro.training.optimizer import create_optimizer
from t2t_repro.training.peak_flops import compute_dtype
from t2t_repro.training.train_step import TrainStep

SCHEDULES = ("train_and_evaluate", "train", "evaluate")


class NonFiniteLossError(Exception):
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


def build_model(model_name, hparams, problem, dtype_policy="float32"):
    """The registered model for `problem`'s vocabularies, with all its weights created.

    Weights are float32 under every policy; training uses `hparams.dtype_policy`, inference
    float32, and either loads the other's checkpoints.
    """
    if dtype_policy not in DTYPE_POLICIES:
        raise HParamsError(f"hparam dtype_policy must be one of {', '.join(DTYPE_POLICIES)}, "
                           f"got '{dtype_policy}'.")
    model_class = registry.models[model_name]
    model = model_class(hparams, problem.input_vocab_size, problem.target_vocab_size,
                        dtype=dtype_policy)
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
    """The model with the weights of a training or averaged checkpoint, for inference."""
    # A checkpoint holds the optimizer's variables too; a compiled model has a place for them.
    model = compile_for_training(build_model(model_name, hparams, problem), hparams)
    model.load_weights(checkpoint_path)
    return model


class TrainingRun:
    """Everything one `--output_dir` holds: model, optimizer state, checkpoints, summaries.

    Args:
        problem: a Problem instance. hparams: its resolved HParams.
        output_dir: where checkpoints and TensorBoard events go.
        strategy: a tf.distribute strategy; variables are created in its scope.
        model_name: a registered model.
        save_checkpoints_steps, save_checkpoints_minutes, keep_checkpoint_max: checkpointing.
        eval_every: training steps between evaluations. eval_steps: batches per evaluation
            (0: the whole eval set). log_every: steps between progress lines.
        jit_compile: compile each replica's part of the train step with XLA.
        decode_evaluation: optional `DecodeEvaluation` run at every evaluation: real BLEU or
            bracket F1 from beam search, written beside the teacher-forced scalars; the
            decoded texts go to `<output_dir>/eval/decodes-<step>.txt`, line by line with
            `inputs.txt` and `targets.txt` there.
        peak_tflops: one device's peak TFLOPS at the training dtype, for model FLOPs
            utilisation; None looks it up for known GPUs (`peak_flops`).

    Under a multi-worker strategy every worker must be given the same `output_dir`, on storage
    all of them read (each restores the same checkpoint); only the chief writes there.
    """

    def __init__(
        self,
        problem,
        hparams,
        output_dir,
        strategy,
        model_name="transformer",
        save_checkpoints_steps=1000,
        save_checkpoints_minutes=10.0,
        keep_checkpoint_max=20,
        eval_every=1000,
        eval_steps=0,
        log_every=100,
        jit_compile=False,
        decode_evaluation=None,
        peak_tflops=None,
        print_fn=print,
    ):
        self.problem = problem
        self.hparams = hparams
        self.output_dir = output_dir
        self.strategy = strategy
        self.save_checkpoints_steps = save_checkpoints_steps
        self.save_checkpoints_minutes = save_checkpoints_minutes
        self.eval_every = eval_every
        self.eval_steps = eval_steps
        self.log_every = log_every
        self.decode_evaluation = decode_evaluation
        self.print_fn = print_fn
        self.is_chief = strategy_lib.is_chief(strategy)
        with strategy.scope():
            self.model = compile_for_training(
                build_model(model_name, hparams, problem, hparams.dtype_policy), hparams,
                jit_compile,
            )
        self.train_step = TrainStep(
            self.model, strategy, hparams.label_smoothing,
            accumulation_steps=hparams.gradient_accumulation_steps,
            clip_norm=hparams.clip_grad_norm, jit_compile=jit_compile,
        )
        self.checkpoints = checkpoints.CheckpointManager(
            output_dir, self.model, max_to_keep=keep_checkpoint_max, writes=self.is_chief
        )
        self.training_flops = training_flops(hparams, problem.target_vocab_size)
        device_peak = peak_tflops or strategy_lib.local_gpu_peak_tflops(compute_dtype(
            hparams.dtype_policy, tf.config.experimental.tensor_float_32_execution_enabled()))
        self.peak_tflops = device_peak * strategy.num_replicas_in_sync if device_peak else None
        self._writers = {}
        self._datasets = {}
        self._train_batches = None

    def _dataset(self, mode):
        """The mode's batched dataset, built once; each iteration over it starts afresh."""
        if mode not in self._datasets:
            self._report_length_filter(mode)
            replicas = (1 if strategy_lib.is_multi_worker(self.strategy)  # read locally
                        else self.strategy.num_replicas_in_sync)
            self._datasets[mode] = self.problem.dataset(mode, self.hparams,
                                                        num_replicas=replicas)
        return self._datasets[mode]

    def _report_length_filter(self, mode):
        """Says how many of the mode's examples `max_length` leaves out (never truncated)."""
        counts = self.problem.dropped_by_max_length(mode, self.hparams.max_length)
        if counts is not None:
            dropped, total = counts
            self.print_fn(f"{mode} data: {total} examples, {dropped} ({dropped / total:.2%}) "
                          f"longer than max_length={self.hparams.max_length} left out.")

    def _writer(self, mode):
        if mode not in self._writers:
            self._writers[mode] = (summaries.ScalarWriter(os.path.join(self.output_dir, mode))
                                   if self.is_chief else summaries.NoWriter())
        return self._writers[mode]

    def restore(self):
        """Loads the latest checkpoint, if any; returns the step it resumes from."""
        with self.strategy.scope():
            step = self.checkpoints.restore()
        self._check_replicas_resume_together(step)
        if step:
            self.print_fn(f"Resumed from {checkpoints.latest_checkpoint(self.output_dir)} "
                          f"at step {step}.")
        return step

    def _check_replicas_resume_together(self, step):
        """Workers that restored different steps (each read its own --output_dir) would train
        on different weights: that is an error, found by summing step and step² over replicas."""
        replicas = self.strategy.num_replicas_in_sync
        if replicas == 1:
            return
        moments = tf.constant([step, step * step], tf.float64)
        sums = self.strategy.reduce(
            tf.distribute.ReduceOp.SUM, self.strategy.run(lambda: tf.identity(moments)), axis=None
        ).numpy()
        if sums[0] != step * replicas or sums[1] != step * step * replicas:
            raise ValueError(
                f"this worker resumed from step {step}, but the workers' mean step is "
                f"{sums[0] / replicas:g}: every worker must be given the same --output_dir, "
                f"on storage all of them can read."
            )

    def train(self, train_steps, evaluate_every_segment=True):
        """Trains up to `train_steps` optimizer updates (counting those already done),
        evaluating every `eval_every` updates; checkpoints as configured and once more at the
        end. Each update takes `gradient_accumulation_steps` micro-batches.

        Returns the scalars of the last evaluation, or None if none ran. Raises
        `NonFiniteLossError` (having saved nothing after the last good checkpoint) when an
        update's loss or gradient is NaN or infinite.
        """
        step = self.restore()
        eval_scalars = None
        if step >= train_steps:
            self.print_fn(f"Already trained {step} of {train_steps} steps; nothing to do.")
            return eval_scalars
        iterator = iter(self._train_input())
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
        self.checkpoints.save()
        return eval_scalars

    def _update_flops(self, stats):
        """Model FLOPs (forward and backward) of an update, from its real lengths."""
        return self.training_flops.of_sums(stats.source_tokens, stats.target_tokens,
                                           stats.source_squares, stats.target_squares,
                                           stats.source_target_products)

    def _train_input(self):
        """The training batches, per replica: each input pipeline (worker) reads its own
        shards and batches to its replicas' share of the global token budget."""
        if self._train_batches is None:
            self._report_length_filter(TRAIN)
            self._train_batches = self.strategy.distribute_datasets_from_function(
                lambda context: self.problem.dataset(TRAIN, self.hparams, input_context=context)
            )
        return self._train_batches

    def evaluate(self):
        """Loss and token metrics on the eval set, and the decode evaluation's metrics,
        written to TensorBoard and printed."""
        dataset = self._dataset(EVAL)
        if strategy_lib.is_multi_worker(self.strategy):
            scalars = evaluate_locally(self.model, dataset, self.hparams.label_smoothing,
                                       self.eval_steps)
        else:
            with warnings.catch_warnings():
                # Reading the eval set to its end is the point, not the accident Keras warns of.
                warnings.filterwarnings("ignore", message="Your input ran out of data")
                logs = self.model.evaluate(
                    dataset, steps=self.eval_steps or None, verbose=0, return_dict=True
                )
            scalars = summaries.reported_scalars(logs)
        step = self.checkpoints.step()
        if self.decode_evaluation is not None:
            scalars.update(self._decode_and_score(step))
        self._writer(EVAL).write(scalars, step)
        self.print_fn(f"eval at step {step} | {summaries.format_scalars(scalars)}")
        return scalars

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
