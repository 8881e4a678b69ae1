"""`python -m t2t_repro.paper table3`: built parameter counts against the paper's Table 3.

The counts are checked against a formula derived by hand from the paper's architecture and the
layer code (attention projections without biases, FFN dense layers with biases, post-norm with
two LayerNorm vectors per sublayer and no final stack norm, one shared embedding matrix).
One test runs the whole command (all twenty rows, 13 s on a 2-core Zen 4) as a user would; the
others build a few rows and check the rest by formula.
"""

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from t2t_repro import paper
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer
from t2t_repro.tables import parameter_counts

# Rows with a published count: hparams set -> (d_model, d_ff, h, h·d_k, h·d_v, N, paper millions).
PUBLISHED = {
    "transformer_base": (512, 2048, 8, 512, 512, 6, 65),
    "transformer_table3_b_dk16": (512, 2048, 8, 128, 512, 6, 58),
    "transformer_table3_b_dk32": (512, 2048, 8, 256, 512, 6, 60),
    "transformer_table3_c_n2": (512, 2048, 8, 512, 512, 2, 36),
    "transformer_table3_c_n4": (512, 2048, 8, 512, 512, 4, 50),
    "transformer_table3_c_n8": (512, 2048, 8, 512, 512, 8, 80),
    "transformer_table3_c_d256": (256, 2048, 8, 256, 256, 6, 28),
    "transformer_table3_c_d1024": (1024, 2048, 8, 1024, 1024, 6, 168),
    "transformer_table3_c_ff1024": (512, 1024, 8, 512, 512, 6, 53),
    "transformer_table3_c_ff4096": (512, 4096, 8, 512, 512, 6, 90),
    "transformer_big": (1024, 4096, 16, 1024, 1024, 6, 213),
}
BUILT_ROWS = "transformer_base,transformer_table3_c_d256"


def base_formula(V, d=512, d_ff=2048, N_enc=6, N_dec=6):
    """The hand-derived count when h·d_k = h·d_v = d_model (base, rows A, C and big)."""
    return (
        V * d
        + N_enc * (4 * d**2 + 2 * d * d_ff + d_ff + d + 4 * d)
        + N_dec * (8 * d**2 + 2 * d * d_ff + d_ff + d + 6 * d)
    )


def general_formula(V, d, d_ff, key_channels, value_channels, N_enc, N_dec=None):
    """As `base_formula` with h·d_k, h·d_v and the two depths free (rows B; tiny checks): Q and K
    project d to h·d_k, V projects d to h·d_v, the output projection maps h·d_v back to d."""
    attention = 2 * d * key_channels + 2 * d * value_channels
    feed_forward = 2 * d * d_ff + d_ff + d
    layer_norm = 2 * d  # gamma and beta
    encoder_layer = attention + feed_forward + 2 * layer_norm
    decoder_layer = 2 * attention + feed_forward + 3 * layer_norm
    N_dec = N_enc if N_dec is None else N_dec
    return V * d + N_enc * encoder_layer + N_dec * decoder_layer


@pytest.fixture(scope="module")
def json_report():
    """The command's JSON for two rows, built once for the tests that read it."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = paper.main(["table3", "--format", "json", "--rows", BUILT_ROWS])
    assert status == 0
    return json.loads(stdout.getvalue())


def test_json_report_states_vocabulary_and_rows(json_report):
    assert json_report["vocab_size"] == parameter_counts.DEFAULT_VOCAB_SIZE
    assert json_report["vocab_size_note"] == ("the default, "
                                              + parameter_counts.DEFAULT_VOCAB_SIZE_REASON)
    assert "40,149" in json_report["vocab_size_note"]
    assert [row["hparams_set"] for row in json_report["rows"]] == BUILT_ROWS.split(",")
    keys = {
        "name",
        "hparams_set",
        "change",
        "params",
        "params_millions",
        "paper_millions",
        "relative_difference",
        "within_5_percent",
    }
    for row in json_report["rows"]:
        assert keys <= set(row)
        assert row["params_millions"] == pytest.approx(row["params"] / 1e6, abs=1e-3)


def test_built_rows_within_5_percent_of_paper(json_report):
    for row in json_report["rows"]:
        expected = PUBLISHED[row["hparams_set"]][-1]
        assert row["paper_millions"] == expected
        assert row["relative_difference"] == pytest.approx(row["params"] / (expected * 1e6) - 1,
                                                           abs=1e-4)
        assert row["within_5_percent"] is True, row


def test_base_count_equals_hand_formula(json_report):
    base = json_report["rows"][0]
    assert base["hparams_set"] == "transformer_base"
    assert base["params"] == base_formula(parameter_counts.DEFAULT_VOCAB_SIZE)
    assert base["params"] == 64_581_632  # 40000·512 + 6·3,150,336 + 6·4,199,936


def test_d256_count_equals_hand_formula(json_report):
    d256 = json_report["rows"][1]
    assert d256["params"] == base_formula(parameter_counts.DEFAULT_VOCAB_SIZE, d=256)


@pytest.mark.parametrize(
    "overrides, d, d_ff, key_channels, value_channels, N_enc, N_dec",
    [
        ("", 64, 256, 64, 64, 2, 2),
        # d_k ≠ d_v as in row B, unequal stack depths, another d_ff, in one cheap build.
        (
            "num_heads=2,attention_key_channels=16,attention_value_channels=32,"
            "num_encoder_layers=3,num_decoder_layers=1,filter_size=96",
            64, 96, 16, 32, 3, 1,
        ),
    ],
)
def test_small_models_match_general_formula(
    overrides, d, d_ff, key_channels, value_channels, N_enc, N_dec
):
    vocab = 37
    model = Transformer(create_hparams("transformer_tiny", overrides), vocab, vocab)
    count = model.build_weights().count_params()
    assert count == general_formula(vocab, d, d_ff, key_channels, value_channels, N_enc, N_dec)


def test_learned_positions_add_one_table_per_stack():
    """Row E: a trained [max_length, d] table for the encoder and another for the decoder."""
    vocab = 37
    hp = create_hparams("transformer_tiny", "position_encoding=learned")
    count = Transformer(hp, vocab, vocab).build_weights().count_params()
    sinusoidal = general_formula(vocab, 64, 256, 64, 64, 2)
    assert count - sinusoidal == 2 * hp.max_length * hp.hidden_size


# Exact counts at the paper's nominal ~37,000-token shared vocabulary, worked out by hand.
# Attention projections have no biases (tensor2tensor's convention, kept here), so one
# attention sublayer is W^Q, W^K (d × h·d_k each), W^V (d × h·d_v) and W^O (h·d_v × d); the FFN
# is W1 (d × d_ff) + b1 (d_ff) + W2 (d_ff × d) + b2 (d); a LayerNorm is gamma + beta (2·d).
# An encoder layer has one attention and two LayerNorms, a decoder layer two attentions and
# three; the post-norm stacks end with no extra norm, pre-norm adds one per stack.
PAPER_VOCAB = 37_000
EXACT_COUNTS = {
    "transformer_base": (
        37_000 * 512  # one shared embedding matrix: 18,944,000
        # encoder layer: 4·512² + (512·2048 + 2048 + 2048·512 + 512) + 2·(2·512)
        #              = 1,048,576 + 2,099,712 + 2,048 = 3,150,336
        + 6 * (4 * 512 * 512 + (512 * 2048 + 2048 + 2048 * 512 + 512) + 2 * (2 * 512))
        # decoder layer: 2·(4·512²) + 2,099,712 + 3·(2·512) = 4,199,936
        + 6 * (2 * (4 * 512 * 512) + (512 * 2048 + 2048 + 2048 * 512 + 512) + 3 * (2 * 512)),
        63_045_632,  # 18,944,000 + 18,902,016 + 25,199,616
    ),
    "transformer_base_prenorm": (
        63_045_632 + 2 * (2 * 512),  # base plus a final LayerNorm after each stack
        63_047_680,
    ),
    "transformer_table3_b_dk16": (
        37_000 * 512
        # attention with h·d_k = 8·16 = 128, h·d_v = 512: 2·512·128 + 2·512·512 = 655,360
        + 6 * ((2 * 512 * 128 + 2 * 512 * 512) + 2_099_712 + 2 * (2 * 512))  # 2,757,120
        + 6 * (2 * (2 * 512 * 128 + 2 * 512 * 512) + 2_099_712 + 3 * (2 * 512)),  # 3,413,504
        55_967_744,  # 18,944,000 + 16,542,720 + 20,481,024
    ),
}


@pytest.mark.parametrize("hparams_set", sorted(EXACT_COUNTS))
def test_exact_count_worked_out_by_hand(hparams_set):
    """The built model's count_params() equals the hand arithmetic, to the parameter."""
    arithmetic, total = EXACT_COUNTS[hparams_set]
    assert arithmetic == total
    assert parameter_counts.count_parameters(hparams_set, PAPER_VOCAB) == total


def test_every_published_row_within_5_percent_by_formula():
    for hparams_set, (d, d_ff, _, keys, values, N, millions) in PUBLISHED.items():
        count = general_formula(parameter_counts.DEFAULT_VOCAB_SIZE, d, d_ff, keys, values, N)
        assert abs(count / (millions * 1e6) - 1) <= 0.05, hparams_set


def test_paper_table_data_matches_hparams_sets():
    rows = {row.hparams_set: row for row in parameter_counts.TABLE3}
    assert len(rows) == len(parameter_counts.TABLE3) == 20  # base, A×4, B×2, C×7, D×4, E, big
    assert {name: row.paper_millions for name, row in rows.items() if row.paper_millions} == {
        name: spec[-1] for name, spec in PUBLISHED.items()
    }
    for hparams_set, (d, d_ff, h, keys, values, N, _) in PUBLISHED.items():
        hp = create_hparams(hparams_set)
        assert (hp.hidden_size, hp.filter_size, hp.num_heads, hp.num_hidden_layers) == (
            d,
            d_ff,
            h,
            N,
        )
        assert (hp.attention_key_channels or d, hp.attention_value_channels or d) == (keys, values)


def test_default_vocab_size_minimises_largest_difference():
    """The documented choice: the minimax vocabulary over the published rows, rounded to 1000."""

    def largest_difference(V):
        return max(
            abs(general_formula(V, d, d_ff, k, v, N) / (m * 1e6) - 1)
            for d, d_ff, _, k, v, N, m in PUBLISHED.values()
        )

    best = min(range(30_000, 50_001), key=largest_difference)
    assert best == 40_149
    assert round(best, -3) == parameter_counts.DEFAULT_VOCAB_SIZE
    assert largest_difference(parameter_counts.DEFAULT_VOCAB_SIZE) < 0.025
    # The paper's nominal ~37k puts the 2-layer row (C, N=2) outside 5%.
    assert largest_difference(37_000) > 0.05


def test_text_format_states_vocabulary():
    report = {
        "vocab_size": 123,
        "vocab_size_note": "set with --vocab_size (default 40000)",
        "rows": [
            parameter_counts.compare_row(parameter_counts.TABLE3[0], 66_000_000),
            parameter_counts.compare_row(parameter_counts.TABLE3[1], 64_000_000),
        ],
    }
    text = parameter_counts.format_text(report)
    assert "Vocabulary: 123 tokens" in text and "set with --vocab_size" in text
    assert "+1.5%" in text and "66,000,000" in text and "66.0" in text
    assert "1 of 1 published counts within 5%" in text
    too_many = parameter_counts.compare_row(parameter_counts.TABLE3[0], 70_000_000)
    assert too_many["within_5_percent"] is False
    unpublished = parameter_counts.compare_row(parameter_counts.TABLE3[1], 1)
    assert unpublished["paper_millions"] is None and unpublished["within_5_percent"] is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["table4"], "invalid choice"),
        ([], "required"),
        (["table3", "--vocab_size", "0"], "positive"),
        (["table3", "--vocab_size", "-5"], "positive"),
        (["table3", "--vocab_size", "many"], "positive integer"),
        (["table3", "--format", "xml"], "invalid choice"),
        (["table3", "--rows", "transformer_tiny"], "unknown Table 3 hparams set"),
    ],
)
def test_bad_input_exits_non_zero_with_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        paper.main(argv)
    assert exit_info.value.code == 1
    (line,) = capsys.readouterr().err.splitlines()  # one line, as the absl commands' errors
    assert line.startswith("error: python -m t2t_repro.paper") and message in line


def test_ctrl_c_ends_a_table_with_one_line_and_status_130(monkeypatch, capsys):
    from t2t_repro.cli.entry_point import INTERRUPTED_EXIT_STATUS

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(parameter_counts, "run", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        paper.main(["table3"])
    assert exit_info.value.code == INTERRUPTED_EXIT_STATUS
    assert capsys.readouterr().err.splitlines() == ["interrupted"]


def test_help_explains_the_default_vocabulary(capsys):
    with pytest.raises(SystemExit) as exit_info:
        paper.main(["table3", "--help"])
    assert exit_info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--vocab_size" in help_text and "40,149" in help_text and "6.5% low" in help_text


def test_full_table_command_every_published_row_within_5_percent():
    """The command as a user runs it: the table on stdout, and nothing on stderr (TensorFlow's
    start-up lines too are kept off it, as in every command)."""
    result = subprocess.run(
        [sys.executable, "-m", "t2t_repro.paper", "table3", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert report["vocab_size"] == parameter_counts.DEFAULT_VOCAB_SIZE
    assert len(report["rows"]) == len(parameter_counts.TABLE3)
    published = [row for row in report["rows"] if row["paper_millions"] is not None]
    assert len(published) == len(PUBLISHED)
    assert all(row["within_5_percent"] for row in published), published
    for row in published:
        d, d_ff, _, keys, values, N, _ = PUBLISHED[row["hparams_set"]]
        assert row["params"] == general_formula(parameter_counts.DEFAULT_VOCAB_SIZE, d, d_ff,
                                                keys, values, N)
