"""Training-step cases from one traced TensorFlowTrainStep per configuration.

Tracing an update costs seconds; resetting a model's variables and its optimizer's costs
nothing. `StepRunner` keeps one model and step per (accumulation steps, clip norm), puts every
variable back to the values `step_cases.new_model` gives before each case, and returns a
snapshot of the result, so that every case starts exactly where a new model would.
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from step_cases import HPARAMS, adam_moments, new_model
from t2t_repro.hparams import create_hparams
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

BATCH_SPEC = ({"inputs": tf.TensorSpec((None, None), tf.int32),
               "targets": tf.TensorSpec((None, None), tf.int32)},
              tf.TensorSpec((None, None), tf.int32))


@dataclasses.dataclass
class TrainedState:
    """What a case compares after its updates: weights, Adam's first moments, the update
    count, each update's `UpdateStats`, and the largest difference between two replicas'
    copies of any model or optimizer variable (0 on one device)."""
    weights: list
    moments: list
    iterations: int
    stats: list
    replica_spread: float


def replica_spread(variables):
    spread = 0.0
    for variable in variables:
        copies = [np.asarray(copy) for copy in getattr(variable.value, "values", ())]
        spread = max([spread] + [float(np.abs(copy - copies[0]).max()) for copy in copies])
    return spread


class StepRunner:
    """Runs cases under `strategy`; `dataset_fn(batches)` gives the tf.data pipeline (or
    distributed dataset) the step pulls from."""

    def __init__(self, strategy=None, dataset_fn=None):
        self.strategy = strategy or tf.distribute.get_strategy()
        self.dataset_fn = dataset_fn or (lambda batches: tf.data.Dataset.from_generator(
            lambda: iter(batches), output_signature=BATCH_SPEC))
        self._prepared = {}

    def train(self, batches, accumulation_steps=1, clip_norm=0.0, updates=1):
        """`updates` updates from the starting weights on `batches`, in order."""
        model, step = self._model_and_step(accumulation_steps, clip_norm)
        iterator = iter(self.dataset_fn(batches))
        stats = [step(iterator) for _ in range(updates)]
        return TrainedState(weights=model.get_weights(), moments=adam_moments(model),
                            iterations=int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
                            stats=stats,
                            replica_spread=replica_spread(model.variables
                                                          + model.optimizer.variables))

    def prepare(self, *configurations):
        """Builds the model and step of each `(accumulation_steps, clip_norm)` now.
        `new_model` seeds TensorFlow, which empties its kernel caches: a step that has run
        sets its graph up again at its next call after another model is built (1-2 s under
        MirroredStrategy), so a runner that alternates configurations builds them all first."""
        for configuration in configurations:
            self._built(configuration)

    def _model_and_step(self, accumulation_steps, clip_norm):
        """The configuration's model and step, every variable back at its starting value."""
        model, step, variables, start = self._built((accumulation_steps, clip_norm))
        for variable, value in zip(variables, start):
            variable.assign(value)
        return model, step

    def _built(self, configuration):
        """(model, step, its variables, their starting values), built on first use."""
        if configuration not in self._prepared:
            accumulation_steps, clip_norm = configuration
            hparams = create_hparams("transformer_tiny", HPARAMS)
            with self.strategy.scope():
                model = new_model(hparams)
            step = TensorFlowTrainStep(model, self.strategy, hparams.label_smoothing,
                                       accumulation_steps=accumulation_steps,
                                       clip_norm=clip_norm)
            variables = list(model.variables) + list(model.optimizer.variables)
            start = [np.array(keras.ops.convert_to_numpy(v)) for v in variables]
            self._prepared[configuration] = model, step, variables, start
        return self._prepared[configuration]
