"""atomic_files: a target appears only whole, an error leaves the old one and no temporary."""

import os

import pytest

from t2t_repro.utils import atomic_files
from t2t_repro.utils.atomic_files import atomic_path, is_temporary, write_text_atomically


def test_the_target_appears_only_once_complete(tmp_path):
    """While the block runs the writes go to the temporary; the target appears at its end."""
    target = tmp_path / "out.txt"
    with atomic_path(str(target)) as temporary:
        with open(temporary, "w") as f:
            f.write("first half ")
        assert not target.exists()
        with open(temporary, "a") as f:
            f.write("second half")
        assert not target.exists()
    assert target.read_text() == "first half second half"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_write_text_atomically_replaces_the_old_text(tmp_path):
    target = tmp_path / "hparams.json"
    target.write_text("old")
    write_text_atomically(str(target), "new\n")
    assert target.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["hparams.json"]


def test_an_error_inside_leaves_the_old_target_and_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(str(target)) as temporary:
            with open(temporary, "w") as f:
                f.write("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_an_error_inside_removes_a_temporary_folder(tmp_path):
    """A folder (an export version) written under the temporary name goes too."""
    target = tmp_path / "12"
    with pytest.raises(RuntimeError):
        with atomic_path(str(target)) as temporary:
            os.makedirs(os.path.join(temporary, "assets"))
            raise RuntimeError("killed mid-export")
    assert os.listdir(tmp_path) == []


def test_a_folder_is_renamed_whole(tmp_path):
    target = tmp_path / "12"
    with atomic_path(str(target) + os.sep) as temporary:
        os.makedirs(os.path.join(temporary, "assets"))
        assert not target.exists()
    assert os.listdir(target) == ["assets"]
    assert os.listdir(tmp_path) == ["12"]


def test_the_temporary_is_beside_the_target_and_keeps_its_suffix(tmp_path):
    """Keras's save_weights insists on a name ending in `.weights.h5`."""
    target = os.path.join(str(tmp_path), "ckpt-7.weights.h5")
    with atomic_path(target) as temporary:
        assert os.path.dirname(temporary) == str(tmp_path)
        name = os.path.basename(temporary)
        assert name == f".tmp-{os.getpid()}-ckpt-7.weights.h5"
        assert name.endswith(".weights.h5")
        open(temporary, "wb").close()


def test_is_temporary_recognises_the_temporary_and_nothing_else(tmp_path):
    name = os.path.basename(atomic_files.temporary_path(str(tmp_path / "flags.txt")))
    assert is_temporary(name)
    assert atomic_files.target_name(name) == "flags.txt"
    for other in ("flags.txt", ".tmp-", ".tmp-x-flags.txt", "tmp-12-flags.txt", ".hidden",
                  "ckpt-1.weights.h5", "12"):
        assert not is_temporary(other), other
        assert atomic_files.target_name(other) is None
