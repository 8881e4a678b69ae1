"""A training run on the current Keras backend, from explicit arguments:
`tensorflow.run.TensorFlowTrainingRun` on TensorFlow, `jax.run.JaxTrainingRun` on JAX
(`python -m t2t_repro.trainer` turns its flags into this call). Each backend's modules are
imported only when it is the one in use."""

from t2t_repro.data.problem import Problem
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import HParams
from t2t_repro.utils import backend
from t2t_repro.training.strategy_names import StrategyError


def create_training_run(problem, hparams, output_dir, strategy_name="auto", jit_compile=False,
                        seed=None, **settings):
    """A new training run of `hparams` on `problem`, writing to `output_dir`.

    Args:
        strategy_name: one of `strategy_names.STRATEGIES`; under JAX, auto and mirrored train
            on all local devices, default on one, and multi_worker is a StrategyError.
        jit_compile: compile the TensorFlow train step with XLA (under JAX it always is).
        seed: seeds weights, dropout and data order (`backend.set_random_seed`); None: unseeded.
        settings: the run's other arguments (model_name, checkpoint and evaluation settings,
            decode_evaluation, peak_tflops, claim_output_dir, best_criterion, warm_start_from;
            see `run.TrainingRunBase`).
    """
    _check_argument_types(problem, hparams)
    if seed is not None:
        backend.set_random_seed(seed)
    if backend.is_tensorflow():
        from t2t_repro.training.tensorflow.run import TensorFlowTrainingRun
        from t2t_repro.training.tensorflow.strategy import create_strategy

        return TensorFlowTrainingRun(problem, hparams, output_dir,
                                     create_strategy(strategy_name), jit_compile=jit_compile,
                                     **settings)
    import logging

    # JAX logs at INFO that it found no TPU library, on every machine without one.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    import jax

    from t2t_repro.training.jax.run import JaxTrainingRun

    if strategy_name == "multi_worker":
        raise StrategyError("--strategy=multi_worker is not supported under JAX: train on one "
                            "machine's devices (--strategy=auto), or with KERAS_BACKEND="
                            "tensorflow.")
    devices = jax.local_devices()[:1] if strategy_name == "default" else None
    return JaxTrainingRun(problem, hparams, output_dir, devices=devices, seed=seed, **settings)


def _check_argument_types(problem, hparams):
    """ConfigurationError when `problem` or `hparams` is a registered name or anything else
    than the object the run needs, saying how to make that object."""
    if not isinstance(problem, Problem):
        raise ConfigurationError(
            f"problem={problem!r} is not a Problem: pass one, such as "
            f"registry.problems[name](data_dir=...).")
    if not isinstance(hparams, HParams):
        raise ConfigurationError(
            f"hparams={hparams!r} is not HParams: pass them, such as "
            f"hparams.create_hparams(set_name, overrides).")
