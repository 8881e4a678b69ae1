"""Training on several machines, for real: worker processes on 127.0.0.1 joined by
MultiWorkerMirroredStrategy from TF_CONFIG, each with one CPU device.

They must take exactly the updates one process takes on the global batches, read distinct
parts of the data, leave one writer of the run's files, fail promptly with a clear message when
a peer dies, and resume together from the chief's newest checkpoint.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import HANG_GUARD_S
from step_cases import HPARAMS, micro_batch, new_model, union
from step_runner import BATCH_SPEC
from t2t_repro import registry
from t2t_repro.data.problem import TRAIN
from t2t_repro.hparams import create_hparams
from t2t_repro.training import checkpoints
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

WORKERS = 2
TRAINER = ["-m", "t2t_repro.trainer", "--problem=algorithmic_copy",
           "--hparams_set=transformer_tiny",
           "--hparams=batch_size=256,max_length=24,num_hidden_layers=1",
           "--eval_steps=2", "--eval_decode_examples=0", "--log_every=5", "--strategy=multi_worker"]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(arguments, log_dir, name):
    """`python <arguments>` once per worker, TF_CONFIG naming all of them; output in logs."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(WORKERS)]}
    processes = []
    for index in range(WORKERS):
        config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        log = open(log_dir / f"{name}-{index}.log", "w")
        processes.append(subprocess.Popen(
            [sys.executable, "-u", *arguments], stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, TF_CONFIG=json.dumps(config), TF_CPP_MIN_LOG_LEVEL="2",
                     KERAS_BACKEND="tensorflow")))
    return processes


def wait_all(processes, timeout):
    try:
        return [process.wait(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()


def log_text(log_dir, name, index):
    return (log_dir / f"{name}-{index}.log").read_text()


# Worker i trains 2 updates of 2 micro-batches on the batches BATCHES[i]; one process on the
# union of both workers' batches must end with the same weights.
SHAPES = [[(2, 4, 3), (3, 6, 5), (1, 3, 2), (4, 5, 6)],
          [(5, 9, 8), (2, 3, 4), (3, 7, 7), (1, 2, 2)]]
WORKER_STEPS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from t2t_repro.cli.quiet_tensorflow import import_tensorflow
    import_tensorflow()  # as the commands start
    import tensorflow as tf
    sys.path.insert(0, sys.argv[1])
    from step_cases import HPARAMS, micro_batch, new_model
    from step_runner import BATCH_SPEC
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.tensorflow.strategy import create_strategy
    from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep
    SHAPES = json.loads(sys.argv[3])

    strategy = create_strategy("multi_worker")
    index = strategy.cluster_resolver.task_id
    hparams = create_hparams("transformer_tiny", HPARAMS)
    with strategy.scope():
        model = new_model(hparams)
    batches = [micro_batch(10 * index + n, *shape) for n, shape in enumerate(SHAPES[index])]
    dataset = strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_generator(lambda: iter(batches),
                                                       output_signature=BATCH_SPEC))
    step = TensorFlowTrainStep(model, strategy, hparams.label_smoothing, accumulation_steps=2)
    iterator = iter(dataset)
    losses = [step(iterator).loss_sum for _ in range(2)]
    np.savez(sys.argv[2], losses=np.array(losses), *model.get_weights())
    """
)


def test_two_workers_take_the_updates_of_one_process_on_the_global_batches(tmp_path):
    """Unequal token counts on the two workers, 2 micro-batches per update, 2 updates: both
    workers end with identical weights, equal within 1e-6 to one process that takes each
    update on the union of the 4 micro-batches that made it."""
    here = os.path.dirname(__file__)
    outputs = [tmp_path / f"worker-{i}.npz" for i in range(WORKERS)]
    processes = []
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(WORKERS)]}
    for index in range(WORKERS):
        config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        processes.append(subprocess.Popen(
            [sys.executable, "-c", WORKER_STEPS, here, str(outputs[index]), json.dumps(SHAPES)],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{index}.err", "w"),
            env=dict(os.environ, TF_CONFIG=json.dumps(config), TF_CPP_MIN_LOG_LEVEL="2",
                     PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))))
    codes = wait_all(processes, timeout=HANG_GUARD_S)
    assert codes == [0, 0], [(tmp_path / f"{i}.err").read_text()[-2000:] for i in range(2)]
    workers = [np.load(path) for path in outputs]

    hparams = create_hparams("transformer_tiny", HPARAMS)
    model = new_model(hparams)
    batches = [[micro_batch(10 * i + n, *shape) for n, shape in enumerate(SHAPES[i])]
               for i in range(WORKERS)]
    update_batches = [union([batches[0][0], batches[1][0], batches[0][1], batches[1][1]]),
                      union([batches[0][2], batches[1][2], batches[0][3], batches[1][3]])]
    step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing)
    iterator = iter(tf.data.Dataset.from_generator(lambda: iter(update_batches),
                                                   output_signature=BATCH_SPEC))
    losses = [step(iterator).loss_sum for _ in range(2)]

    weights = [[w[f"arr_{n}"] for n in range(len(model.get_weights()))] for w in workers]
    for first, second in zip(*weights):
        np.testing.assert_array_equal(first, second)
    largest = max(float(np.abs(a - b).max()) for a, b in zip(weights[0], model.get_weights()))
    assert largest < 1e-6
    np.testing.assert_allclose(workers[0]["losses"], losses, rtol=1e-6)
    print(f"workers identical; largest weight difference from one process {largest:.2e}")


def test_each_input_pipeline_reads_its_own_part_of_the_data():
    """Two pipelines of algorithmic_copy: one pass each, no example in both, none missing."""
    registry.import_all()
    problem = registry.problems["algorithmic_copy"]()
    problem.num_examples = {TRAIN: 500, "eval": 10}

    def examples(shard):
        chunks = problem.example_chunks(TRAIN, shard=shard)
        return [tuple(row) for chunk in chunks for row in chunk["inputs"].to_list()]

    whole = examples((0, 1))
    parts = [examples((index, 2)) for index in range(2)]
    assert len(parts[0]) + len(parts[1]) == len(whole) == 500
    assert sorted(parts[0] + parts[1]) == sorted(whole)
    assert abs(len(parts[0]) - len(parts[1])) <= 1


def test_shard_files_are_split_between_pipelines(ende_data_dir):
    from problems.translate_ende import TranslateEnde

    problem = TranslateEnde(data_dir=str(ende_data_dir))
    counts = [sum(int(chunk["targets"].nrows()) for chunk in problem.example_chunks(
        TRAIN, shard=(index, 2))) for index in range(2)]
    total = sum(int(chunk["targets"].nrows()) for chunk in problem.example_chunks(TRAIN))
    assert counts[0] > 0 and counts[1] > 0 and sum(counts) == total
    with pytest.raises(ValueError, match="num_train_shards=9"):
        problem.example_chunks(TRAIN, shard=(0, 9))


WORKER = ["127.0.0.1:2222", "127.0.0.1:2223"]


@pytest.mark.parametrize("config, problem", [
    ("", "TF_CONFIG is not set"),
    ("{worker", "TF_CONFIG is not JSON (Expecting property name enclosed in double quotes: "
                "line 1 column 2 (char 1))"),
    ('["worker"]', 'TF_CONFIG has no "cluster" object'),
    ({"cluster": {}}, "TF_CONFIG's cluster names no task"),
    ({"cluster": {"worker": WORKER, "ps": ["127.0.0.1:2224"]}, "task": {"type": "ps", "index": 0}},
     "TF_CONFIG's cluster names ps tasks, where a multi-worker run has only chief and worker "
     "tasks"),
    ({"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}},
     "TF_CONFIG's cluster \"worker\" is not a list of \"host:port\" addresses"),
    ({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}},
     "TF_CONFIG's cluster \"worker\" is not a list of \"host:port\" addresses"),
    ({"cluster": {"chief": WORKER}, "task": {"type": "chief", "index": 0}},
     "TF_CONFIG's cluster names more than one chief"),
    ({"cluster": {"worker": WORKER}}, 'TF_CONFIG has no "task" object'),
    ({"cluster": {"worker": WORKER}, "task": {"type": "chief", "index": 0}},
     "TF_CONFIG's task type 'chief' has no addresses in its cluster, which names worker"),
    ({"cluster": {"worker": WORKER}, "task": {"type": "worker", "index": 2}},
     "TF_CONFIG's task index 2 names no worker of its cluster, which lists 2 (index 0 to 1)"),
    ({"cluster": {"worker": WORKER}, "task": {"type": "worker", "index": "first"}},
     "TF_CONFIG's task index 'first' names no worker of its cluster, which lists 2 (index 0 "
     "to 1)"),
    ({"cluster": {"worker": WORKER}, "task": {"type": "worker", "index": True}},
     "TF_CONFIG's task index True names no worker of its cluster, which lists 2 (index 0 to 1)"),
])
def test_a_tf_config_multi_worker_training_cannot_use_is_refused_naming_its_fault(
        monkeypatch, config, problem):
    """Each of these made MultiWorkerMirroredStrategy raise a traceback (an index past the
    list: "The `task_id` 2 exceeds the maximum id of worker"; a parameter server: "There is no
    id for task_type 'ps'"); now it is one line naming the fault, before any strategy is
    built."""
    from t2t_repro.training.strategy_names import StrategyError
    from t2t_repro.training.tensorflow import strategy

    text = config if isinstance(config, str) else json.dumps(config)
    assert strategy.tf_config_problem(text) == problem
    monkeypatch.setenv("TF_CONFIG", text)
    with pytest.raises(StrategyError, match=f"^--strategy=multi_worker needs .* but "
                                            f"{re.escape(problem)}. Example for worker 0"):
        strategy.create_strategy("multi_worker")


@pytest.mark.parametrize("config", [
    {"cluster": {"worker": WORKER}, "task": {"type": "worker", "index": 1}},
    {"cluster": {"worker": WORKER}, "task": {"type": "worker", "index": "1"}},  # as TF reads it
    {"cluster": {"chief": ["127.0.0.1:2224"], "worker": WORKER},
     "task": {"type": "chief", "index": 0}},
])
def test_the_tf_configs_of_a_multi_worker_run_are_accepted(config):
    from t2t_repro.training.tensorflow import strategy

    assert strategy.tf_config_problem(json.dumps(config)) is None


def event_file_writer_pids(directory):
    """Process ids in TensorFlow's event file names (`events.out.tfevents.<time>.<host>.<pid>.
    <n>.v2`)."""
    return {int(name.split(".")[-3]) for name in os.listdir(directory)}


def test_two_trainer_workers_fail_together_resume_and_write_once(tmp_path):
    """The trainer on 2 workers with one --output_dir: (1) a worker killed mid-run makes the
    other exit with the clear message within 60 s; (2) restarted, both resume from the
    chief's newest checkpoint and finish; every event file was written by the chief."""
    output_dir = tmp_path / "run"
    common = [*TRAINER, f"--output_dir={output_dir}", "--save_checkpoints_steps=5"]
    survivor, doomed = start_workers([*common, "--train_steps=100000", "--eval_every=100000"],
                                     tmp_path, "killed")
    chief_pids = {survivor.pid}
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while (checkpoints.checkpoint_step(
                checkpoints.latest_checkpoint(str(output_dir)) or "ckpt-0.weights.h5") < 10):
            assert survivor.poll() is None and doomed.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.1)
        doomed.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        code = survivor.wait(timeout=60)
        seconds = time.monotonic() - killed_at
    finally:
        wait_all([survivor, doomed], timeout=1)
    message = log_text(tmp_path, "killed", 0)
    assert code != 0 and "another worker of this multi-worker run stopped" in message
    assert f"training resumes from {output_dir}/ckpt-" in message
    newest = checkpoints.checkpoint_step(checkpoints.latest_checkpoint(str(output_dir)))
    print(f"survivor exited {seconds:.1f} s after the kill; newest checkpoint {newest}")

    resumed = start_workers([*common, f"--train_steps={newest + 5}", "--eval_every=5"],
                            tmp_path, "resumed")
    chief_pids.add(resumed[0].pid)
    assert wait_all(resumed, timeout=HANG_GUARD_S) == [0, 0], (
        log_text(tmp_path, "resumed", 1)[-2000:])
    for index in range(WORKERS):
        assert re.search(rf"Resumed from \S+ at step {newest}\.",
                         log_text(tmp_path, "resumed", index))
    assert checkpoints.checkpoint_step(checkpoints.latest_checkpoint(str(output_dir))) == newest + 5
    assert event_file_writer_pids(output_dir / "train") <= chief_pids
    assert event_file_writer_pids(output_dir / "eval") == {resumed[0].pid}
    assert {"hparams.json", "flags.txt"} <= set(os.listdir(output_dir))
