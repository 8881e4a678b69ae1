"""Shared test settings: quiet TensorFlow, the TensorFlow Keras backend, and the real data folder."""

import glob
import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
# The files that each take one xdist worker a minute or more, slowest first (measured with
# --durations). Collected first, pytest-xdist (--dist loadfile) hands them out first and the
# many short files fill in at the end, instead of one worker starting a long file while the
# other has nothing left.
SLOW_FILES_FIRST = (
    "serving/test_exporter.py", "training/test_train_step.py", "test_trainer.py",
    "training/test_multi_worker_training.py", "test_decoder.py", "test_trainer_faults.py",
    "test_trainer_real_problems.py", "test_decoder_input.py", "training/test_loop.py",
    "training/test_distribution.py", "training/test_jax_training.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        path = item.path.relative_to(TESTS_DIR).as_posix()
        return SLOW_FILES_FIRST.index(path) if path in SLOW_FILES_FIRST else len(SLOW_FILES_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


def run_module(module, *args, timeout=300, input=None):
    """Runs `python -m <module> args...` as a user would (`input`: text on its stdin);
    returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        input=input,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=timeout,
    )


def _origin_checkout():
    """The checkout this one was cloned from, when its origin is a local folder (a clone in a
    temporary folder has no `../shared` beside it, but its origin does)."""
    result = subprocess.run(["git", "-C", str(REPO_ROOT), "config", "remote.origin.url"],
                            capture_output=True, text=True)
    origin = pathlib.Path(result.stdout.strip())
    return origin if result.returncode == 0 and origin.is_absolute() else None


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
    """translate_ende generated once for the session from `multi30k_tmp_dir` (8k vocabulary)."""
    from problems.translate_ende import TranslateEnde

    data_dir = tmp_path_factory.mktemp("ende_data")
    problem = TranslateEnde(data_dir=str(data_dir), data_hparams=MULTI30K_DATA_HPARAMS)
    problem.generate_data(str(multi30k_tmp_dir), download=False)
    return data_dir


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
