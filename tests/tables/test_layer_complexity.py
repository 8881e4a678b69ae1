"""`paper table1`: the growth-exponent fit on synthetic timings, the layers' FLOP counts by hand,
and one tiny measured run through the command line (JSON and the plot)."""

import json

import numpy as np
import pytest

from t2t_repro import paper
from t2t_repro.tables import layer_complexity


@pytest.mark.parametrize("exponent", [1.0, 1.37, 2.0])
def test_fit_recovers_the_exponent_it_was_given(exponent):
    lengths = np.array([256, 512, 1024, 2048, 4096])
    exact = 3e-7 * lengths.astype(float) ** exponent
    assert layer_complexity.fit_exponent(lengths, exact) == pytest.approx(exponent, abs=1e-9)
    # ±3% timing noise moves the slope by well under 0.05 over a 16× range of n.
    noisy = exact * np.random.default_rng(0).uniform(0.97, 1.03, size=len(lengths))
    assert layer_complexity.fit_exponent(lengths, noisy) == pytest.approx(exponent, abs=0.05)


def test_exponents_are_fitted_over_the_lengths_from_fit_from_only():
    """Synthetic timings: a fixed 5 ms overhead below n = 256, then 1e-6·n² seconds (and
    memory growing as n): the fit from 256 sees exactly 2 and 1, a fit from 16 does not."""
    lengths = [16, 32, 64, 128, 256, 512, 1024]
    seconds = [5e-3 if n < 256 else 1e-6 * n * n for n in lengths]
    peaks = [4096 * n for n in lengths]
    record = layer_complexity.summarise("self_attention", lengths, seconds, peaks,
                                        hidden_size=512, window=64, kernel_size=3, fit_from=256)
    assert record["time_exponent"] == pytest.approx(2.0, abs=1e-3)
    assert record["memory_exponent"] == pytest.approx(1.0, abs=1e-3)
    assert record["paper_exponent"] == 2 and record["paper_complexity"] == "O(n²·d)"
    everything = layer_complexity.summarise("self_attention", lengths, seconds, peaks, 512, 64, 3,
                                            fit_from=16)
    assert everything["time_exponent"] < 1.5
    # A zero (TensorFlow's statistics miss tiny allocations) gives no exponent, not -inf.
    assert layer_complexity.summarise("recurrent", lengths, seconds, [0] * len(lengths), 512,
                                      64, 3, fit_from=256)["memory_exponent"] is None


def test_layer_flops_equal_hand_counts():
    # n = 4 positions, d = 8, window r = 2, kernel k = 3; 2 FLOPs per multiply-add.
    n, d = 4, 8
    projections = 4 * (2 * n * d * d)  # W^Q, W^K, W^V, W^O: 2048
    counts = {name: layer_complexity.layer_flops(name, n, d, window=2, kernel_size=3)
              for name in layer_complexity.NAMES}
    assert counts == {
        "self_attention": projections + 2 * (2 * n * n * d),  # QKᵀ, weights·V: 2560
        # 2 blocks of 2 queries, each over its block and two neighbours: 6 keys a query.
        "restricted_self_attention": projections + 2 * (2 * n * 6 * d),  # 2816
        "recurrent": 4 * (2 * n * d * d + 2 * n * d * d),  # 4 gates, input and state: 4096
        "convolutional": 2 * n * 3 * d * d,  # 1536
    }
    assert counts["self_attention"] == 2560 and counts["restricted_self_attention"] == 2816


def test_tiny_measured_table_and_plot_through_the_command_line(tmp_path, capsys):
    plot = tmp_path / "table1.png"
    status = paper.main(["table1", "--lengths", "4,8,16", "--hidden_size", "16", "--window",
                         "4", "--repeats", "1", "--fit_from", "8", "--format", "json",
                         "--plot", str(plot)])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fitted_lengths"] == [8, 16]
    assert [layer["name"] for layer in report["layers"]] == list(layer_complexity.NAMES)
    for layer in report["layers"]:
        assert len(layer["seconds"]) == 3 and min(layer["seconds"]) > 0
        assert layer["flops"] == [layer_complexity.layer_flops(layer["name"], n, 16, 4, 3)
                                  for n in (4, 8, 16)]
    from matplotlib import image

    assert image.imread(plot).shape[:2] == (440, 640)  # 6.4 × 4.4 inches at 100 dpi


@pytest.mark.parametrize("argv, message", [
    (["table1", "--window", "0"], "positive"),
    (["table1", "--lengths", "64"], "at least two"),
    (["table1", "--lengths", "16,x"], "positive integer"),
    (["table1", "--format", "csv"], "invalid choice"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        paper.main(argv)
    assert exit_info.value.code == 1 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--fit_from", "4096"], "error: --fit_from=4096 leaves fewer than two of the lengths"),
    (["--hidden_size", "20"], "error: --hidden_size=20 must be a multiple of 8"),
    (["--plot", "/nonexistent-folder/t.png"],
     "error: --plot=/nonexistent-folder/t.png cannot be written: its folder /nonexistent-folder "
     "does not exist; create it first."),
    (["--plot", "{tmp_path}"], "error: --plot={tmp_path} is a folder; name a file"),
    (["--plot", "{tmp_path}/ckpt-20.weights.h5"],
     "error: --plot={tmp_path}/ckpt-20.weights.h5 is a checkpoint; writing it would replace it. "
     "Name another output file."),
    (["--plot", "{tmp_path}/t.txt"], "error: --plot={tmp_path}/t.txt must name a PNG file "
                                     "(FILE.png), which the plot is."),
    (["--plot", "{tmp_path}/kept/"], "error: --plot={tmp_path}/kept/ must name a PNG file "
                                     "(FILE.png), which the plot is."),
    (["--plot", "{tmp_path}/notes.png"], "error: --plot={tmp_path}/notes.png holds a file that is "
                                         "not a PNG, which the plot would replace; name another "
                                         "file."),
])
def test_senseless_values_stop_before_measuring_with_one_line(argv, message, tmp_path):
    checkpoint = tmp_path / "ckpt-20.weights.h5"
    checkpoint.write_bytes(b"\x89HDF\r\n\x1a\n weights")
    (tmp_path / "notes.png").write_text("not a picture\n")
    with pytest.raises(SystemExit) as exit_info:
        paper.main(["table1", "--lengths", "8,16",
                    *(arg.format(tmp_path=tmp_path) for arg in argv)])
    text = str(exit_info.value.code)
    assert text.startswith(message.format(tmp_path=tmp_path)) and "\n" not in text
    assert checkpoint.read_bytes() == b"\x89HDF\r\n\x1a\n weights"
