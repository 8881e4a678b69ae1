"""TensorFlowTrainingRun end to end on an algorithmic problem: learning, resuming, TensorBoard
events."""

import gc
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import read_scalars
from t2t_repro import registry
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.hparams import HParamsError, create_hparams
from t2t_repro.training import checkpoints, summaries
from t2t_repro.training.tensorflow.run import TensorFlowTrainingRun
from t2t_repro.training.run import check_training_hparams, compile_for_training
from t2t_repro.errors import UserError
from t2t_repro.training.local_evaluation import EmptyEvaluationError, LocalEvaluator
from t2t_repro.training.tensorflow.evaluation import ReplicatedEvaluator
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

# Small enough for a 2-core CPU: a 2-layer d_model 64 model for the learning test, a 1-layer
# d_model 32 model where only the mechanics of stopping and resuming matter.
LEARNING_HPARAMS = "batch_size=512"
MECHANICS_HPARAMS = "batch_size=256,hidden_size=32,filter_size=64,num_hidden_layers=1"
LEARNING_STEPS = 60
LOG_EVERY = 10
EVAL_EVERY = 30


@pytest.fixture(scope="module")
def reverse_problem():
    """algorithmic_reverse with fewer generated sequences (the default 100k take over a second
    to turn into a tf.data source, on every train() call); the task itself is unchanged."""
    registry.import_all()
    problem = registry.problems["algorithmic_reverse"]()
    problem.num_examples = {TRAIN: 3000, EVAL: 200}
    return problem


def new_run(problem, hparams, output_dir, seed, lines, **kwargs):
    keras.utils.set_random_seed(seed)
    return TensorFlowTrainingRun(
        problem, hparams, str(output_dir), tf.distribute.get_strategy(),
        print_fn=lines.append, **kwargs,
    )


def logged_steps(lines):
    """Step numbers of the progress lines ('step 12/30 | loss ...')."""
    return [int(m.group(1)) for m in (re.match(r"step (\d+)/", line) for line in lines) if m]


def logged_train_losses(lines):
    """Training losses of the progress lines, in order."""
    matches = (re.match(r"step \d+/\d+ \| loss ([\d.]+)", line) for line in lines)
    return [float(m.group(1)) for m in matches if m]


def model_state(run):
    """Copies of the weights and of the optimizer's step and Adam moments."""
    optimizer = run.model.optimizer
    return {
        "weights": [w.copy() for w in run.model.get_weights()],
        "iterations": int(keras.ops.convert_to_numpy(optimizer.iterations)),
        "momentums": slots(optimizer, "_momentum"),
        "velocities": slots(optimizer, "_velocity"),
    }


def slots(optimizer, suffix):
    """Adam's per-variable slots (first or second moments), in the optimizer's order."""
    return [
        keras.ops.convert_to_numpy(v).copy() for v in optimizer.variables
        if v.path.endswith(suffix)
    ]


def assert_same_state(actual, expected):
    assert actual["iterations"] == expected["iterations"]
    for key in ("weights", "momentums", "velocities"):
        assert len(actual[key]) == len(expected[key]) > 0
        for a, e in zip(actual[key], expected[key]):
            np.testing.assert_array_equal(a, e)


@pytest.fixture(scope="module")
def learning_run(reverse_problem, tmp_path_factory):
    """transformer_tiny trained 60 steps on algorithmic_reverse, evaluated at steps 0, 30, 60."""
    output_dir = tmp_path_factory.mktemp("learning_run")
    lines = []
    run = new_run(
        reverse_problem, create_hparams("transformer_tiny", LEARNING_HPARAMS), output_dir,
        seed=1234, lines=lines, save_checkpoints_steps=0, save_checkpoints_minutes=0,
        eval_every=EVAL_EVERY, eval_steps=3, log_every=LOG_EVERY,
    )
    before = run.evaluate()
    run.train(LEARNING_STEPS)
    after = run.evaluate()
    return {"run": run, "dir": output_dir, "lines": lines, "before": before, "after": after}


def test_loss_falls(learning_run):
    """60 Adam steps on reversal visibly learn: the eval loss on the same held-out batches
    falls well below its value at initialisation, as does the logged training loss."""
    before, after = learning_run["before"], learning_run["after"]
    assert after["loss"] < 0.85 * before["loss"], (before, after)
    assert after["neg_log_perplexity"] > before["neg_log_perplexity"] + 0.3
    train_losses = logged_train_losses(learning_run["lines"])
    assert len(train_losses) == LEARNING_STEPS // LOG_EVERY
    assert train_losses[-1] < 0.9 * train_losses[0], train_losses


def test_trained_step_count_and_final_checkpoint(learning_run):
    """train(60) makes exactly 60 updates and leaves a checkpoint of step 60."""
    run = learning_run["run"]
    assert int(keras.ops.convert_to_numpy(run.model.optimizer.iterations)) == LEARNING_STEPS
    assert [s for s, _ in checkpoints.list_checkpoints(str(learning_run["dir"]))] == [60]


def test_tensorboard_events(learning_run):
    """output_dir/train holds loss, accuracy, neg_log_perplexity and learning_rate every
    log_every steps; output_dir/eval holds loss, accuracy, neg_log_perplexity at each
    evaluation, with the values evaluate() returned."""
    output_dir = learning_run["dir"]
    train = read_scalars(os.path.join(output_dir, "train"))
    evals = read_scalars(os.path.join(output_dir, "eval"))

    train_steps = list(range(LOG_EVERY, LEARNING_STEPS + 1, LOG_EVERY))
    for tag in ("loss", "accuracy", "neg_log_perplexity", "learning_rate"):
        assert sorted(train.get(tag, {})) == train_steps, (tag, sorted(train))
    for tag in ("loss", "accuracy", "neg_log_perplexity"):
        assert sorted(evals.get(tag, {})) == [0, EVAL_EVERY, LEARNING_STEPS], (tag, sorted(evals))
    assert "learning_rate" not in evals

    for name in ("loss", "accuracy", "neg_log_perplexity"):
        assert evals[name][0] == pytest.approx(learning_run["before"][name], rel=1e-6)
        assert evals[name][LEARNING_STEPS] == pytest.approx(learning_run["after"][name], rel=1e-6)
    for step in train_steps:
        assert 0.0 <= train["accuracy"][step] <= 1.0
        assert train["neg_log_perplexity"][step] < 0.0


def test_logged_learning_rate_is_the_rate_of_that_step(learning_run):
    """The learning_rate scalar at step s is the rate update s used: transformer_tiny's
    2 · 64^-0.5 · min(s^-0.5, s · 400^-1.5), by hand."""
    train = read_scalars(os.path.join(learning_run["dir"], "train"))
    for step, rate in train["learning_rate"].items():
        expected = 2.0 * 64**-0.5 * min(step**-0.5, step * 400**-1.5)
        assert rate == pytest.approx(expected, rel=1e-5), step


def test_resume_after_restart(reverse_problem, tmp_path):
    """Train to 20 (checkpoints every 10), then a new TensorFlowTrainingRun on the same
    output_dir restores step 20 with identical weights, step counter and Adam moments, and
    train(30) makes only the remaining 10 updates."""
    hparams = create_hparams("transformer_tiny", MECHANICS_HPARAMS)
    settings = dict(save_checkpoints_steps=10, save_checkpoints_minutes=0, eval_every=1000,
                    log_every=1)
    first_lines = []
    first = new_run(reverse_problem, hparams, tmp_path, 1, first_lines, **settings)
    first.train(20, evaluate_every_segment=False)
    assert logged_steps(first_lines) == list(range(1, 21))
    assert [s for s, _ in checkpoints.list_checkpoints(str(tmp_path))] == [10, 20]
    saved = model_state(first)
    assert saved["iterations"] == 20
    assert any(np.any(m != 0) for m in saved["momentums"])

    lines = []
    second = new_run(reverse_problem, hparams, tmp_path, 2, lines, **settings)
    fresh = model_state(second)
    assert fresh["iterations"] == 0
    assert not np.allclose(fresh["weights"][0], saved["weights"][0])
    assert second.restore() == 20
    assert_same_state(model_state(second), saved)

    second.train(30, evaluate_every_segment=False)
    assert logged_steps(lines) == list(range(21, 31))
    assert model_state(second)["iterations"] == 30
    assert [s for s, _ in checkpoints.list_checkpoints(str(tmp_path))] == [10, 20, 30]

    # Asking again for 30 steps trains nothing.
    lines.clear()
    second.train(30, evaluate_every_segment=False)
    assert logged_steps(lines) == []
    assert model_state(second)["iterations"] == 30


class Killed(Exception):
    """Stands for the process dying."""


def test_resume_after_kill(reverse_problem, tmp_path):
    """A run killed at step 15 (checkpoints every 10, the kill also leaving a half-written
    temporary checkpoint behind) resumes from step 10 with that step's exact state. (That train()
    then goes on from the restored step is checked by test_resume_after_restart.)"""
    hparams = create_hparams("transformer_tiny", MECHANICS_HPARAMS)
    settings = dict(save_checkpoints_steps=10, save_checkpoints_minutes=0, eval_every=1000,
                    log_every=1)
    snapshots = {}

    def dies_at_step_15(line):
        # Progress lines come after the step's checkpoint is written (callback order), so the
        # state seen at step 10 is the state saved in ckpt-10.
        if line.startswith("step 10/"):
            snapshots[10] = model_state(doomed)
        if line.startswith("step 15/"):
            with open(os.path.join(tmp_path, ".tmp-4242-ckpt-15.weights.h5"), "wb") as f:
                f.write(b"\x89HDF\r\n half written")
            raise Killed()

    keras.utils.set_random_seed(1)
    doomed = TensorFlowTrainingRun(reverse_problem, hparams, str(tmp_path),
                                   tf.distribute.get_strategy(), print_fn=dies_at_step_15,
                                   **settings)
    with pytest.raises(Killed):
        doomed.train(40, evaluate_every_segment=False)
    assert [s for s, _ in checkpoints.list_checkpoints(str(tmp_path))] == [10]

    lines = []
    resumed = new_run(reverse_problem, hparams, tmp_path, 2, lines, **settings)
    assert resumed.restore() == 10
    assert_same_state(model_state(resumed), snapshots[10])
    assert any("at step 10" in line for line in lines)


# ---------------------------------------------------------------------------------------------
# Reported losses are token means, checked on a model whose logits are a lookup table: the
# logits of each target position are row `inputs[i, j]` of a fixed matrix, so NumPy can
# recompute every token's loss, accuracy and log-probability.

TABLE_VOCAB = 7
SMOOTHING = 0.1


class _TableModel(keras.Model):
    """Input ids -> logits = table[ids]. With `project=False` (as the train step calls the
    Transformer) it returns what those logits are made of: one-hot hidden states and the
    table transposed as the output projection."""

    def __init__(self, table):
        super().__init__(name="table_model")
        self.lookup = keras.layers.Embedding(TABLE_VOCAB, TABLE_VOCAB)
        self.lookup.build((None, None))
        self.lookup.embeddings.assign(table.astype("float32"))

    def call(self, ids, training=None, project=True):
        if project:
            return self.lookup(ids)
        return (keras.ops.one_hot(ids, TABLE_VOCAB), keras.ops.transpose(self.lookup.embeddings),
                None)


def _table_model(seed):
    """A Keras model: input ids -> logits = table[ids], compiled as the trainer compiles, with
    a learning rate of 0 (the table never changes, so NumPy can use it for every step)."""
    table = np.random.default_rng(seed).normal(size=(TABLE_VOCAB, TABLE_VOCAB)) * 2
    model = _TableModel(table)
    hparams = create_hparams("transformer_tiny", f"learning_rate_constant=0.0,"
                                                 f"label_smoothing={SMOOTHING}")
    return compile_for_training(model, hparams), table


def _table_batches(seed, shapes):
    """`(inputs, targets)` batches of the given (rows, length); each row has a random number
    of real target tokens, then padding."""
    rng = np.random.default_rng(seed)
    batches = []
    for rows, length in shapes:
        inputs = rng.integers(1, TABLE_VOCAB, size=(rows, length)).astype("int32")
        targets = rng.integers(1, TABLE_VOCAB, size=(rows, length)).astype("int32")
        for row, real in enumerate(rng.integers(1, length + 1, size=rows)):
            targets[row, real:] = 0
        batches.append((inputs, targets))
    return batches


def _numpy_token_values(table, batches):
    """Per real target token of `batches`: (smoothed KL loss, correct argmax, log p(label)),
    each a flat array, from the smoothed target q built explicitly."""
    losses, correct, log_p_label = [], [], []
    for inputs, targets in batches:
        logits = table[inputs[targets != 0]]
        labels = targets[targets != 0]
        log_p = logits - logits.max(axis=1, keepdims=True)
        log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
        q = np.full(logits.shape, SMOOTHING / (TABLE_VOCAB - 1))
        q[np.arange(len(labels)), labels] = 1 - SMOOTHING
        losses.append((q * (np.log(q) - log_p)).sum(axis=1))
        correct.append(logits.argmax(axis=1) == labels)
        log_p_label.append(log_p[np.arange(len(labels)), labels])
    return [np.concatenate(values) for values in (losses, correct, log_p_label)]


def _dataset(batches):
    return tf.data.Dataset.from_generator(
        lambda: iter(batches),
        output_signature=(tf.TensorSpec((None, None), tf.int32),
                          tf.TensorSpec((None, None), tf.int32)),
    )


@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_eval_loss_is_the_mean_over_all_eval_tokens():
    """Batches of 1 row of 2 positions, of 6 rows of 9 and of 2 rows of 3: every evaluation
    reports means over every real target token (NumPy), not means of per-batch means weighted
    by rows as Keras's loss tracker makes them. The evaluations: a single-machine TensorFlow
    run's (logits 5 positions at a time, so that chunks cross rows; and with XLA), the one
    each worker runs alone under MultiWorkerMirroredStrategy and JAX runs, and Keras's
    `evaluate` of the compiled model, for users who call it."""
    model, table = _table_model(seed=0)
    batches = _table_batches(seed=1, shapes=[(1, 2), (6, 9), (2, 3)])
    losses, correct, log_p_label = _numpy_token_values(table, batches)
    expected = {"loss": losses.mean(), "accuracy": correct.mean(),
                "neg_log_perplexity": log_p_label.mean()}
    logs = model.evaluate(_dataset(batches), verbose=0, return_dict=True)
    evaluations = {
        "replicated": ReplicatedEvaluator(model, tf.distribute.get_strategy(), SMOOTHING,
                                          chunk_tokens=5)(_dataset(batches)),
        "replicated, XLA": ReplicatedEvaluator(model, tf.distribute.get_strategy(), SMOOTHING,
                                               jit_compile=True)(_dataset(batches)),
        "alone": LocalEvaluator(model, SMOOTHING)(_dataset(batches)),
        "keras": {"loss": logs["token_mean_loss"], "accuracy": logs["accuracy"],
                  "neg_log_perplexity": logs["neg_log_perplexity"]},
    }
    for evaluation, scalars in evaluations.items():
        for name, value in expected.items():
            assert scalars[name] == pytest.approx(value, rel=1e-5), (evaluation, name)
    # The row-weighted mean of batch means really differs here.
    batch_means = [_numpy_token_values(table, [batch])[0].mean() for batch in batches]
    rows = [len(inputs) for inputs, _ in batches]
    assert abs(np.average(batch_means, weights=rows) - losses.mean()) > 1e-3


def test_an_evaluation_without_target_tokens_is_a_user_error_naming_max_length():
    """An eval set with no batches (empty, or every example past max_length) is a one-line
    error for the commands to report, from both evaluators, not a mean over zero tokens."""
    model, _ = _table_model(seed=0)
    evaluators = (ReplicatedEvaluator(model, tf.distribute.get_strategy(), SMOOTHING),
                  LocalEvaluator(model, SMOOTHING))
    for evaluator in evaluators:
        with pytest.raises(EmptyEvaluationError, match="max_length"):
            evaluator(_dataset([]))
    assert issubclass(EmptyEvaluationError, UserError)


def test_a_run_whose_max_length_leaves_no_training_example_is_refused_before_any_batch(
        reverse_problem, tmp_path):
    """From Python as from the trainer: a one-line error naming max_length, not a wait for a
    first batch that never comes (every example is 1 to 20 symbols and EOS)."""
    hparams = create_hparams("transformer_tiny", f"{MECHANICS_HPARAMS},max_length=1")
    run = new_run(reverse_problem, hparams, tmp_path, seed=1, lines=[])
    with pytest.raises(HParamsError, match="max_length=1 leaves out every train example"):
        run.train(2)
    assert issubclass(HParamsError, UserError)
    assert checkpoints.list_checkpoints(str(tmp_path)) == []


def test_a_batch_size_below_max_length_times_the_replicas_is_refused():
    """Each replica's share of a batch must hold one example of max_length tokens: 40 tokens
    do for one replica at max_length 24, not for two (48)."""
    hparams = create_hparams("transformer_tiny", "batch_size=40,max_length=24")
    check_training_hparams(hparams)
    with pytest.raises(HParamsError, match=r"batch_size=40 is below max_length=24 × 2 "
                                           r"replica\(s\).* at least 48"):
        check_training_hparams(hparams, replicas=2)


class _RecordingWriter:
    def __init__(self):
        self.scalars = {}

    def write(self, scalars, step):
        self.scalars[step] = scalars


@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_train_scalars_are_token_means_over_the_last_logging_interval():
    """Logging every 3 updates over 6 (an evaluation between updates 4 and 5): step 3 reports
    batches 0-2, step 6 batches 3, 0 and 1; each a token mean computed in NumPy, not a mean
    of per-batch means."""
    model, table = _table_model(seed=2)
    batches = _table_batches(seed=3, shapes=[(1, 2), (5, 8), (2, 3), (4, 6)])
    writer, lines = _RecordingWriter(), []
    report = summaries.ProgressReport(writer, total_steps=6, every_steps=3, print_fn=lines.append)
    train_step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), SMOOTHING)
    iterator = iter(_dataset(batches + batches[:2]))
    for step in range(1, 7):
        report.add(train_step(iterator), step, learning_rate=0.0)
        if step == 4:
            model.evaluate(_dataset(batches[1:2]), verbose=0)  # its figures must not leak in
            # Keras leaves evaluate's dataset iterator in a reference cycle; collected only at
            # the file's end, destroying it waited 7 to 20 s on its threads.
            gc.collect()
    assert sorted(writer.scalars) == [3, 6]
    for step, interval in ((3, batches[:3]), (6, batches[3:] + batches[:2])):
        losses, correct, log_p_label = _numpy_token_values(table, interval)
        logged = writer.scalars[step]
        assert logged["loss"] == pytest.approx(losses.mean(), rel=1e-5), step
        assert logged["accuracy"] == pytest.approx(correct.mean(), rel=1e-5), step
        assert logged["neg_log_perplexity"] == pytest.approx(log_p_label.mean(), rel=1e-5), step
    assert lines[0].startswith(f"step 3/6 | loss {writer.scalars[3]['loss']:.4f}")


def test_a_nan_update_stops_training_and_keeps_the_last_good_checkpoint(reverse_problem, tmp_path):
    """Weights poisoned after step 4 (checkpointed every 2 steps): step 5's loss is NaN, and
    training stops naming step 5 and ckpt-4, which stays the newest checkpoint and loads
    finite weights; no NaN checkpoint is written, not even the final one."""
    from t2t_repro.training.run import NonFiniteLossError

    hparams = create_hparams("transformer_tiny", MECHANICS_HPARAMS)
    run = new_run(reverse_problem, hparams, tmp_path, seed=5, lines=[],
                  save_checkpoints_steps=2, save_checkpoints_minutes=0, eval_every=100)
    real_step = run.train_step

    def step_poisoned_after_step_4(iterator):
        if run.checkpoints.step() == 4:
            kernel = run.model.trainable_variables[1]
            kernel.assign(tf.fill(kernel.shape, np.nan))
        return real_step(iterator)

    run.train_step = step_poisoned_after_step_4
    with pytest.raises(NonFiniteLossError) as stopped:
        run.train(8)
    newest = checkpoints.latest_checkpoint(str(tmp_path))
    assert newest.endswith("ckpt-4.weights.h5")
    assert stopped.value.step == 5 and stopped.value.last_checkpoint == newest
    assert "step 5" in str(stopped.value) and newest in str(stopped.value)
    assert [step for step, _ in checkpoints.list_checkpoints(str(tmp_path))] == [2, 4]
    fresh = new_run(reverse_problem, hparams, tmp_path, seed=6, lines=[])
    assert fresh.restore() == 4
    assert all(np.isfinite(w).all() for w in fresh.model.get_weights())


def test_accumulation_counts_updates_for_steps_schedule_and_checkpoints(reverse_problem, tmp_path):
    """With 3 micro-batches per update, --train_steps, the learning-rate schedule and the
    checkpoint steps count updates: a run stopped after update 2 and resumed ends at update 4,
    with checkpoints at updates 2 and 4, and the logged rate of update 4 is the schedule's 4th
    (not its 12th, the micro-batch count)."""
    hparams = create_hparams("transformer_tiny",
                             f"{MECHANICS_HPARAMS},gradient_accumulation_steps=3")
    settings = dict(save_checkpoints_steps=2, save_checkpoints_minutes=0, eval_every=100,
                    log_every=2)
    stopped_lines, lines = [], []
    new_run(reverse_problem, hparams, tmp_path, seed=7, lines=stopped_lines, **settings).train(2)
    resumed = new_run(reverse_problem, hparams, tmp_path, seed=7, lines=lines, **settings)
    resumed.train(4)
    assert [step for step, _ in checkpoints.list_checkpoints(str(tmp_path))] == [2, 4]
    assert logged_steps(stopped_lines) == [2] and logged_steps(lines) == [4]
    assert "at step 2." in lines[0]
    schedule = resumed.model.optimizer._learning_rate
    rate_of_update_4 = float(keras.ops.convert_to_numpy(schedule(3)))
    assert rate_of_update_4 != float(keras.ops.convert_to_numpy(schedule(11)))
    progress_line = next(line for line in lines if line.startswith("step 4/4"))
    assert f"lr {rate_of_update_4:.3g}" in progress_line
