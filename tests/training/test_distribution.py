"""Training under MirroredStrategy takes the same step, and reports the same loss, as one device.

Keras sums gradients over replicas, so each replica's loss must be its 1/N share. The checks run
in one subprocess because the two logical CPU devices must be configured before TensorFlow starts;
they run without XLA (DESIGN §6: jit_compile under MirroredStrategy on CPU devices fails). The
models have one layer: what is checked (how replicas share a step and a batch) does not depend
on depth.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import HANG_GUARD_S

TWO_CPU_DEVICES = textwrap.dedent(
    """
    import json, sys
    from t2t_repro.cli.quiet_tensorflow import import_tensorflow
    import_tensorflow()  # as the commands start
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    reports = {}
    """
)

ONE_STEP_BOTH_WAYS = textwrap.dedent(
    """
    import keras
    import numpy as np
    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer
    from t2t_repro.training.losses import LabelSmoothedCrossEntropy

    hparams = create_hparams("transformer_tiny",
                             "layer_prepostprocess_dropout=0.0,num_hidden_layers=1")
    rng = np.random.default_rng(0)
    # Four sentences with the same number of real tokens, so that the mean over each
    # replica's two sentences, averaged over replicas, is the mean over all four.
    inputs = np.zeros((4, 7), np.int32)
    targets = np.zeros((4, 6), np.int32)
    inputs[:, :5] = rng.integers(2, 12, (4, 5))
    targets[:, :4] = rng.integers(2, 12, (4, 4))
    batch = tf.data.Dataset.from_tensors(({"inputs": inputs, "targets": targets}, targets))

    keras.utils.set_random_seed(1)
    initial = Transformer(hparams, 12, 12).build_weights().get_weights()

    def one_sgd_step(strategy):
        with strategy.scope():
            model = Transformer(hparams, 12, 12).build_weights()
            model.set_weights(initial)
            model.compile(optimizer=keras.optimizers.SGD(0.5),
                          loss=LabelSmoothedCrossEntropy(0.1))
        loss = model.fit(batch, epochs=1, verbose=0).history["loss"][0]
        return loss, model.get_weights()

    loss_one, weights_one = one_sgd_step(tf.distribute.get_strategy())
    loss_two, weights_two = one_sgd_step(mirrored)
    reports["one_step"] = {
        "replicas": mirrored.num_replicas_in_sync,
        "loss_one_device": loss_one,
        "loss_mirrored": loss_two,
        "largest_update": max(float(np.abs(w - i).max()) for w, i in zip(weights_one, initial)),
        "largest_weight_difference": max(
            float(np.abs(a - b).max()) for a, b in zip(weights_one, weights_two)),
    }
    """
)

TRAIN_AND_EVALUATE_MIRRORED = textwrap.dedent(
    """
    from t2t_repro import registry
    from t2t_repro.training.tensorflow.run import TensorFlowTrainingRun

    problem = registry.problems["algorithmic_copy"]()
    hparams = create_hparams("transformer_tiny",
                             "batch_size=300,max_length=24,num_hidden_layers=1")
    # Six eval batches are enough to show evaluation runs; the whole eval set takes minutes.
    run = TensorFlowTrainingRun(problem, hparams, sys.argv[1], mirrored, eval_every=8,
                      eval_steps=6, log_every=8, print_fn=lambda *args: None)
    rows = [int(features["inputs"].shape[0])
            for features, _ in run.eval_dataset()]
    evaluated = run.train(8)
    # The same six batches on the first device alone, without the replicas.
    from t2t_repro.training.local_evaluation import LocalEvaluator
    alone = LocalEvaluator(run.model, hparams.label_smoothing)(iter(run.eval_dataset()), 6)
    reports["train_and_evaluate"] = {"eval": evaluated, "eval_alone": alone,
                                     "eval_batch_rows": rows}
    json.dump(reports, sys.stdout)
    """
)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Both checks' reports, from one fresh Python that configures 2 logical CPUs before
    TensorFlow starts (its argument: the mirrored run's folder)."""
    script = TWO_CPU_DEVICES + ONE_STEP_BOTH_WAYS + TRAIN_AND_EVALUATE_MIRRORED
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path_factory.mktemp("mirrored_run"))],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow"),
        timeout=HANG_GUARD_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_mirrored_step_equals_single_device_step(reports):
    report = reports["one_step"]
    assert report["replicas"] == 2
    np.testing.assert_allclose(report["loss_mirrored"], report["loss_one_device"], rtol=1e-5)
    # A doubled gradient would move some weight by a further ~0.1; float rounding moves it by ~1e-7.
    assert report["largest_update"] > 1e-2
    assert report["largest_weight_difference"] < 1e-5


def test_mirrored_training_and_evaluation_run_on_token_budget_batches(reports):
    """Under MirroredStrategy the trainer's batches split evenly over the replicas, a whole
    train-and-evaluate cycle runs on the real pipeline, and its evaluation, each replica taking
    half of every batch, gives what one device gives alone on the same batches."""
    report = reports["train_and_evaluate"]
    assert report["eval_batch_rows"] and all(rows % 2 == 0 for rows in report["eval_batch_rows"])
    assert np.isfinite(report["eval"]["loss"]) and report["eval"]["accuracy"] > 0
    for name in ("loss", "accuracy", "neg_log_perplexity"):
        assert report["eval"][name] == pytest.approx(report["eval_alone"][name], rel=1e-5), name
