"""One training run on JAX, without TensorFlow: NumPy batches from the token arrays, a jitted
train step, and several local devices through `keras.distribution.DataParallel`."""

import jax
import keras

from t2t_repro.data.array_batches import prefetched
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.training.chunked_loss import hparams_chunk_tokens
from t2t_repro.training.jax.train_step import JaxTrainStep, lookahead_pays
from t2t_repro.training.local_evaluation import LocalEvaluator
from t2t_repro.training.peak_flops import compute_dtype, peak_tflops
from t2t_repro.training.run import (TrainingRunBase, build_model, check_training_hparams,
                                    compile_for_training, train_step_arguments)


def data_parallel_placement(devices):
    """With several devices: sets Keras's `DataParallel` distribution over them (variables
    replicated), and returns the function that shards a batch's rows over them; None with one
    device."""
    if len(devices) < 2:
        return None
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    rows = jax.sharding.NamedSharding(distribution.device_mesh.backend_mesh,
                                      jax.sharding.PartitionSpec(distribution.batch_dim_name))
    return lambda batch: jax.device_put(batch, rows)


class JaxTrainingRun(TrainingRunBase):
    """`TrainingRunBase` on JAX.

    Args (besides the base class's, which this builds: the model and its train step):
        model_name: a registered model.
        devices: the JAX devices to train on (default: all local ones); batches are split
            over them by rows, and each batch's rows are a multiple of their number.
        seed: the data order's seed (None: 0).
        peak_tflops: one device's peak TFLOPS at the training dtype; None looks it up by the
            device's name (`peak_flops`; CPUs have none).

    The data position is resumed with the weights: after n updates of k micro-batches the
    pipeline restarts at batch n·k of the same order.
    """

    def __init__(self, problem, hparams, output_dir, model_name="transformer", devices=None,
                 seed=None, peak_tflops=None, **kwargs):
        devices = devices or jax.local_devices()
        check_training_hparams(hparams, len(devices))
        for mode in (TRAIN, EVAL):  # missing arrays are an error before anything is written
            problem.token_arrays(mode)
        self._place_batch = data_parallel_placement(devices) or (lambda batch: batch)
        model = compile_for_training(
            build_model(model_name, hparams, problem, hparams.dtype_policy), hparams)
        chunk_tokens = hparams_chunk_tokens(hparams)
        train_step = JaxTrainStep(model, place_batch=self._place_batch,
                                  lookahead=lookahead_pays(devices),
                                  **train_step_arguments(hparams))
        # XLA runs float32 matmuls in TF32 on GPUs that have it, as TensorFlow does.
        device_peak = peak_tflops or peak_tflops_of(devices[0], hparams.dtype_policy)
        super().__init__(problem, hparams, output_dir, model, train_step,
                         peak_tflops=device_peak * len(devices) if device_peak else None,
                         model_name=model_name, **kwargs)
        self._num_devices = len(devices)
        self._seed = seed
        self._eval_batches = None
        self._evaluator = LocalEvaluator(model, hparams.label_smoothing, chunk_tokens)

    def _train_batches(self, step):
        batches = self.problem.array_batches(TRAIN, self.hparams, seed=self._seed,
                                             num_devices=self._num_devices)
        return prefetched(batches.batches(start=step * self.hparams.gradient_accumulation_steps))

    def _eval_scalars(self):
        if self._eval_batches is None:
            self._report_length_filter(EVAL)
            self._eval_batches = self.problem.array_batches(EVAL, self.hparams,
                                                            num_devices=self._num_devices)
        return self._evaluator((self._place_batch(batch) for batch in self._eval_batches),
                               self.eval_steps)


def peak_tflops_of(device, dtype_policy):
    """One JAX device's peak TFLOPS at the policy's matmul dtype, or None (CPUs, unknown
    GPUs)."""
    return peak_tflops(device.device_kind, compute_dtype(dtype_policy, tensor_float_32=True))
