"""TensorFlow's train step and evaluation each trace the model once for batches of every
bucket shape (their functions are traced ahead for the batches' spec, lengths unknown): a
trace per new shape would cost a trainer start a second or more at its second bucket."""

import numpy as np
import pytest
import tensorflow as tf

from step_cases import HPARAMS, micro_batch, new_model
from step_runner import BATCH_SPEC
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer
from t2t_repro.training.local_evaluation import batch_sums_fn, token_means
from t2t_repro.training.tensorflow.evaluation import ReplicatedEvaluator
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

BATCHES = [micro_batch(0, 2, 5, 3), micro_batch(1, 5, 9, 8), micro_batch(2, 3, 4, 6)]


def dataset(batches):
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=BATCH_SPEC)


@pytest.fixture
def model_calls(monkeypatch):
    """The model's calls from Python: one per trace of a function that calls it."""
    calls = []
    original = Transformer.call

    def counted(self, *args, **kwargs):
        calls.append(tf.executing_eagerly())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Transformer, "call", counted)
    return calls


def test_an_update_traces_the_model_once_for_batches_of_three_shapes(model_calls):
    model = new_model(create_hparams("transformer_tiny", HPARAMS))
    step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), 0.1)
    iterator = iter(dataset(BATCHES))
    del model_calls[:]
    stats = [step(iterator) for _ in BATCHES]
    assert [s.target_tokens for s in stats] == [int((t != 0).sum()) for _, t in BATCHES]
    assert model_calls == [False]


def test_an_evaluation_traces_the_model_once_and_sums_every_batch(model_calls):
    model = new_model(create_hparams("transformer_tiny", HPARAMS))
    evaluate = ReplicatedEvaluator(model, tf.distribute.get_strategy(), 0.1)
    del model_calls[:]
    means = evaluate(dataset(BATCHES))
    assert model_calls == [False]
    eager_sums = batch_sums_fn(model, 0.1)
    expected = token_means(np.asarray(eager_sums(features, targets)) for features, targets
                           in BATCHES)
    assert means == pytest.approx(expected, rel=1e-6)
