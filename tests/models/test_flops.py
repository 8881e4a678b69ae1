"""The FLOP counter against a matmul-by-matmul hand count, and the peak table."""

import pytest

from t2t_repro.hparams import create_hparams
from t2t_repro.models.flops import forward_flops, forward_flops_by_part, training_flops
from t2t_repro.training.peak_flops import compute_dtype, peak_tflops


def matmul(m, k, n):
    """FLOPs of an [m, k] × [k, n] product: m·n dot products of k multiply-adds."""
    return 2 * m * k * n


def test_one_layer_model_equals_the_hand_count():
    """d_model 4, d_ff 8, 2 heads of 2 (h·d_k = h·d_v = 4), vocabulary 10, a pair of 3 source
    and 2 target tokens; every matmul the model runs, written out."""
    hparams = create_hparams("transformer_tiny", "hidden_size=4,filter_size=8,num_heads=2,"
                                                 "num_hidden_layers=1")
    s, t, d, f, vocab = 3, 2, 4, 8, 10
    heads, head_size = 2, 2
    encoder = (
        3 * matmul(s, d, d)  # Q, K, V projections of the source
        + heads * matmul(s, head_size, s)  # QKᵀ per head
        + heads * matmul(s, s, head_size)  # weights · V per head
        + matmul(s, d, d)  # output projection
        + matmul(s, d, f) + matmul(s, f, d)  # feed-forward
    )
    decoder_self = (3 * matmul(t, d, d) + heads * matmul(t, head_size, t)
                    + heads * matmul(t, t, head_size) + matmul(t, d, d))
    decoder_cross = (matmul(t, d, d)  # queries from the decoder
                     + 2 * matmul(s, d, d)  # keys and values from the encoder's output
                     + heads * matmul(t, head_size, s) + heads * matmul(t, s, head_size)
                     + matmul(t, d, d))
    decoder_ffn = matmul(t, d, f) + matmul(t, f, d)
    logits = matmul(t, d, vocab)
    by_hand = encoder + decoder_self + decoder_cross + decoder_ffn + logits
    assert by_hand == 2064
    assert forward_flops(hparams, vocab).of_lengths(s, t) == by_hand
    assert training_flops(hparams, vocab).of_lengths(s, t) == 3 * by_hand
    parts = forward_flops_by_part(hparams, vocab)
    assert parts["decoder_encoder_attention"].of_lengths(s, t) == decoder_cross
    assert parts["logits"].of_lengths(s, t) == logits


def test_a_batch_counted_from_length_sums_equals_the_sum_over_its_pairs():
    hparams = create_hparams("transformer_base", "num_encoder_layers=3,num_decoder_layers=5")
    flops = training_flops(hparams, 37000)
    pairs = [(7, 9), (30, 25), (1, 2), (54, 61)]
    sums = [sum(s for s, _ in pairs), sum(t for _, t in pairs), sum(s * s for s, _ in pairs),
            sum(t * t for _, t in pairs), sum(s * t for s, t in pairs)]
    assert flops.of_sums(*sums) == pytest.approx(sum(flops.of_lengths(s, t) for s, t in pairs))
    # Unequal stacks count each stack's own layers: 5 decoder layers cost 5/3 of 3.
    three = training_flops(create_hparams("transformer_base", "num_decoder_layers=3"), 37000)
    assert flops.of_lengths(0, 10) > three.of_lengths(0, 10)


@pytest.mark.parametrize("name, dtype, expected", [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989.0),
    ("NVIDIA A100-SXM4-40GB", "bfloat16", 312.0),
    ("NVIDIA A10", "float32", 31.2),
    ("Tesla V100-SXM2-16GB", "float16", 125.0),
    ("Tesla V100-SXM2-16GB", "bfloat16", None),  # V100 has no bfloat16 tensor cores
    ("NVIDIA L40S", "bfloat16", None),  # not the L4
    ("AMD EPYC", "float32", None),
])
def test_peak_table_lookups(name, dtype, expected):
    assert peak_tflops(name, dtype) == expected


def test_compute_dtype_of_a_policy():
    assert compute_dtype("mixed_bfloat16") == "bfloat16"
    assert compute_dtype("float32") == "float32"
