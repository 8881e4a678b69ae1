"""Datagen's command line, run as a user runs it: `python -m t2t_repro.datagen ...`."""

import json
import os
import pathlib

from conftest import run_module


def run_datagen(*args):
    return run_module("t2t_repro.datagen", *args)


def file_state(directory):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns)
            for p in pathlib.Path(directory).iterdir()}


def line_count(path):
    return pathlib.Path(path).read_text(encoding="utf-8").count("\n")


def test_generates_translate_ende_once(multi30k_tmp_dir, tmp_path):
    data_dir = tmp_path / "data"
    flags = ["--problem=translate_ende", f"--data_dir={data_dir}", f"--tmp_dir={multi30k_tmp_dir}",
             "--data_hparams=vocab_size=8000,num_train_shards=2", "--nodownload"]
    first = run_datagen(*flags)
    assert first.returncode == 0, first.stderr
    assert sorted(os.listdir(data_dir)) == [
        "translate_ende-eval-00000-of-00001.tfrecord",
        "translate_ende-eval.ids.npy",
        "translate_ende-eval.offsets.npy",
        "translate_ende-train-00000-of-00002.tfrecord",
        "translate_ende-train-00001-of-00002.tfrecord",
        "translate_ende-train.ids.npy",
        "translate_ende-train.offsets.npy",
        "translate_ende.datagen.json",
        "translate_ende.spm.model",
        "translate_ende.spm.vocab",
    ]
    metadata = json.loads((data_dir / "translate_ende.datagen.json").read_text())
    assert metadata["splits"]["train"]["examples"] == line_count(multi30k_tmp_dir / "train.en")
    eval_lines = line_count(multi30k_tmp_dir / "newstest2013.en")
    assert metadata["splits"]["eval"]["examples"] == eval_lines
    assert metadata["data_hparams"]["vocab_size"] == 8000
    assert metadata["data_hparams"]["num_train_shards"] == 2
    assert "data generated" in first.stdout

    before = file_state(data_dir)
    second = run_datagen(*flags)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert file_state(data_dir) == before

    # Asking for other data hparams over existing data is an error that says what to do.
    conflicting = run_datagen(*flags[:3], "--data_hparams=vocab_size=4000")
    assert conflicting.returncode != 0
    assert "vocab_size" in conflicting.stderr
    assert "Drop those from --data_hparams" in conflicting.stderr
    assert "Traceback" not in conflicting.stderr
    assert file_state(data_dir) == before


def test_unknown_problem_lists_the_registered_problems(tmp_path):
    result = run_datagen("--problem=translate_end", f"--data_dir={tmp_path / 'data'}")
    assert result.returncode != 0
    assert "Unknown problem 'translate_end'" in result.stderr
    for name in ("translate_ende", "translate_enfr", "parsing_wsj", "algorithmic_copy"):
        assert name in result.stderr
    assert not (tmp_path / "data").exists()


def test_missing_raw_files_with_nodownload_fail_naming_the_files(tmp_path):
    tmp_dir, data_dir = tmp_path / "raw", tmp_path / "data"
    tmp_dir.mkdir()
    result = run_datagen("--problem=translate_ende", f"--data_dir={data_dir}",
                         f"--tmp_dir={tmp_dir}", "--nodownload")
    assert result.returncode != 0
    for name in ("train.en", "train.de", "training-parallel-europarl-v7.tgz", str(tmp_dir)):
        assert name in result.stderr
    assert "Traceback" not in result.stderr
    assert not (data_dir / "translate_ende.datagen.json").exists()
    assert not data_dir.exists() or not any(data_dir.iterdir())


def test_unknown_data_hparam_names_the_valid_ones(tmp_path):
    result = run_datagen("--problem=parsing_wsj", f"--data_dir={tmp_path / 'data'}",
                         f"--tmp_dir={tmp_path}", "--data_hparams=train_section=01")
    assert result.returncode != 0
    assert "Unknown data hparam 'train_section'" in result.stderr
    assert "add_hparam" not in result.stderr  # a problem's data hparams are its own
    for name in ("train_sections", "eval_sections", "vocab_size", "num_train_shards"):
        assert name in result.stderr
    assert not (tmp_path / "data").exists()


def test_missing_required_flags_are_named():
    result = run_datagen("--problem=translate_ende")
    assert result.returncode != 0
    assert "--data_dir" in result.stderr
