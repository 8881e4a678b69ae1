"""TensorFlowTrainStep's one loss definition: the mean over all non-padding target tokens of
the global batch, however it is split over micro-batches and replicas.

Each case trains the same tiny Transformer from the same weights twice: split, and on the union
of the parts as one padded batch on one device. Adam's first moments after an update are
(1 - β1)·gradient, so comparing them compares the gradients; weights and reported loss are
compared too. Every case's parts hold unequal token counts, where a mean of per-part means
(what Keras's own accumulation and per-replica averaging give) is measurably different.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from step_cases import micro_batch, token_counts, union
from step_runner import BATCH_SPEC, StepRunner
from conftest import HANG_GUARD_S

TOLERANCE = 1e-6


def batches_iterator(batches):
    return iter(tf.data.Dataset.from_generator(lambda: iter(batches),
                                               output_signature=BATCH_SPEC))


ONE_DEVICE = StepRunner()


def largest_difference(arrays, others):
    assert len(arrays) == len(others) > 0
    return max(float(np.abs(a - b).max()) for a, b in zip(arrays, others))


def test_three_micro_batches_equal_one_step_on_their_union_for_adam():
    parts = [micro_batch(0, 2, 5, 3), micro_batch(1, 5, 9, 8), micro_batch(2, 3, 4, 6)]
    assert len(set(token_counts(parts))) == 3
    split = ONE_DEVICE.train(parts, accumulation_steps=3)
    whole = ONE_DEVICE.train([union(parts)])

    assert split.stats[0].target_tokens == whole.stats[0].target_tokens == sum(token_counts(parts))
    assert split.stats[0].loss_sum == pytest.approx(whole.stats[0].loss_sum, rel=TOLERANCE)
    assert split.iterations == 1  # one update, not three
    assert largest_difference(split.moments, whole.moments) < TOLERANCE
    assert largest_difference(split.weights, whole.weights) < TOLERANCE


def test_accumulated_gradient_is_not_the_mean_of_the_micro_batch_means():
    """The check above can fail: averaging the three micro-batches' own mean-loss gradients
    (k-step accumulation that ignores token counts) gives a first moment far from it."""
    parts = [micro_batch(0, 2, 5, 3), micro_batch(1, 5, 9, 8), micro_batch(2, 3, 4, 6)]
    whole = ONE_DEVICE.train([union(parts)])
    per_part = [ONE_DEVICE.train([part]).moments for part in parts]
    mean_of_means = [np.mean(moments, axis=0) for moments in zip(*per_part)]
    assert largest_difference(mean_of_means, whole.moments) > 1000 * TOLERANCE


def test_accumulation_counts_updates_and_reports_each_updates_token_means():
    """Two updates of k = 2: the optimizer's step is 2, and each update's stats cover its two
    micro-batches."""
    parts = [micro_batch(seed, 3, 6, 5) for seed in range(4)]
    trained = ONE_DEVICE.train(parts, accumulation_steps=2, updates=2)
    stats = trained.stats
    assert trained.iterations == 2
    assert [s.target_tokens for s in stats] == [
        sum(token_counts(parts[:2])), sum(token_counts(parts[2:]))]
    assert [s.source_tokens for s in stats] == [
        sum(int((f["inputs"] != 0).sum()) for f, _ in pair) for pair in (parts[:2], parts[2:])]
    for update, pair in zip(stats, (parts[:2], parts[2:])):
        source = np.concatenate([(f["inputs"] != 0).sum(1) for f, _ in pair])
        target = np.concatenate([(t != 0).sum(1) for _, t in pair])
        assert (update.source_squares, update.target_squares,
                update.source_target_products) == (
            (source ** 2).sum(), (target ** 2).sum(), (source * target).sum())
    assert all(s.finite for s in stats)


TWO_REPLICAS = textwrap.dedent(
    """
    import json, sys
    from t2t_repro.cli.quiet_tensorflow import import_tensorflow
    import_tensorflow()  # as the commands start
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from step_cases import filler_batch, micro_batch, token_counts, union
    from step_runner import BATCH_SPEC, StepRunner

    def distributed(strategy):
        # One input pipeline: its elements go to the replicas in turn.
        return lambda batches: strategy.distribute_datasets_from_function(
            lambda context: tf.data.Dataset.from_generator(lambda: iter(batches),
                                                           output_signature=BATCH_SPEC))

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    TWO_REPLICAS, ONE_DEVICE = StepRunner(mirrored, distributed(mirrored)), StepRunner()
    TWO_REPLICAS.prepare((1, 0.0), (2, 0.0), (1, 0.05))
    ONE_DEVICE.prepare((1, 0.0), (1, 0.05))

    def difference(a, b):
        return max(float(np.abs(x - y).max()) for x, y in zip(a, b))

    def compare(split_batches, union_of, accumulation_steps=1, clip_norm=0.0):
        split = TWO_REPLICAS.train(split_batches, accumulation_steps, clip_norm)
        whole = ONE_DEVICE.train([union(union_of)], clip_norm=clip_norm)
        return {
            "loss_split": split.stats[0].loss_sum / split.stats[0].target_tokens,
            "loss_whole": whole.stats[0].loss_sum / whole.stats[0].target_tokens,
            "tokens": [split.stats[0].target_tokens, whole.stats[0].target_tokens],
            "moments": difference(split.moments, whole.moments),
            "weights": difference(split.weights, whole.weights),
            "replica_spread": split.replica_spread,
        }

    small, large = micro_batch(0, 2, 4, 3), micro_batch(1, 6, 9, 8)
    more_small, more_large = micro_batch(2, 3, 5, 4), micro_batch(3, 4, 7, 6)
    filler = filler_batch(2, 4, 3)
    json.dump({
        "replica_tokens": token_counts([small, large]),
        "unequal_replicas": compare([small, large], [small, large]),
        "filler_replica": compare([large, filler], [large]),
        "replicas_and_micro_batches": compare(
            [small, large, more_small, more_large], [small, large, more_small, more_large], 2),
        # A norm far below the gradient's: clipping must see the summed gradient.
        "clipped_global_norm": compare([small, large], [small, large], clip_norm=0.05),
    }, sys.stdout)
    """
)


@pytest.fixture(scope="module")
def two_replica_report():
    result = subprocess.run(
        [sys.executable, "-c", TWO_REPLICAS, os.path.dirname(__file__)],
        capture_output=True, text=True, timeout=HANG_GUARD_S,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["unequal_replicas", "filler_replica",
                                  "replicas_and_micro_batches", "clipped_global_norm"])
def test_two_replicas_take_the_step_of_one_device_on_the_global_batch(two_replica_report, case):
    """Replicas holding unequal token counts; a replica holding only filler rows;
    2 replicas × 2 micro-batches; and gradients clipped to a global norm: each equals one
    device on the union, and both replicas hold the same weights and optimizer state."""
    small_tokens, large_tokens = two_replica_report["replica_tokens"]
    assert small_tokens * 3 < large_tokens
    report = two_replica_report[case]
    assert report["tokens"][0] == report["tokens"][1]
    assert report["loss_split"] == pytest.approx(report["loss_whole"], rel=TOLERANCE)
    assert report["moments"] < TOLERANCE
    assert report["weights"] < TOLERANCE
    assert report["replica_spread"] < TOLERANCE


def test_both_backends_steps_take_their_arguments_from_the_hparams():
    """What `train_step_arguments` gives `TensorFlowTrainStep` and `JaxTrainStep`: the loss's
    smoothing and chunks, accumulation and clipping; a benchmark's one batch a step; and a
    run saved before hparam loss_chunk_tokens gets the default chunks."""
    from t2t_repro.hparams import HParams, create_hparams
    from t2t_repro.training.run import train_step_arguments

    hparams = create_hparams("transformer_tiny", "label_smoothing=0.2,clip_grad_norm=3.0,"
                             "gradient_accumulation_steps=4,loss_chunk_tokens=64")
    assert train_step_arguments(hparams) == {"smoothing": 0.2, "accumulation_steps": 4,
                                             "clip_norm": 3.0, "loss_chunk_tokens": 64}
    assert train_step_arguments(hparams, micro_batches=1)["accumulation_steps"] == 1
    saved_before = HParams(**{name: value for name, value in hparams.values().items()
                              if name != "loss_chunk_tokens"})
    assert train_step_arguments(saved_before)["loss_chunk_tokens"] == 1024
