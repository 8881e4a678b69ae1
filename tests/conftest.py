"""Shared test settings: quiet TensorFlow, the TensorFlow Keras backend, and the real data
folder."""

import contextlib
import gc
import glob
import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# As every command sets it (`quiet_tensorflow.import_tensorflow`): oneDNN on any CPU.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# As `python -m t2t_repro.paper` sets it: Table 1's memory column needs the allocator's peak,
# which the default CPU allocator does not track on every CPU.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def _cores_per_worker():
    """This process's share of the cores: all of them, or under pytest-xdist a worker's."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return str(max(1, cores // workers))


# TensorFlow's two thread pools and OpenMP's (CTranslate2's, and NumPy's BLAS), in this process
# and every process it starts, sized to its share of the cores. By default each process sizes
# them to the whole machine, and on the 2-core CI machine each worker's pool threads contend
# for the core the other worker needs (BUILD.md, "Continuous integration").
for _pool in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_pool, _cores_per_worker())

# XLA's CPU backend (JAX's, and TensorFlow's under jit_compile) generates code at LLVM's lowest
# optimisation level in the tests and every process they start: they compile tiny models for a
# few steps, where compiling is most of the time (the JAX worker script's CPU: 33.5 s at the
# default level, 22.3 s at this one), and they check what the programs compute, which the level
# changes by rounding only (under 4e-7 in the JAX-against-TensorFlow updates, whose tolerance is
# 1e-5). Users and the benchmarks compile at the default level.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
# The files that each take one xdist worker a minute or more, slowest first (measured with
# --durations). Collected first, pytest-xdist (--dist loadfile --no-loadscope-reorder) hands
# them out first and the many short files fill in at the end, instead of one worker starting a
# long file while the other has nothing left. Without that flag xdist hands out the files with
# the most tests first, and these, which have few, last.
SLOW_FILES_FIRST = (
    "training/test_loop.py", "training/test_train_step.py", "problems/test_text_files.py",
    "serving/test_exporter.py", "training/test_jax_training.py", "test_trainer_faults.py",
    "training/test_multi_worker_training.py", "test_trainer.py", "test_warm_start.py",
    "test_decoder_scoring.py", "serving/test_ctranslate2_model.py",
    "training/test_precision_and_faults.py", "importing/test_marian.py", "test_decoder.py",
    "importing/test_tensor2tensor.py", "test_trainer_real_problems.py",
    "test_trainer_early_stopping.py", "test_decoder_input.py",
    "test_paper.py", "training/test_distribution.py", "test_trainer_packed.py",
    "test_commands_start.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        path = item.path.relative_to(TESTS_DIR).as_posix()
        return SLOW_FILES_FIRST.index(path) if path in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


NO_AUTOMATIC_FULL_COLLECTION = 2**31 - 1


def pytest_configure(config):
    """No automatic garbage collection while the test modules are imported, in the process
    that collects them (not pytest-xdist's controller, which collects nothing): the collections
    that fall due as the imports' objects (TensorFlow's and Keras's ~450,000) accumulate walk
    them again and again, 2 of the 7.5 s of `pytest --collect-only`.
    `pytest_collection_finish` turns it back on."""
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    gc.disable()


def pytest_collection_finish(session):
    """Moves what importing the test modules made (TensorFlow's and Keras's ~450,000 objects)
    out of the garbage collector's sight, and leaves full collections to the end of each test
    file (`_collect_after_each_file`): an automatic one in a long-lived worker walks every
    object the earlier tests left (in the heaviest files they took a tenth of the time), and
    most of what a file makes dies with its fixtures."""
    import keras  # noqa: F401 - its backend's objects are among the frozen

    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NO_AUTOMATIC_FULL_COLLECTION)
    gc.enable()


@pytest.fixture(scope="module", autouse=True)
def _collect_after_each_file():
    """After a test file's own fixtures are gone: one full collection, then what survives it
    (session fixtures, caches) frozen too, so that later files' collections skip it."""
    yield
    gc.collect()
    gc.freeze()


# A bound for hangs only: a test process that has not ended in this long has hung. It is far
# above any process's time here even on a slow, loaded machine; tests wait for events, and
# this only keeps a hang from stalling the suite.
HANG_GUARD_S = 1200


# More float32s than a 64-bit process can address (1 PiB, beyond x86-64's and AArch64's 256
# TiB): asking for them is a real allocation failure at once on any machine, touching no memory.
UNADDRESSABLE_FLOATS = 2**48
NUMPY_OUT_OF_MEMORY = (f"Unable to allocate 1.00 PiB for an array with shape "
                       f"({UNADDRESSABLE_FLOATS},) and data type float32")


def allocate_unaddressable(*args, **kwargs):
    """NumPy's MemoryError (`NUMPY_OUT_OF_MEMORY`), in place of any call a test patches."""
    import numpy as np

    return np.zeros(UNADDRESSABLE_FLOATS, np.float32)


def run_module_in_subprocess(module, *args, timeout=HANG_GUARD_S, input=None, **environment):
    """Runs `python -m <module> args...` in a new process, exactly as a user would (`input`:
    text on its stdin; `environment`: variables set for it); returns the CompletedProcess. Each
    costs a TensorFlow import: keep it for what needs a process of its own (the start-up path,
    kills, another Keras backend)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        input=input,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **environment),
        timeout=timeout,
    )


RUN_EXPORT = TESTS_DIR / "serving" / "run_export.py"


@pytest.fixture(scope="session")
def export_runner(tmp_path_factory):
    """`run_export(version_dir, request)`: `tests/serving/run_export.py`'s JSON answer to
    `request` on the export, from one process of TensorFlow and TensorFlow Text alone that
    answers this worker's every request (each process would import TensorFlow again)."""
    import json
    import selectors

    errors_path = tmp_path_factory.mktemp("run_export") / "stderr.txt"
    with open(errors_path, "w") as errors:
        process = subprocess.Popen([sys.executable, str(RUN_EXPORT)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=errors, text=True,
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    answers = selectors.DefaultSelector()
    answers.register(process.stdout, selectors.EVENT_READ)

    def run_export(version_dir, request):
        process.stdin.write(json.dumps({"export": str(version_dir), "request": request}) + "\n")
        process.stdin.flush()
        assert answers.select(HANG_GUARD_S), "run_export.py gave no answer"
        line = process.stdout.readline()
        assert line, errors_path.read_text()[-3000:]
        return json.loads(line)

    yield run_export
    process.stdin.close()
    process.wait(HANG_GUARD_S)
    answers.close()


def _exit_status(code):
    """The status a process exiting with SystemExit(`code`) has; a message is printed first."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def one_line_error(result):
    """The message of a command that failed with a user error, checked to be one line."""
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


def output_lines(stdout):
    """A command's output lines, read by the project's one rule (`utils.text_lines`: a line
    ends at "\\n" only): a translation may hold another separator, such as a byte-fallback
    piece <0x1D>, that `str.splitlines` would split at."""
    import io

    from t2t_repro.utils.text_lines import iter_lines

    return list(iter_lines(io.BytesIO(stdout.encode("utf-8")), "stdout"))


def run_module(module, *args, input=None):
    """Runs `python -m <module> args...` inside this process: absl parses the flags (restored
    afterwards) and the command's `main` runs through the same user-error reporting as
    `entry_point.run`. Returns a CompletedProcess with its exit status, stdout and stderr;
    an unexpected exception leaves a traceback on stderr and status 1, as it would. `input`:
    text for stdin, or bytes as they are."""
    import importlib
    import io
    import traceback

    import keras
    from absl import flags
    from absl.testing import flagsaver

    from t2t_repro.cli import entry_point

    command = importlib.import_module(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    data = input if isinstance(input, bytes) else (input or "").encode("utf-8")
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    with flagsaver.flagsaver(), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr), _replaced_stdin(stdin):
        flags.FLAGS.unparse_flags()
        try:
            argv = entry_point.parse_flags([module, *args])
            entry_point.report_user_errors(command.main)(argv)
            returncode = 0
        except SystemExit as exit:
            returncode = _exit_status(exit.code)
        except Exception:  # noqa: BLE001 - reported as the interpreter would
            traceback.print_exc()
            returncode = 1
        finally:  # a fresh process's Keras state; a full collection waits for the file's end
            keras.backend.clear_session(free_memory=False)
    return subprocess.CompletedProcess([module, *args], returncode, stdout.getvalue(),
                                       stderr.getvalue())


@contextlib.contextmanager
def _replaced_stdin(stream):
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


def _origin_checkout():
    """The checkout this one was cloned from, when its origin is a local folder (a clone in a
    temporary folder has no `../shared` beside it, but its origin does)."""
    result = subprocess.run(["git", "-C", str(REPO_ROOT), "config", "remote.origin.url"],
                            capture_output=True, text=True)
    origin = pathlib.Path(result.stdout.strip())
    return origin if result.returncode == 0 and origin.is_absolute() else None


def made_once(tmp_path_factory, name, make):
    """A folder `name` that `make(folder)` fills once for the whole test run. Under pytest-xdist
    every worker would otherwise build a session fixture of its own: here the first worker to
    ask builds it in the run's shared temporary folder while the others wait on a lock, then
    all read it. A build that failed is started again by the next worker to ask."""
    import shutil

    import filelock

    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent  # this run's, shared by its workers
    folder, complete = root / name, root / f"{name}.complete"
    with filelock.FileLock(str(root / f"{name}.lock")):
        if not complete.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            complete.touch()
    return folder


@pytest.fixture(scope="session")
def shared_data_dir():
    """The project's real data: wherever T2T_TEST_DATA points, else `../shared/data` beside
    this checkout, else beside the local checkout it was cloned from."""
    if "T2T_TEST_DATA" in os.environ:
        candidates = [pathlib.Path(os.environ["T2T_TEST_DATA"])]
    else:
        roots = [REPO_ROOT] + [root for root in [_origin_checkout()] if root]
        candidates = [root.parent / "shared" / "data" for root in roots]
    for path in candidates:
        if path.is_dir():
            return path
    pytest.fail(f"Real test data not found at {', '.join(map(str, candidates))}; set "
                f"T2T_TEST_DATA to its location.")


def lay_out(directory, links):
    """Makes `directory` hold symbolic links `{name: target}`: raw files laid out as the
    problems' docs say, without copying the shared data."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, target in links.items():
        (directory / name).symlink_to(target)
    return directory


@pytest.fixture(scope="session")
def multi30k_tmp_dir(shared_data_dir, tmp_path_factory):
    """A --tmp_dir for translate_ende: Multi30k train as `train.*`, newstest2013 as dev."""
    multi30k, wmt = shared_data_dir / "multi30k_ende", shared_data_dir / "wmt14_ende"
    return lay_out(tmp_path_factory.mktemp("multi30k_raw"), {
        "train.en": multi30k / "train.en", "train.de": multi30k / "train.de",
        "newstest2013.en": wmt / "newstest2013.en", "newstest2013.de": wmt / "newstest2013.de",
    })


# Small enough for Multi30k's 29k pairs to train every piece, and quick to generate.
MULTI30K_DATA_HPARAMS = "vocab_size=8000,num_train_shards=4"


@pytest.fixture(scope="session")
def ende_data_dir(multi30k_tmp_dir, tmp_path_factory):
    """translate_ende generated once for the test run from `multi30k_tmp_dir` (8k vocabulary)."""
    from problems.translate_ende import TranslateEnde

    def generate(data_dir):
        problem = TranslateEnde(data_dir=str(data_dir), data_hparams=MULTI30K_DATA_HPARAMS)
        problem.generate_data(str(multi30k_tmp_dir), download=False)

    return made_once(tmp_path_factory, "ende_data", generate)


@pytest.fixture(scope="session")
def ende_run(ende_data_dir, tmp_path_factory):
    """transformer_tiny with one layer trained 100 steps on translate_ende (Multi30k),
    checkpoints at 50 and 100, once for the test run: the decoder's and the exporter's tests
    read it, and write only into folders of their own (the exporter's versions under its export/
    and ctranslate2/). What they check does not depend on depth; each decoder layer's
    alignments are checked on two-layer models in tests/serving/test_ctranslate2_model.py."""
    def train(folder):
        result = run_module(
            "t2t_repro.trainer", "--problem=translate_ende", "--hparams_set=transformer_tiny",
            "--hparams=batch_size=1024,max_length=64,num_hidden_layers=1",
            f"--data_dir={ende_data_dir}",
            f"--output_dir={folder / 'run'}", "--train_steps=100", "--save_checkpoints_steps=50",
            "--schedule=train", "--random_seed=1",
        )
        assert result.returncode == 0, result.stderr

    return made_once(tmp_path_factory, "ende_run", train) / "run"


@contextlib.contextmanager
def read_only_folder(path):
    """Creates the folder `path`, read-only for this process for the block: no write bits, and
    for root, which ignores them, the immutable attribute. Skips the test where neither holds."""
    path.mkdir()
    path.chmod(0o555)
    immutable = os.geteuid() == 0 and subprocess.run(
        ["chattr", "+i", str(path)], capture_output=True).returncode == 0
    try:
        if os.access(path, os.W_OK):
            pytest.skip("no way to make a folder read-only for this user here")
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o755)


def read_scalars(logdir):
    """{tag: {step: value}} from every TensorBoard event file in `logdir`."""
    import tensorflow as tf

    scalars = {}
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("tensor"):
                    number = float(tf.make_ndarray(value.tensor))
                else:
                    number = value.simple_value
                scalars.setdefault(value.tag, {})[event.step] = number
    return scalars


def attention_image_steps(output_dir):
    """The steps of the encoder-decoder attention images a run wrote for TensorBoard."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(
        str(output_dir / "eval_attention"), size_guidance={event_accumulator.IMAGES: 0})
    accumulator.Reload()
    return [event.step for event in accumulator.Images("attention/encoder_decoder")]
