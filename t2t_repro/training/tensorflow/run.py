"""One training run on TensorFlow: tf.data batches and a tf.distribute strategy."""

import tensorflow as tf

from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.training.tensorflow import strategy as strategy_lib
from t2t_repro.training.chunked_loss import hparams_chunk_tokens
from t2t_repro.training.local_evaluation import LocalEvaluator
from t2t_repro.training.tensorflow.evaluation import ReplicatedEvaluator
from t2t_repro.training.peak_flops import compute_dtype
from t2t_repro.training.run import (TrainingRunBase, build_model, check_training_hparams,
                                    compile_for_training, train_step_arguments)
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep


class TensorFlowTrainingRun(TrainingRunBase):
    """`TrainingRunBase` on TensorFlow.

    Args (besides the base class's, which this builds: the model and its train step):
        strategy: a tf.distribute strategy; variables are created in its scope.
        model_name: a registered model.
        jit_compile: compile each replica's part of the train step with XLA.
        peak_tflops: one device's peak TFLOPS at the training dtype; None looks it up for
            known GPUs (`peak_flops`).

    Under a multi-worker strategy every worker must be given the same `output_dir`, on storage
    all of them read (each restores the same checkpoint); only the chief writes there.
    """

    def __init__(self, problem, hparams, output_dir, strategy, model_name="transformer",
                 jit_compile=False, peak_tflops=None, **kwargs):
        check_training_hparams(hparams, strategy.num_replicas_in_sync)  # before anything is built
        self.strategy = strategy
        with strategy.scope():
            model = compile_for_training(
                build_model(model_name, hparams, problem, hparams.dtype_policy), hparams,
                jit_compile,
            )
        chunk_tokens = hparams_chunk_tokens(hparams)
        train_step = TensorFlowTrainStep(model, strategy, jit_compile=jit_compile,
                                         **train_step_arguments(hparams))
        device_peak = peak_tflops or strategy_lib.local_gpu_peak_tflops(compute_dtype(
            hparams.dtype_policy, tf.config.experimental.tensor_float_32_execution_enabled()))
        super().__init__(
            problem, hparams, output_dir, model, train_step,
            is_chief=strategy_lib.is_chief(strategy),
            peak_tflops=device_peak * strategy.num_replicas_in_sync if device_peak else None,
            model_name=model_name, **kwargs)
        self._eval_dataset = None
        self._train_dataset = None
        self._evaluator = (  # a multi-worker run's workers each evaluate alone
            LocalEvaluator(model, hparams.label_smoothing, chunk_tokens)
            if strategy_lib.is_multi_worker(strategy)
            else ReplicatedEvaluator(model, strategy, hparams.label_smoothing, chunk_tokens,
                                     jit_compile))

    def restore(self):
        with self.strategy.scope():
            step = super().restore()
        self._check_replicas_resume_together(step)
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

    def _train_batches(self, step):
        """The training batches, per replica: each input pipeline (worker) reads its own
        shards and batches to its replicas' share of the global token budget. The data starts
        afresh on resuming."""
        if self._train_dataset is None:
            self._train_dataset = self.strategy.distribute_datasets_from_function(
                lambda context: self.problem.dataset(TRAIN, self.hparams, input_context=context)
            )
        return iter(self._train_dataset)

    def eval_dataset(self):
        """The eval batches, built once: rows a multiple of the replicas, which share each
        batch (under a multi-worker strategy each worker reads them all alone)."""
        if self._eval_dataset is None:
            self._report_length_filter(EVAL)
            replicas = (1 if strategy_lib.is_multi_worker(self.strategy)  # read locally
                        else self.strategy.num_replicas_in_sync)
            self._eval_dataset = self.problem.dataset(EVAL, self.hparams, num_replicas=replicas)
        return self._eval_dataset

    def _eval_scalars(self):
        return self._evaluator(self.eval_dataset(), self.eval_steps)
