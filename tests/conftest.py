"""Shared test settings: quiet TensorFlow, the TensorFlow Keras backend, and the real data folder."""

import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_module(module, *args, timeout=300):
    """Runs `python -m <module> args...` as a user would; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def shared_data_dir():
    """The project's real data (`../shared/data`), or wherever T2T_TEST_DATA points."""
    path = pathlib.Path(os.environ.get("T2T_TEST_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.fail(f"Real test data not found at {path}; set T2T_TEST_DATA to its location.")
    return path


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
