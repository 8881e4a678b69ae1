"""Shared test settings: quiet TensorFlow, the TensorFlow Keras backend, and the real data folder."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_data_dir():
    """The project's real data (`../shared/data`), or wherever T2T_TEST_DATA points."""
    path = pathlib.Path(os.environ.get("T2T_TEST_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.fail(f"Real test data not found at {path}; set T2T_TEST_DATA to its location.")
    return path
