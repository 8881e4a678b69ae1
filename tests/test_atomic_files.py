"""atomic_files: a target appears only whole, an error leaves the old one and no temporary."""

import os

import pytest

from conftest import HANG_GUARD_S

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


def test_a_symbolic_links_target_is_replaced_and_the_link_kept(tmp_path):
    target = tmp_path / "kept.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text_atomically(str(link), "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["kept.txt", "link.txt"]


def test_a_pipe_is_written_in_place_not_replaced_by_a_file(tmp_path):
    """A FIFO (as a shell's `>(...)` gives) read by another process gets the text; a rename
    would have put a file in its place, and the reader would get nothing."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    assert atomic_files.is_written_in_place(str(fifo))
    write_text_atomically(str(fifo), "through the pipe\n")
    reader.join(timeout=HANG_GUARD_S)
    assert received == ["through the pipe\n"]
    assert fifo.is_fifo() and os.listdir(tmp_path) == ["pipe"]


def test_a_device_is_written_in_place(tmp_path):
    """A null device made in the test's folder (as /dev/null is, which the decoder may be
    given): it stays a device, and no file takes its place."""
    import stat

    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    write_text_atomically(str(device), "discarded\n")
    assert device.is_char_device() and os.listdir(tmp_path) == ["null"]
    assert not atomic_files.is_written_in_place(str(tmp_path))
    assert not atomic_files.is_written_in_place(str(tmp_path / "missing"))
