"""`python -m t2t_repro.visualize` on a run with random weights (the drawing needs no training):
the arrays drawn (attention rows summing to 1, the causal zeros, the paper's sinusoids and
schedule by hand), the PNGs' pixel sizes, the token labels, and the command line."""

import math
import os

import keras
import numpy as np
import pytest
from conftest import NUMPY_OUT_OF_MEMORY, allocate_unaddressable, run_module
from matplotlib import image

from problems.algorithmic import AlgorithmicReverse
from t2t_repro import hparams as hparams_lib
from t2t_repro.cli.model_flags import ConfigurationError
from t2t_repro.training.run import build_model, compile_for_training, load_trained_model
from t2t_repro.visualization import attention, figures, plots

SOURCE = "3 1 4 1 5"
TARGET = "5 1 4 1 3"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """An --output_dir holding transformer_tiny's hparams.json and a checkpoint of random
    weights for algorithmic_reverse, as the trainer writes them."""
    output_dir = tmp_path_factory.mktemp("visualize_run")
    hparams = hparams_lib.create_hparams("transformer_tiny")
    keras.utils.set_random_seed(0)
    model = compile_for_training(build_model("transformer", hparams, AlgorithmicReverse()),
                                 hparams)
    hparams_lib.save(hparams, str(output_dir))
    model.save_weights(str(output_dir / "ckpt-1.weights.h5"))
    return output_dir


def test_drawn_arrays_and_png_sizes(run_dir, tmp_path):
    problem = AlgorithmicReverse()
    hparams = hparams_lib.load(str(run_dir))
    model = load_trained_model("transformer", hparams, problem, str(run_dir / "ckpt-1.weights.h5"))
    input_ids, target_ids = problem.encode(SOURCE), problem.encode(TARGET)  # 6 ids each, EOS
    drawn = plots.write_plots(model, problem, input_ids, target_ids, -1, str(tmp_path),
                              hparams, positions=50)
    assert sorted(os.path.basename(path) for path in drawn) == [
        "attention_decoder_self_layer1.png", "attention_encoder_decoder_layer1.png",
        "attention_encoder_self_layer1.png", "learning_rate.png", "positional_encoding.png"]

    for stack in attention.STACKS:
        path = str(tmp_path / f"attention_{stack}_layer1.png")
        weights = drawn[path]
        assert weights.shape == (4, 6, 6)  # 4 heads; 6 queries and keys each side
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        width, height = figures.heads_figure_size(4, 6, 6)
        assert image.imread(path).shape[:2] == (round(height * figures.DPI),
                                                 round(width * figures.DPI))
        assert os.path.getsize(path) < 200_000
    decoder_self = drawn[str(tmp_path / "attention_decoder_self_layer1.png")]
    assert np.all(decoder_self[:, np.triu_indices(6, k=1)[0], np.triu_indices(6, k=1)[1]] == 0)

    # The paper's sinusoids, written out: PE(pos, 2i) = sin(pos / 10000^(2i/d)), cos at 2i+1.
    position, pair = np.meshgrid(np.arange(50), np.arange(32), indexing="ij")
    angles = position / 10000 ** (2 * pair / 64)
    table = drawn[str(tmp_path / "positional_encoding.png")]
    np.testing.assert_allclose(table[:, 0::2], np.sin(angles), atol=1e-4)
    np.testing.assert_allclose(table[:, 1::2], np.cos(angles), atol=1e-4)

    # transformer_tiny: constant 2, d_model 64, warmup 400, 2000 steps.
    rates = drawn[str(tmp_path / "learning_rate.png")]
    assert len(rates) == 2000 and int(np.argmax(rates)) == 399
    assert rates[399] == pytest.approx(2 * 64**-0.5 * 400**-0.5, rel=1e-5)
    assert rates[99] == pytest.approx(2 * 64**-0.5 * 100 * 400**-1.5, rel=1e-5)
    assert rates[1599] == pytest.approx(2 * 64**-0.5 * 1600**-0.5, rel=1e-5)


def test_heads_figure_size_grows_with_the_sentence():
    assert figures.heads_figure_size(8, 5, 5) == pytest.approx(
        (4 * (figures.MIN_PANEL_INCHES + figures.LABEL_INCHES),
         2 * (figures.MIN_PANEL_INCHES + figures.LABEL_INCHES) + figures.TITLE_INCHES))
    width, height = figures.heads_figure_size(3, 30, 20)
    assert width == pytest.approx(3 * (20 * figures.INCHES_PER_TOKEN + figures.LABEL_INCHES))
    assert height == pytest.approx(math.ceil(3 / 4) * (30 * figures.INCHES_PER_TOKEN
                                                       + figures.LABEL_INCHES)
                                   + figures.TITLE_INCHES)


def test_labels_name_the_tokens_and_the_decoder_positions():
    problem = AlgorithmicReverse()
    labels = attention.axis_labels(problem, problem.encode("3 1"), problem.encode("1 3"))
    assert labels["encoder_self"] == (["3", "1", "</s>"], ["3", "1", "</s>"])
    # Decoder rows: the token each position predicts; self-attention columns: its input.
    assert labels["decoder_self"] == (["1", "3", "</s>"], ["<s>", "1", "3"])
    assert labels["encoder_decoder"] == (["1", "3", "</s>"], ["3", "1", "</s>"])


def test_unencodable_text_is_an_error_naming_the_flag():
    with pytest.raises(ConfigurationError,
                       match="--inputs: algorithmic_reverse accepts only the symbols 0..9"):
        plots.encode(AlgorithmicReverse(), "3 x", "inputs")


def test_a_layer_outside_both_stacks_is_an_error_naming_the_range():
    hparams = hparams_lib.create_hparams("transformer_tiny", "num_decoder_layers=3")
    plots.check_layer(hparams, 1)
    plots.check_layer(hparams, -2)
    with pytest.raises(ConfigurationError, match="--layer=2 .* 2 encoder and 3 decoder layers; "
                                                 "use 0 to 1, or -1 for the last.$"):
        plots.check_layer(hparams, 2)
    with pytest.raises(ConfigurationError, match="--layer=-3"):
        plots.check_layer(hparams, -3)
    one_layer = hparams_lib.create_hparams("transformer_tiny", "num_hidden_layers=1")
    with pytest.raises(ConfigurationError, match="1 encoder and 1 decoder layer; use 0, or -1 "
                                                 "for the last.$"):
        plots.check_layer(one_layer, 1)


def test_command_line_draws_the_models_own_translation(run_dir, tmp_path):
    plot_dir = tmp_path / "plots"
    result = run_module("t2t_repro.visualize", "--problem=algorithmic_reverse",
                        f"--output_dir={run_dir}", f"--inputs={SOURCE}", f"--plot_dir={plot_dir}",
                        "--layer=0", "--schedule_hparams_set=transformer_base")
    assert result.returncode == 0, result.stderr
    assert "Translation (the model's own, used as the target)" in result.stderr
    written = result.stdout.split()
    assert [os.path.basename(path) for path in written] == [
        "attention_encoder_self_layer0.png", "attention_decoder_self_layer0.png",
        "attention_encoder_decoder_layer0.png", "positional_encoding.png", "learning_rate.png"]
    assert all(os.path.getsize(path) < 200_000 for path in written)


@pytest.mark.parametrize("flags, message", [
    (["--targets=5 1 4", "--decode_hparams=beam_size=8"],
     "--decode_hparams sets the search that translates --inputs; with --targets none runs: "
     "leave one of them out."),
    (["--decode_hparams=beam_size=2,return_beams=true,batch_size=4"],
     "t2t_repro.visualize does not read decode hparam batch_size=4, return_beams=true: it reads "
     "beam_size, alpha, extra_length and the sampling hparams, for one translation."),
    # Millions of rows exhausted the machine's memory after the attention plots were drawn.
    (["--positions=10000000"], "--positions=10000000: draw at least 1 position and at most "
                               "100,000 (a row each in the plot)."),
])
def test_a_decode_hparam_nothing_reads_is_an_error_before_anything_is_drawn(run_dir, tmp_path,
                                                                          flags, message):
    """Not ignored: with --targets no search runs, and one translation has no beams to list
    nor batches to size."""
    plot_dir = tmp_path / "plots"
    refused = run_module("t2t_repro.visualize", "--problem=algorithmic_reverse",
                         f"--output_dir={run_dir}", f"--inputs={SOURCE}",
                         f"--plot_dir={plot_dir}", *flags)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == f"error: {message}"
    assert not plot_dir.exists() or not os.listdir(plot_dir)


def test_a_translation_out_of_memory_is_one_line_naming_the_settings_to_lower(
        run_dir, tmp_path, monkeypatch):
    """The search asks for more bytes than a process can address (a real allocation failure,
    at once on any machine), as a huge beam_size would; nothing is drawn."""
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch

    monkeypatch.setattr(TransformerBeamSearch, "__call__", allocate_unaddressable)
    plot_dir = tmp_path / "plots"
    refused = run_module("t2t_repro.visualize", "--problem=algorithmic_reverse",
                         f"--output_dir={run_dir}", f"--inputs={SOURCE}",
                         f"--plot_dir={plot_dir}", "--decode_hparams=beam_size=3,extra_length=7")
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
        f"error: translating --inputs ran out of memory ({NUMPY_OUT_OF_MEMORY}); lower beam_size "
        f"(now 3) or extra_length (now 7 tokens) in --decode_hparams, or give --targets.")
    assert not plot_dir.exists() or not os.listdir(plot_dir)


def test_a_source_over_max_input_tokens_is_an_error_before_anything_is_drawn(run_dir, tmp_path):
    """As the decoder's: hparam max_length (64 here) by default, --max_input_tokens raises it;
    over it, a sinusoidal model would decode and draw for minutes."""
    plot_dir = tmp_path / "plots"
    long_source = " ".join(["3"] * 64)  # and EOS: 65 tokens
    refused = run_module("t2t_repro.visualize", "--problem=algorithmic_reverse",
                         f"--output_dir={run_dir}", f"--inputs={long_source}",
                         f"--plot_dir={plot_dir}")
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
        "error: the source has 65 tokens (EOS included), more than the decoder takes: "
        "max_input_tokens=64 (default: hparam max_length). Split or shorten it, or raise "
        "--max_input_tokens.")
    assert not plot_dir.exists() or not os.listdir(plot_dir)
    raised = run_module("t2t_repro.visualize", "--problem=algorithmic_reverse",
                        f"--output_dir={run_dir}", f"--inputs={long_source}",
                        f"--plot_dir={plot_dir}", "--targets=3", "--max_input_tokens=65")
    assert raised.returncode == 0, raised.stderr
