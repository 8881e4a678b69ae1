"""The FLOP counter (models/flops.py) and the peak table (training/peak_flops.py): hand counts,
the real model's traced matmuls, the paper's Table 2 budget, device-name lookups."""

import math
import subprocess
import sys

import pytest

from conftest import HANG_GUARD_S
from t2t_repro.hparams import create_hparams
from t2t_repro.models import flops
from t2t_repro.training import peak_flops


def _hparams(hparams_set="transformer_tiny", **overrides):
    return create_hparams(hparams_set, ",".join(f"{k}={v}" for k, v in overrides.items()))


def _matmul_flops(n_rows, n_inner, n_cols):
    """2 FLOPs per multiply-add of an [n_rows, n_inner] × [n_inner, n_cols] product."""
    return 2 * n_rows * n_inner * n_cols


def test_one_layer_model_equals_a_hand_count():
    # d_model=4, d_ff=8, h=2 (d_k = d_v = 2), V=10; one pair of 3 source and 2 target tokens.
    hparams = _hparams(hidden_size=4, filter_size=8, num_heads=2, num_hidden_layers=1)
    d, d_ff, h, d_head, vocab, s, t = 4, 8, 2, 2, 10, 3, 2
    encoder_attention = (
        _matmul_flops(s, d, h * d_head)  # Q = x W^Q
        + _matmul_flops(s, d, h * d_head)  # K
        + _matmul_flops(s, d, h * d_head)  # V
        + h * _matmul_flops(s, d_head, s)  # Q_i K_iᵀ per head
        + h * _matmul_flops(s, s, d_head)  # weights_i V_i per head
        + _matmul_flops(s, h * d_head, d)  # Concat(heads) W^O
    )
    encoder_ffn = _matmul_flops(s, d, d_ff) + _matmul_flops(s, d_ff, d)
    decoder_self_attention = (  # masked, over the full t × t square
        3 * _matmul_flops(t, d, h * d_head)
        + h * _matmul_flops(t, d_head, t) + h * _matmul_flops(t, t, d_head)
        + _matmul_flops(t, h * d_head, d)
    )
    decoder_encoder_attention = (
        _matmul_flops(t, d, h * d_head)  # Q from the decoder
        + 2 * _matmul_flops(s, d, h * d_head)  # K, V from the encoder's output
        + h * _matmul_flops(t, d_head, s) + h * _matmul_flops(t, s, d_head)
        + _matmul_flops(t, h * d_head, d)
    )
    decoder_ffn = _matmul_flops(t, d, d_ff) + _matmul_flops(t, d_ff, d)
    logits = _matmul_flops(t, d, vocab)
    # The same figures as plain numbers: 96·3+72+72+96, 192+192, 64·3+32+32+64,
    # 64+96·2+48+48+64, 128+128, 160.
    assert (encoder_attention, encoder_ffn, decoder_self_attention, decoder_encoder_attention,
            decoder_ffn, logits) == (528, 384, 320, 416, 256, 160)

    parts = flops.flops_by_part(hparams, vocab, s, t)
    assert parts == {
        "encoder_attention": encoder_attention, "encoder_ffn": encoder_ffn,
        "decoder_self_attention": decoder_self_attention,
        "decoder_encoder_attention": decoder_encoder_attention,
        "decoder_ffn": decoder_ffn, "logits": logits, "total": 2064,
    }
    assert flops.forward_flops(hparams, vocab).of_lengths(s, t) == 2064
    assert flops.training_flops(hparams, vocab).of_lengths(s, t) == 3 * 2064
    assert flops.flops_by_part(hparams, vocab, s, t, training=True)["logits"] == 3 * 160


def test_unequal_stacks_and_head_sizes_equal_a_hand_count():
    # 2 encoder layers, 1 decoder layer, d_model=6, d_ff=5, h=2 with d_k=1 and d_v=4, V=7,
    # separate embeddings; one pair of 4 source and 3 target tokens.
    hparams = _hparams(hidden_size=6, filter_size=5, num_heads=2, num_encoder_layers=2,
                       num_decoder_layers=1, attention_key_channels=2,
                       attention_value_channels=8, shared_source_target_embedding=False,
                       shared_embedding_and_softmax_weights=False)
    d, d_ff, h, d_k, d_v, vocab, s, t = 6, 5, 2, 1, 4, 7, 4, 3

    def attention(queries, keys):
        return (_matmul_flops(queries, d, h * d_k) + _matmul_flops(keys, d, h * d_k)
                + _matmul_flops(keys, d, h * d_v)
                + h * _matmul_flops(queries, d_k, keys) + h * _matmul_flops(queries, keys, d_v)
                + _matmul_flops(queries, h * d_v, d))

    def ffn(positions):
        return _matmul_flops(positions, d, d_ff) + _matmul_flops(positions, d_ff, d)

    expected = {
        "encoder_attention": 2 * attention(s, s),  # 2 · (96+96+384+64+256+384)
        "encoder_ffn": 2 * ffn(s),
        "decoder_self_attention": attention(t, t),
        "decoder_encoder_attention": attention(t, s),
        "decoder_ffn": ffn(t),
        "logits": _matmul_flops(t, d, vocab),
    }
    assert expected["encoder_attention"] == 2560
    expected["total"] = sum(expected.values())
    assert expected["total"] == 6112
    assert flops.flops_by_part(hparams, vocab, s, t) == expected
    assert flops.layer_counts(hparams) == (2, 1)


def test_head_sizes_round_down_as_the_model_sizes_them():
    # 7 key channels over 2 heads: the model builds heads of 3, so h·d_k = 6.
    hparams = _hparams(attention_key_channels=7, num_heads=2)
    assert flops.attention_widths(hparams) == (6, 64)
    with pytest.raises(ValueError, match="attention_key_channels=1"):
        flops.attention_widths(_hparams(attention_key_channels=1, num_heads=2))


def test_a_batch_costs_the_sum_of_its_pairs_and_filler_rows_nothing():
    counter = flops.training_flops(_hparams(), 29)
    sources, targets = [5, 1, 9, 0], [3, 7, 2, 0]
    by_pair = sum(counter.of_lengths(s, t) for s, t in zip(sources, targets))
    assert counter.of_batch(sources, targets) == by_pair
    assert counter.of_batch(sources[:3], targets[:3]) == by_pair
    assert counter.of_sums(15, 12, 25 + 1 + 81, 9 + 49 + 4, 15 + 7 + 18) == by_pair
    with pytest.raises(ValueError, match="one .source, target. length per sentence pair"):
        counter.of_batch([1, 2], [3])
    with pytest.raises(ValueError, match=">= 0"):
        counter.of_lengths(-1, 2)


def _traced_matmul_flops(graph):
    """FLOPs of every matmul op in `graph`, from its static shapes."""
    total = 0
    types = {op.type for op in graph.get_operations()}
    assert not types & {"Einsum", "Conv2D", "SparseMatMul"}, "a matmul op this count skips"
    for op in graph.get_operations():
        if op.type == "MatMul":
            a = op.inputs[0].shape
            inner = a[0] if op.get_attr("transpose_a") else a[1]
        elif op.type in ("BatchMatMulV2", "BatchMatMulV3"):
            a = op.inputs[0].shape
            inner = a[-2] if op.get_attr("adj_x") else a[-1]
        else:
            continue
        total += 2 * math.prod(op.outputs[0].shape) * inner
    return total


@pytest.mark.parametrize("overrides, input_vocab", [
    ({}, 29),
    (dict(num_encoder_layers=1, num_decoder_layers=3, num_heads=4, attention_key_channels=32,
          attention_value_channels=96, shared_source_target_embedding=False,
          shared_embedding_and_softmax_weights=False), 17),
])
def test_counter_equals_the_real_models_traced_matmuls(overrides, input_vocab):
    """The model's forward pass and its gradients, traced by TensorFlow: the FLOPs of the
    graph's matmuls equal the counter's forward count, and the backward ones twice it."""
    tf = pytest.importorskip("tensorflow")
    import keras

    from t2t_repro.models.transformer import Transformer

    hparams = _hparams(layer_prepostprocess_dropout=0.0, **overrides)
    target_vocab, batch, s, t = 29, 2, 5, 3
    model = Transformer(hparams, input_vocab, target_vocab).build_weights()
    features = {"inputs": tf.TensorSpec([batch, s], tf.int32),
                "targets": tf.TensorSpec([batch, t], tf.int32)}

    forward = tf.function(lambda f: model(f, training=False), autograph=False)
    forward_graph = forward.get_concrete_function(features).graph

    def loss_and_gradients(f):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(f, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    step_graph = tf.function(loss_and_gradients, autograph=False).get_concrete_function(
        features).graph
    counter_forward = flops.forward_flops(hparams, target_vocab).of_batch([s] * batch,
                                                                          [t] * batch)
    assert keras.backend.backend() == "tensorflow"
    assert _traced_matmul_flops(forward_graph) == counter_forward
    assert _traced_matmul_flops(step_graph) == flops.training_flops(
        hparams, target_vocab).of_batch([s] * batch, [t] * batch)


@pytest.mark.parametrize("hparams_set, seconds_per_step, paper_flops", [
    ("transformer_base", 0.4, 3.3e18),
    ("transformer_big", 1.0, 2.3e19),
])
def test_paper_training_runs_fit_the_paper_hardware(hparams_set, seconds_per_step, paper_flops):
    """Table 2's cost is GPU time × 8 GPUs × 9.5 TFLOPS, an estimate from hardware, not a
    count. The counted FLOPs of a run (EN-DE, a 37,000-token vocabulary, ~25,000 source and
    ~25,000 target tokens per step as pairs of 25 + 25 tokens) must fit in what 8 P100s can do
    at their datasheet peak in the paper's step time (utilisation <= 1), and must not be so
    low that the paper's GPUs would have sat at under 10% of their peak on these large dense
    float32 matmuls."""
    hparams = _hparams(hparams_set)
    pairs, length = 1000, 25
    step_flops = flops.training_flops(hparams, 37000).of_batch([length] * pairs,
                                                               [length] * pairs)
    utilisation = peak_flops.model_flops_utilization(
        step_flops / seconds_per_step, 8 * peak_flops.peak_tflops("Tesla P100-SXM2-16GB",
                                                                  "float32"))
    run_flops = step_flops * hparams.train_steps
    print(f"{hparams_set}: {step_flops / (pairs * length):.4g} training FLOPs per target "
          f"token; {run_flops:.3g} per run (paper {paper_flops:.2g}, ratio "
          f"{run_flops / paper_flops:.2f}); implied P100 utilisation {utilisation:.0%}")
    assert 0.1 < utilisation <= 1.0


@pytest.mark.parametrize("device_name, dtype, expected", [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 1979 / 2),  # datasheet: 1979 with sparsity
    ("NVIDIA H100 80GB HBM3", "tf32", 989 / 2),
    ("NVIDIA H100 PCIe", "bfloat16", 1513 / 2),
    ("NVIDIA H200", "float16", 1979 / 2),
    ("NVIDIA H200", "float32", 67.0),
    ("NVIDIA A100-SXM4-40GB", "bfloat16", 312.0),
    ("NVIDIA A100 80GB PCIe", "tf32", 156.0),
    ("NVIDIA A100-SXM4-80GB", "float32", 19.5),
    ("NVIDIA A10", "bfloat16", 125.0),
    ("NVIDIA L4", "bfloat16", 242 / 2),
    ("Tesla V100-SXM2-16GB", "float16", 125.0),
    ("Tesla V100-SXM2-16GB", "bfloat16", None),  # no bfloat16 hardware before Ampere
    ("Tesla V100-SXM2-32GB", "tf32", 15.7),  # no TF32 either: float32 runs at FP32
    ("Tesla V100-PCIE-32GB", "float32", 14.0),
    ("Tesla T4", "float16", 65.0),
    ("Tesla P100-SXM2-16GB", "float32", 10.6),
    ("Tesla P100-PCIE-16GB", "float16", 18.7),
    # Unknown: a different chip whose name contains a known one, other form factors, CPUs.
    ("NVIDIA A10G", "float32", None),
    ("NVIDIA L40S", "bfloat16", None),
    ("Tesla V100-FHHL-16GB", "float16", None),
    ("NVIDIA H100", "bfloat16", None),
    ("cpu", "float32", None),
    ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "float32", None),
])
def test_peak_tflops_by_reported_device_name(device_name, dtype, expected):
    assert peak_flops.peak_tflops(device_name, dtype) == expected


def test_peak_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="expected one of"):
        peak_flops.peak_tflops("NVIDIA A100-SXM4-40GB", "fp8")
    with pytest.raises(ValueError, match="--peak_tflops"):
        peak_flops.model_flops_utilization(1e12, 0)
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        peak_flops.compute_dtype("float64")


def test_compute_dtype_and_utilization():
    assert peak_flops.compute_dtype("mixed_bfloat16") == "bfloat16"
    assert peak_flops.compute_dtype("mixed_float16", tensor_float_32=True) == "float16"
    assert peak_flops.compute_dtype("float32") == "float32"
    assert peak_flops.compute_dtype("float32", tensor_float_32=True) == "tf32"
    assert peak_flops.model_flops_utilization(156e12, 2 * 312.0) == 0.25


def test_modules_import_without_tensorflow_or_keras():
    """Both modules load with tensorflow and keras made unimportable (flops.py by its path,
    since its package's __init__ imports the Keras model)."""
    code = (
        "import importlib.util, sys\n"
        "sys.modules['tensorflow'] = sys.modules['keras'] = None\n"
        "import t2t_repro.training.peak_flops\n"
        "spec = importlib.util.spec_from_file_location('flops', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(module.PARTS[0])\n"
    )
    result = subprocess.run([sys.executable, "-c", code, flops.__file__], capture_output=True,
                            text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "encoder_attention"
