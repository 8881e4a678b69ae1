"""CheckpointManager and CheckpointSchedule on a tiny compiled Keras model."""

import os
import re
import types

import keras
import numpy as np
import pytest

from t2t_repro.errors import ConfigurationError
from t2t_repro.training import checkpoints
from t2t_repro.training.checkpoints import CheckpointManager, CheckpointSchedule


def tiny_compiled_model(seed=0):
    """A compiled Dense model whose optimizer's slots exist (as TensorFlowTrainingRun builds
    them)."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def toy_data(count=40):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(count, 3)).astype("float32")
    return x, x[:, :2] * 2.0 - 1.0


def train_steps(model, steps, callbacks=()):
    x, y = toy_data(4 * steps)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=list(callbacks))


class AfterEachUpdate(keras.callbacks.Callback):
    """Calls `schedule.after_update(step)` after each step, as the training loop does."""

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_train_batch_end(self, batch, logs=None):
        self.schedule.after_update(iterations(self.model))


def iterations(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def slot_values(model):
    """Adam's first and second moments, in the optimizer's order."""
    found = [
        keras.ops.convert_to_numpy(v) for v in model.optimizer.variables
        if v.path.endswith(("_momentum", "_velocity"))
    ]
    assert len(found) == 2 * len(model.trainable_variables)
    return found


def checkpoint_steps(directory):
    return [step for step, _ in checkpoints.list_checkpoints(directory)]


def test_keeps_last_k(tmp_path):
    """Saving at steps 1..5 with max_to_keep=3 leaves exactly ckpt-3, ckpt-4, ckpt-5 on disk."""
    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path), model, max_to_keep=3)
    for step in range(1, 6):
        model.optimizer.iterations.assign(step)
        path = manager.save()
        assert os.path.basename(path) == f"ckpt-{step}.weights.h5"
    assert checkpoint_steps(tmp_path) == [3, 4, 5]
    assert sorted(os.listdir(tmp_path)) == [
        "ckpt-3.weights.h5", "ckpt-4.weights.h5", "ckpt-5.weights.h5"
    ]
    assert checkpoints.latest_checkpoint(str(tmp_path)) == os.path.join(
        str(tmp_path), "ckpt-5.weights.h5"
    )


def test_max_to_keep_must_be_positive(tmp_path):
    """Keeping zero checkpoints would delete every save; it is refused."""
    with pytest.raises(ValueError, match="max_to_keep"):
        CheckpointManager(str(tmp_path), tiny_compiled_model(), max_to_keep=0)


def test_save_leaves_no_partial_file(tmp_path):
    """A completed save leaves only the final file: the temporary name is renamed away."""
    model = tiny_compiled_model()
    model.optimizer.iterations.assign(12)
    CheckpointManager(str(tmp_path), model).save()
    assert os.listdir(tmp_path) == ["ckpt-12.weights.h5"]


def test_interrupted_write_never_looks_complete(tmp_path, monkeypatch):
    """A write that dies half-way (here: bytes written, then an error) leaves no file under the
    checkpoint name, so the previous checkpoint stays the latest."""
    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path), model)
    model.optimizer.iterations.assign(5)
    manager.save()

    def dying_save_weights(path):
        with open(path, "wb") as f:
            f.write(b"\x89HDF half a file")
        raise OSError("killed mid-write")

    monkeypatch.setattr(model, "save_weights", dying_save_weights)
    model.optimizer.iterations.assign(10)
    with pytest.raises(OSError):
        manager.save()
    assert not os.path.exists(os.path.join(tmp_path, "ckpt-10.weights.h5"))
    assert checkpoint_steps(tmp_path) == [5]


def test_stray_partial_file_is_not_a_checkpoint(tmp_path):
    """A temporary checkpoint left by a killed run is neither listed nor restored from."""
    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path), model)
    model.optimizer.iterations.assign(7)
    manager.save()
    with open(os.path.join(tmp_path, ".tmp-4242-ckpt-9.weights.h5"), "wb") as f:
        f.write(b"garbage")
    assert checkpoint_steps(tmp_path) == [7]
    assert checkpoints.latest_checkpoint(str(tmp_path)).endswith("ckpt-7.weights.h5")
    model.optimizer.iterations.assign(0)
    assert manager.restore() == 7


def test_restore_returns_saved_step_with_weights_and_optimizer(tmp_path):
    """After 7 real updates and a save, more training changes everything; restore brings back
    step 7, the weights and Adam's moments exactly."""
    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path), model)
    train_steps(model, 7)
    assert iterations(model) == 7
    manager.save()
    saved_weights = [w.copy() for w in model.get_weights()]
    saved_slots = slot_values(model)
    assert any(np.any(s != 0) for s in saved_slots)

    train_steps(model, 3)
    assert iterations(model) == 10
    assert not np.allclose(model.get_weights()[0], saved_weights[0])

    assert manager.restore() == 7
    assert iterations(model) == 7
    for restored, saved in zip(model.get_weights(), saved_weights):
        np.testing.assert_array_equal(restored, saved)
    for restored, saved in zip(slot_values(model), saved_slots):
        np.testing.assert_array_equal(restored, saved)


def test_restore_into_fresh_model(tmp_path):
    """A new model (different initialisation) restored from the directory matches the saved one:
    this is how a restarted process resumes."""
    model = tiny_compiled_model(seed=0)
    train_steps(model, 4)
    CheckpointManager(str(tmp_path), model).save()

    fresh = tiny_compiled_model(seed=1)
    assert not np.allclose(fresh.get_weights()[0], model.get_weights()[0])
    assert CheckpointManager(str(tmp_path), fresh).restore() == 4
    for restored, saved in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(restored, saved)
    for restored, saved in zip(slot_values(fresh), slot_values(model)):
        np.testing.assert_array_equal(restored, saved)


def test_restore_specific_path_and_empty_directory(tmp_path):
    """restore() of an empty directory returns 0 and changes nothing; restore(path) loads that
    checkpoint and returns its step, not the latest one's."""
    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path / "ckpts"), model)
    before = [w.copy() for w in model.get_weights()]
    assert manager.restore() == 0
    for now, then in zip(model.get_weights(), before):
        np.testing.assert_array_equal(now, then)

    train_steps(model, 2)
    older = manager.save()
    older_weights = [w.copy() for w in model.get_weights()]
    train_steps(model, 3)
    manager.save()
    assert manager.restore(older) == 2
    for now, then in zip(model.get_weights(), older_weights):
        np.testing.assert_array_equal(now, then)


def test_schedule_saves_every_n_steps(tmp_path):
    """every_steps=3 over 10 training steps writes checkpoints at steps 3, 6 and 9 only."""
    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path), model, max_to_keep=10)
    schedule = CheckpointSchedule(manager, every_steps=3, every_minutes=0)
    train_steps(model, 10, [AfterEachUpdate(schedule)])
    assert iterations(model) == 10
    assert checkpoint_steps(tmp_path) == [3, 6, 9]


def test_schedule_saves_every_n_minutes(tmp_path, monkeypatch):
    """every_minutes=10 with a clock advancing 4 minutes per step saves when 10 minutes have
    passed since the last save: steps 3 (12 min), 6 (24) and 9 (36) of 10."""
    clock = {"now": 0.0}
    monkeypatch.setattr(checkpoints, "time", types.SimpleNamespace(monotonic=lambda: clock["now"]))

    class AdvanceClock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            clock["now"] += 4 * 60.0

    model = tiny_compiled_model()
    manager = CheckpointManager(str(tmp_path), model, max_to_keep=10)
    schedule = CheckpointSchedule(manager, every_steps=0, every_minutes=10)
    train_steps(model, 10, [AdvanceClock(), AfterEachUpdate(schedule)])
    assert checkpoint_steps(tmp_path) == [3, 6, 9]


class SavedSteps:
    """A CheckpointManager stand-in that records the step of each save."""

    def __init__(self):
        self.step = 0
        self.saved = []

    def save(self):
        self.saved.append(self.step)


def saved_steps_at_paper_speed(every_steps, every_minutes, steps=7200, seconds_per_step=0.5):
    """The steps a schedule checkpoints at over `steps` updates of 0.5 s each (near base's
    0.4 s, §5.2; a binary fraction, so the fake clock adds up exactly), on a fake clock
    advanced by each update."""
    clock = {"now": 0.0}
    manager = SavedSteps()
    schedule = CheckpointSchedule(manager, every_steps, every_minutes, clock=lambda: clock["now"])
    for step in range(1, steps + 1):
        clock["now"] += seconds_per_step
        manager.step = step
        schedule.after_update(step)
    return manager.saved


def test_paper_cadence_checkpoints_at_10_minute_intervals():
    """A paper set's default (time alone) at 0.5 s a step checkpoints every 1,200 steps
    (10 minutes); the former default of 1000 steps and 10 minutes, whose step saves restart the
    minutes, saves every 1000 steps and never by time."""
    from t2t_repro import registry

    paper_steps = checkpoints.default_save_checkpoints_steps(
        registry.hparams_sets["transformer_base"], 10.0)
    assert saved_steps_at_paper_speed(paper_steps, 10.0) == [1200, 2400, 3600, 4800, 6000, 7200]
    assert saved_steps_at_paper_speed(1000, 10.0) == [1000, 2000, 3000, 4000, 5000, 6000, 7000]


@pytest.mark.parametrize("name", [
    "transformer_base", "transformer_big", "transformer_big_enfr", "transformer_parsing",
    "transformer_parsing_from_big", "transformer_table3_a_h1", "transformer_table3_e_learned_pos",
])
def test_paper_sets_checkpoint_by_time_alone(name):
    from t2t_repro import registry

    assert checkpoints.default_save_checkpoints_steps(registry.hparams_sets[name], 10.0) == 0
    # Without a time interval, time alone would never checkpoint: every 1000 steps then.
    assert checkpoints.default_save_checkpoints_steps(registry.hparams_sets[name], 0.0) == 1000


@pytest.mark.parametrize("name", ["transformer_tiny", "transformer_small",
                                  "transformer_base_prenorm"])
def test_other_sets_checkpoint_every_1000_steps(name):
    from t2t_repro import registry

    assert checkpoints.default_save_checkpoints_steps(registry.hparams_sets[name], 10.0) == 1000


def test_a_model_loaded_for_inference_reads_the_weights_and_leaves_the_optimizer_out(tmp_path):
    """`load_trained_model` on a training checkpoint, which holds Adam's slots beside the
    weights: the weights come back exactly, into a model without an optimizer, so the slots
    (twice the model's size) are never read."""
    import h5py

    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model, compile_for_training, load_trained_model

    hparams, problem = create_hparams("transformer_tiny"), AlgorithmicReverse()
    keras.utils.set_random_seed(2)
    trained = compile_for_training(build_model("transformer", hparams, problem), hparams)
    path = str(tmp_path / "ckpt-1.weights.h5")
    trained.save_weights(path)
    with h5py.File(path, "r") as saved:
        assert len(saved["optimizer"]["vars"]) == len(trained.optimizer.variables) > 0
    keras.utils.set_random_seed(3)  # other initial weights, which the load must replace
    loaded = load_trained_model("transformer", hparams, problem, path)
    assert getattr(loaded, "optimizer", None) is None
    trained_weights, loaded_weights = trained.get_weights(), loaded.get_weights()
    assert len(loaded_weights) == len(trained_weights)
    for ours, theirs in zip(loaded_weights, trained_weights):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("overrides, written, named", [
    # fewer layers: the checkpoint lacks variables the model has
    ("num_hidden_layers=1", "in_run_folder",
     ", whose hparams differ from those of its run {run}: num_hidden_layers=2 (its run 1);"),
    # wider layers: every variable is there, in other shapes
    ("hidden_size=32,filter_size=64", "in_run_folder",
     ", whose hparams differ from those of its run {run}: filter_size=256 (its run 64), "
     "hidden_size=64 (its run 32);"),
    # a checkpoint file alone, written by Keras: what differs is unknown, Keras's first
    # sentence says what failed
    ("num_hidden_layers=1", "by_keras",
     ": its weights have other names or shapes than this model's (Keras: "),
    # and a deeper model's, which Keras would load into the layers the two share
    ("num_hidden_layers=3", "by_keras", ": it holds {stored} weights, this model has {weights} "),
    # a checkpoint file alone, as a run writes it: its own hparams name what differs, even
    # where every weight fits (other heads split the same projections otherwise)
    ("num_heads=2", "by_a_run",
     ", whose hparams differ from those stored in it: num_heads=4 (stored 2);"),
    # and one put in the folder of a run whose hparams are the loading model's
    ("num_heads=2", "into_another_run",
     ", whose hparams differ from those stored in it: num_heads=4 (stored 2);"),
])
def test_a_checkpoint_of_another_model_is_a_user_error_naming_what_differs(
        tmp_path, overrides, written, named):
    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro import hparams as hparams_lib
    from t2t_repro.errors import UserError
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model, load_trained_model

    problem, run = AlgorithmicReverse(), tmp_path / "other_run"
    other = create_hparams("transformer_tiny", overrides)
    run.mkdir()
    if written == "in_run_folder":
        hparams_lib.save(other, str(run))
    if written == "into_another_run":
        hparams_lib.save(create_hparams("transformer_tiny"), str(run))
    path = str(run / "ckpt-1.weights.h5")
    other_model = build_model("transformer", other, problem)
    if written == "by_keras":
        other_model.save_weights(path)
    else:
        checkpoints.save_weights(other_model, path)
    hparams = create_hparams("transformer_tiny")
    with pytest.raises(UserError) as raised:
        load_trained_model("transformer", hparams, problem, path)
    message = str(raised.value)
    weights = len(build_model("transformer", hparams, problem).weights)
    named = named.format(run=run, stored=len(other_model.weights), weights=weights)
    assert message.startswith(f"{path} does not fit this model{named}")
    assert "\n" not in message


def reverse_with_vocabulary_files(files):
    """algorithmic_reverse (ids are its tokens) as if it encoded with the vocabulary `files`
    ({side: path}), so that a tiny model stands for a text problem's."""
    from problems.algorithmic import AlgorithmicReverse

    problem = AlgorithmicReverse()
    problem.vocabulary_files = lambda: files
    return problem


def sha256_of(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_checkpoint_a_run_writes_holds_its_models_hparams_vocabularies_and_problem(
        tmp_path):
    """Written by the checkpoint manager and kept by an average of its checkpoints: the
    hparams, each side's SHA-256 of separate source and target files, and the problem's name;
    a file Keras wrote alone holds none of them."""
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.averaging import average_checkpoints
    from t2t_repro.training.run import build_model, compile_for_training

    source, target = tmp_path / "source.model", tmp_path / "target.model"
    source.write_bytes(b"source pieces")
    target.write_bytes(b"target pieces")
    problem = reverse_with_vocabulary_files({"source": str(source), "target": str(target)})
    hparams = create_hparams("transformer_tiny", "num_heads=2,normalize_first=true")
    model = compile_for_training(build_model("transformer", hparams, problem), hparams)
    manager = CheckpointManager(str(tmp_path / "run"), model)
    first = manager.save()
    model.optimizer.iterations.assign(1)
    second = manager.save()
    average = average_checkpoints([first, second], str(tmp_path / "avg" / "ckpt-1.weights.h5"))
    for path in (first, second, average):
        assert checkpoints.stored_hparams(path) == hparams
        assert checkpoints.stored_vocabulary_digests(path) == {
            "source": sha256_of(source), "target": sha256_of(target)}
        assert checkpoints.stored_problem(path) == "algorithmic_reverse"
    model.save_weights(str(tmp_path / "keras.weights.h5"))
    assert checkpoints.stored_hparams(str(tmp_path / "keras.weights.h5")) is None
    assert checkpoints.stored_vocabulary_digests(str(tmp_path / "keras.weights.h5")) is None
    assert checkpoints.stored_problem(str(tmp_path / "keras.weights.h5")) is None


def test_a_checkpoint_written_over_is_an_error_naming_it_for_reading_and_resuming(tmp_path):
    """h5py's own words ("Unable to synchronously open file (file signature not found)") name
    no file; a run's newest checkpoint replaced by other bytes is named, with the way on."""
    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model, compile_for_training, load_trained_model

    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    model = compile_for_training(build_model("transformer", hparams, AlgorithmicReverse()),
                                 hparams)
    manager = CheckpointManager(str(tmp_path / "run"), model)
    manager.save()
    model.optimizer.iterations.assign(1)
    newest = manager.save()
    with open(newest, "w") as f:
        f.write("not weights\n")
    message = (f"{newest} is not a readable checkpoint (not HDF5: cut short or written over); "
               f"restore it from a copy, or move it out of its folder (a run then resumes from "
               f"the checkpoint before it).")
    for reads in (manager.restore,
                  lambda: load_trained_model("transformer", hparams, AlgorithmicReverse(),
                                             newest)):
        with pytest.raises(ConfigurationError) as raised:
            reads()
        assert str(raised.value) == message

    # Cut short after its HDF5 signature: h5py's words come after the file's name.
    oldest = checkpoints.list_checkpoints(str(tmp_path / "run"))[0][1]
    os.remove(newest)
    with open(oldest, "r+b") as f:
        f.truncate(os.path.getsize(oldest) // 2)
    for reads in (manager.restore,
                  lambda: load_trained_model("transformer", hparams, AlgorithmicReverse(),
                                             oldest)):
        with pytest.raises(ConfigurationError) as raised:
            reads()
        assert re.fullmatch(
            rf"{re.escape(oldest)} is not a readable checkpoint \(HDF5 that h5py cannot open: "
            rf".*truncated file.*\); restore it from a copy, or move it out of its folder \(a "
            rf"run then resumes from the checkpoint before it\)\.", str(raised.value))


def test_a_checkpoint_a_trainer_removes_while_it_is_read_is_an_error_saying_so(tmp_path,
                                                                               monkeypatch):
    """A trainer keeping its newest --keep_checkpoint_max removes the checkpoint an exporter or
    decoder of its folder just found: before its stored records are read, or as Keras opens
    it. Not "cut short or written over" (move it out of its folder), nor h5py's No such file."""
    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training import run
    from t2t_repro.training.run import build_model, compile_for_training, load_trained_model

    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    model = compile_for_training(build_model("transformer", hparams, AlgorithmicReverse()),
                                 hparams)
    path = CheckpointManager(str(tmp_path / "run"), model).save()
    message = (f"{path} was removed while this command read it (a trainer still writing to its "
               f"folder keeps only its newest --keep_checkpoint_max checkpoints); run the "
               f"command again, or name a checkpoint that stays (one copied out, or an "
               f"average).")
    checked = run.check_stored_vocabularies

    def checked_then_removed(*args):  # the trainer prunes it between the checks and the load
        checked(*args)
        os.remove(path)

    monkeypatch.setattr(run, "check_stored_vocabularies", checked_then_removed)
    for removed_before in ("loading", "the checks"):
        with pytest.raises(ConfigurationError) as raised:
            load_trained_model("transformer", hparams, AlgorithmicReverse(), path)
        assert str(raised.value) == message, removed_before


def test_a_checkpoint_read_as_another_problem_is_refused_naming_both(tmp_path):
    """algorithmic_copy reads algorithmic_reverse's ids, as a reversed translation direction
    reads its forward problem's vocabulary: only the stored name tells them apart."""
    from problems.algorithmic import AlgorithmicCopy, AlgorithmicReverse
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import CheckpointMismatchError, build_model, load_trained_model

    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    path = str(tmp_path / "ckpt-1.weights.h5")
    checkpoints.save_weights(build_model("transformer", hparams, AlgorithmicReverse()), path)
    load_trained_model("transformer", hparams, AlgorithmicReverse(), path)
    with pytest.raises(CheckpointMismatchError) as raised:
        load_trained_model("transformer", hparams, AlgorithmicCopy(), path)
    assert str(raised.value) == (
        f"{path} was trained on --problem=algorithmic_reverse, not algorithmic_copy; read it "
        f"with --problem=algorithmic_reverse, or name a checkpoint of algorithmic_copy.")


@pytest.mark.parametrize("attribute, what, stored, why", [
    ("t2t_repro_hparams", "hparams", '{"num_heads": ', "Expecting value"),
    ("t2t_repro_hparams", "hparams", '["num_heads", 2]', "a JSON list, not an object"),
    ("t2t_repro_vocabularies", "vocabulary digests", '{"source": ', "Expecting value"),
    ("t2t_repro_vocabularies", "vocabulary digests", '["abc"]',
     "a JSON list, not an object of strings"),
    ("t2t_repro_problem", "problem name", 7, "stored as int64, not as a string"),
])
def test_unreadable_stored_attributes_are_a_one_line_error_naming_the_checkpoint(
        tmp_path, attribute, what, stored, why):
    import h5py

    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro.errors import UserError
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model, load_trained_model

    hparams, problem = create_hparams("transformer_tiny"), AlgorithmicReverse()
    path = str(tmp_path / "ckpt-1.weights.h5")
    checkpoints.save_weights(build_model("transformer", hparams, problem), path)
    with h5py.File(path, "r+") as weights:
        weights.attrs[attribute] = stored
    with pytest.raises(UserError) as raised:
        load_trained_model("transformer", hparams, problem, path)
    message = str(raised.value)
    assert message.startswith(f"{path}'s {attribute} attribute holds no readable {what} ({why}")
    assert message.endswith("). Restore the checkpoint from a copy, or name another.")
    assert "\n" not in message


def test_a_checkpoint_of_a_problem_whose_tokens_are_ids_holds_no_vocabulary_digests(tmp_path):
    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model

    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    path = str(tmp_path / "ckpt-0.weights.h5")
    checkpoints.save_weights(build_model("transformer", hparams, AlgorithmicReverse()), path)
    assert checkpoints.stored_vocabulary_digests(path) is None
    assert checkpoints.stored_hparams(path) == hparams


@pytest.mark.parametrize("target_then, message", [
    (b"target pieces", None),  # the same contents at another path: loads
    (b"other pieces", "another target vocabulary than {target} (SHA-256 {ours}, the "
                      "checkpoint's {theirs}); read it with the problem and --data_dir it was "
                      "trained with."),
    (None, "another target vocabulary than {target}, which is missing; read it with the "
           "problem and --data_dir it was trained with."),
])
def test_a_checkpoint_read_with_another_vocabulary_is_refused_naming_the_side_and_file(
        tmp_path, target_then, message):
    """The source file is the same; the target file has other contents of the same size, or is
    missing. A model reads ids: without the check it would load and decode other text."""
    from t2t_repro.errors import UserError
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model, load_trained_model

    (tmp_path / "then").mkdir()
    (tmp_path / "now").mkdir()
    files = {side: {when: tmp_path / when / f"{side}.model" for when in ("then", "now")}
             for side in ("source", "target")}
    for when in ("then", "now"):
        files["source"][when].write_bytes(b"source pieces")
    files["target"]["then"].write_bytes(b"target pieces")
    if target_then is not None:
        files["target"]["now"].write_bytes(target_then)
    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    path = str(tmp_path / "ckpt-1.weights.h5")
    trained_for = reverse_with_vocabulary_files(
        {side: str(paths["then"]) for side, paths in files.items()})
    checkpoints.save_weights(build_model("transformer", hparams, trained_for), path)
    read_with = reverse_with_vocabulary_files(
        {side: str(paths["now"]) for side, paths in files.items()})
    if message is None:
        load_trained_model("transformer", hparams, read_with, path)
        return
    with pytest.raises(UserError) as raised:
        load_trained_model("transformer", hparams, read_with, path)
    theirs = sha256_of(files["target"]["then"])[:12]
    ours = theirs if target_then is None else sha256_of(files["target"]["now"])[:12]
    assert str(raised.value) == f"{path} was trained with " + message.format(
        target=files["target"]["now"], ours=ours, theirs=theirs)


def test_a_checkpoint_with_vocabulary_files_read_by_a_problem_of_ids_is_refused(tmp_path):
    from problems.algorithmic import AlgorithmicReverse
    from t2t_repro.errors import UserError
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model, load_trained_model

    shared = tmp_path / "shared.model"
    shared.write_bytes(b"pieces")
    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    path = str(tmp_path / "ckpt-1.weights.h5")
    trained_for = reverse_with_vocabulary_files({"source": str(shared), "target": str(shared)})
    checkpoints.save_weights(build_model("transformer", hparams, trained_for), path)
    with pytest.raises(UserError) as raised:
        load_trained_model("transformer", hparams, AlgorithmicReverse(), path)
    assert str(raised.value) == (
        f"{path} was trained with another source vocabulary than "
        f"--problem=algorithmic_reverse's, which has none; read it with the problem and "
        f"--data_dir it was trained with.")


def test_a_run_whose_vocabulary_changed_since_its_checkpoint_is_refused_on_resuming(tmp_path):
    """Its data folder generated again from other text: the ids of its checkpoint's embeddings
    no longer name the pieces they were trained on."""
    from t2t_repro.errors import UserError
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run_factory import create_training_run

    vocabulary = tmp_path / "shared.model"
    vocabulary.write_bytes(b"pieces")
    problem = reverse_with_vocabulary_files({"source": str(vocabulary),
                                             "target": str(vocabulary)})
    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")

    def resumed_run():
        return create_training_run(problem, hparams, str(tmp_path / "run"),
                                   print_fn=lambda line: None)

    run = resumed_run()
    run.model.optimizer.iterations.assign(1)
    saved = run.checkpoints.save()
    assert resumed_run().restore() == 1
    vocabulary.write_bytes(b"other pieces")
    with pytest.raises(UserError) as raised:
        resumed_run().restore()
    assert str(raised.value).startswith(
        f"{saved} was trained with another source vocabulary than {vocabulary} (SHA-256 ")
