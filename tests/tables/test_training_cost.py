"""`paper table2`: training FLOPs counted per target token against hand counts (a 1-layer model
with small sizes, and the base model's formula), and the paper's own estimate reproduced."""

import json

import pytest

from t2t_repro import paper
from t2t_repro.hparams import create_hparams
from t2t_repro.tables import training_cost


def _matmul(rows, inner, columns):
    return 2 * rows * inner * columns


def test_one_layer_model_equals_a_hand_count():
    # d_model 4, d_ff 8, h 2 (d_k = d_v = 2), vocabulary 10; pairs of 2 + 2 tokens; a run of
    # 7 steps of 5 target tokens, 2 hours on 3 K80s.
    hparams = create_hparams("transformer_tiny",
                             "hidden_size=4,filter_size=8,num_heads=2,num_hidden_layers=1")
    d, d_ff, h, d_head, vocab, n = 4, 8, 2, 2, 10, 2
    attention = (3 * _matmul(n, d, h * d_head) + h * _matmul(n, d_head, n)
                 + h * _matmul(n, n, d_head) + _matmul(n, h * d_head, d))  # 192+32+32+64
    ffn = _matmul(n, d, d_ff) + _matmul(n, d_ff, d)  # 128 + 128
    logits = _matmul(n, d, vocab)  # 160
    forward_per_pair = 3 * attention + 2 * ffn + logits  # encoder-decoder K, V over n too
    assert (attention, ffn, logits, forward_per_pair) == (320, 256, 160, 1632)

    run = training_cost.PaperRun("tiny", "transformer_tiny", steps=7, hours=2, gpus=3,
                                 gpu="K80", paper_flops=1e9)
    record = training_cost.training_cost(run, hparams, vocab_size=vocab, length=n,
                                         tokens_per_step=5)
    parts = record["parts_per_target_token"]
    assert parts["encoder_attention"] == {"layers": 1, "forward": attention / n,
                                          "backward": 2 * attention / n}
    assert parts["decoder_ffn"]["forward"] == ffn / n
    assert parts["logits"] == {"layers": 1, "forward": logits / n, "backward": 2 * logits / n}
    assert record["training_flops_per_target_token"] == 3 * forward_per_pair / n  # 2448
    assert record["counted_flops"] == 3 * forward_per_pair / n * 5 * 7
    assert record["paper_estimate"]["flops"] == pytest.approx(2 * 3600 * 3 * 2.8e12)
    assert record["counted_over_paper"] == pytest.approx(2448 * 35 / 1e9)


def test_base_per_target_token_equals_the_papers_sizes_by_hand():
    """transformer_base (N 6, d 512, d_ff 2048, h·d_k = 512) with 37,000 tokens, pairs of 25:
    per layer and token, self- and encoder-decoder attention 8·d² + 4·n·d, the FFN 4·d·d_ff;
    once, the logits 2·d·V; training 3× the forward pass."""
    d, d_ff, vocab, n, layers = 512, 2048, 37000, 25, 6
    attention = 8 * d * d + 4 * n * d
    forward = layers * (3 * attention + 2 * 4 * d * d_ff) + 2 * d * vocab
    report = training_cost.table2(vocab, n, 25000, runs=training_cost.PAPER_RUNS[:1])
    (base,) = report["models"]
    assert base["training_flops_per_target_token"] == 3 * forward
    assert base["counted_flops"] == pytest.approx(3 * forward * 25000 * 100_000)


def test_the_papers_estimate_is_reproduced_from_its_own_hardware_figures():
    """12 h and 3.5 days on 8 P100s at 9.5 TFLOPS give Table 2's 3.3e18 and 2.3e19 (within
    rounding), and the runs' steps are the registered sets' train_steps."""
    for run, published in zip(training_cost.PAPER_RUNS, (3.3e18, 2.3e19)):
        assert run.paper_flops == published
        assert run.estimate() == pytest.approx(published, rel=0.01)
        assert create_hparams(run.hparams_set).train_steps == run.steps


def test_table2_command_prints_both_models_and_the_method(capsys):
    assert paper.main(["table2", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [model["model"] for model in report["models"]] == ["base", "big"]
    for model in report["models"]:
        # What the model's matmuls need is below what 8 P100s at 9.5 TFLOPS could do.
        assert 0 < model["counted_over_paper"] < 1
    assert paper.main(["table2"]) == 0
    text = capsys.readouterr().out
    assert "12 h × 8 P100 × 9.5 TFLOPS = 3.28e+18" in text
    assert "84 h × 8 P100 × 9.5 TFLOPS = 2.30e+19" in text
    with pytest.raises(SystemExit):
        paper.main(["table2", "--length", "0"])
