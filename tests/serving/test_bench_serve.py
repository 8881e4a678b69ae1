"""A short run of `python -m t2t_repro.bench serve` on the toy export: both batching settings
side by side, every figure present, no errors."""

import re

import pytest

from conftest import run_module_in_subprocess
from toy_export import write_toy_export

ROWS = ["requests/s (answers of any kind)", "sentences/s (translations)", "latency p50",
        "latency p90", "latency p99", "errors (whole run, warm-up included)",
        "server VmRSS before the load", "server VmRSS after the load",
        "server peak resident memory (VmHWM)"]


def test_bench_serve_measures_batching_on_beside_off(tmp_path):
    write_toy_export(tmp_path / "export", 1)
    sentences = tmp_path / "sentences.en"
    sentences.write_text("A man rides a bike.\nTwo dogs play.\n\nA girl in red.\n")
    result = run_module_in_subprocess(
        "t2t_repro.bench", "serve", f"--export_dir={tmp_path / 'export'}",
        "--clients=2", "--seconds=1", "--warmup_seconds=0.5",
        f"--sentences_file={sentences}")
    assert result.returncode == 0, result.stderr + result.stdout
    table = {cells[0]: cells[1:] for cells in
             (re.split(r"\s{2,}", line) for line in result.stdout.splitlines())}
    assert "version 1" in result.stdout and "3 sentences" in result.stdout
    for what in ROWS:
        figure, unit, peer, peer_figure = table[what][:4]
        assert peer == "batching off", table[what]
        if what.startswith("errors"):
            assert float(figure) == float(peer_figure) == 0, result.stdout
        else:
            assert float(figure.replace(",", "")) > 0 and float(peer_figure.replace(",", "")) > 0
    assert "first error" not in result.stdout
    memory = {what: float(table[what][0].replace(",", "")) for what in ROWS[-3:]}
    assert memory["server peak resident memory (VmHWM)"] >= max(memory.values()), memory


def test_a_sentences_file_of_blank_lines_is_one_line_before_a_server_starts(tmp_path):
    from t2t_repro.bench.__main__ import main

    blank = tmp_path / "blank.en"
    blank.write_text("\n  \n")
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "serve", f"--export_dir={tmp_path}", f"--sentences_file={blank}"])
    assert exit_.value.code == f"error: --sentences_file {blank} has no non-empty line."
