"""One training run: build under a strategy, resume, train in segments, evaluate, checkpoint."""

import os
import warnings

import keras

from t2t_repro import registry
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.training import checkpoints, summaries
from t2t_repro.training.losses import LabelSmoothedCrossEntropy, training_metrics
from t2t_repro.training.optimizer import create_optimizer

SCHEDULES = ("train_and_evaluate", "train", "evaluate")


def build_model(model_name, hparams, problem):
    """The registered model for `problem`'s vocabularies, with all its weights created."""
    model_class = registry.models[model_name]
    model = model_class(hparams, problem.input_vocab_size, problem.target_vocab_size)
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
        jit_compile: compile the train step with XLA.
        decode_evaluation: optional `DecodeEvaluation` run at every evaluation: real BLEU or
            bracket F1 from beam search, written beside the teacher-forced scalars; the
            decoded texts go to `<output_dir>/eval/decodes-<step>.txt`, line by line with
            `inputs.txt` and `targets.txt` there.
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
        with strategy.scope():
            self.model = compile_for_training(
                build_model(model_name, hparams, problem), hparams, jit_compile
            )
        self.checkpoints = checkpoints.CheckpointManager(
            output_dir, self.model, max_to_keep=keep_checkpoint_max
        )
        self._writers = {}
        self._datasets = {}

    def _dataset(self, mode):
        """The mode's batched dataset, built once; each iteration over it starts afresh."""
        if mode not in self._datasets:
            self._report_length_filter(mode)
            self._datasets[mode] = self.problem.dataset(
                mode, self.hparams, num_replicas=self.strategy.num_replicas_in_sync
            )
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
            self._writers[mode] = summaries.ScalarWriter(os.path.join(self.output_dir, mode))
        return self._writers[mode]

    def restore(self):
        """Loads the latest checkpoint, if any; returns the step it resumes from."""
        with self.strategy.scope():
            step = self.checkpoints.restore()
        if step:
            self.print_fn(f"Resumed from {checkpoints.latest_checkpoint(self.output_dir)} "
                          f"at step {step}.")
        return step

    def train(self, train_steps, evaluate_every_segment=True):
        """Trains up to `train_steps` (counting steps already done), evaluating every
        `eval_every` steps; checkpoints as configured and once more at the end.

        Returns the scalars of the last evaluation, or None if none ran.
        """
        step = self.restore()
        eval_scalars = None
        if step >= train_steps:
            self.print_fn(f"Already trained {step} of {train_steps} steps; nothing to do.")
            return eval_scalars
        dataset = self._dataset(TRAIN)
        callbacks = [
            checkpoints.CheckpointCallback(
                self.checkpoints, self.save_checkpoints_steps, self.save_checkpoints_minutes
            ),
            summaries.ProgressLogger(
                self._writer(TRAIN), train_steps, self.log_every, self.print_fn
            ),
        ]
        while step < train_steps:
            segment_end = min((step // self.eval_every + 1) * self.eval_every, train_steps)
            self.model.fit(
                dataset,
                steps_per_epoch=segment_end - step,
                epochs=1,
                callbacks=callbacks,
                shuffle=False,  # the dataset shuffles itself
                verbose=0,
            )
            step = self.checkpoints.step()
            if evaluate_every_segment:
                eval_scalars = self.evaluate()
        self.checkpoints.save()
        return eval_scalars

    def evaluate(self):
        """Loss and token metrics on the eval set, and the decode evaluation's metrics,
        written to TensorBoard and printed."""
        dataset = self._dataset(EVAL)
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
        directory = os.path.join(self.output_dir, EVAL)
        os.makedirs(directory, exist_ok=True)
        for name, lines in (("inputs.txt", evaluation.input_texts),
                            ("targets.txt", evaluation.target_texts),
                            (f"decodes-{step}.txt", decodes)):
            with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
                f.writelines(f"{line}\n" for line in lines)
        return evaluation.score(decodes)
