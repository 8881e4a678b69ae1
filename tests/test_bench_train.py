"""`bench train`'s batch: the pairs sorted by length, cut at a padded-token budget, and the
batch holding the median pair, worked by hand; the JAX variant's decoding row; every
benchmarked step taking its arguments from the hparams; the JAX variant's peer not starting
JAX (with a stand-in step, and the real one where PyTorch is installed) and computing the
paper's sinusoids."""

import importlib

import numpy as np
import pytest

from t2t_repro.bench.train import median_batch


def test_the_median_pairs_batch_is_cut_at_the_padded_target_budget():
    # Target lengths 1..7 (sources 10 longer). A budget of 8 padded target tokens cuts the
    # sorted pairs into [1, 2] (adding 3 would pad to 3 x 3 = 9), [3, 4] (2 x 4 = 8), [5]
    # (adding 6: 2 x 6 = 12), [6], [7]. The median pair, length 4, is in [3, 4].
    targets = [list(range(2, 2 + n)) for n in (5, 1, 7, 3, 2, 6, 4)]
    sources = [[9] * (len(t) + 10) for t in targets]
    inputs, batch_targets = median_batch(sources, targets, batch_tokens=8)
    np.testing.assert_array_equal(batch_targets, [[2, 3, 4, 0], [2, 3, 4, 5]])
    np.testing.assert_array_equal(inputs, [[9] * 13 + [0], [9] * 14])


def test_a_budget_smaller_than_one_pair_still_gives_that_pair():
    inputs, targets = median_batch([[5, 1]], [[6, 7, 1]], batch_tokens=1)
    np.testing.assert_array_equal(targets, [[6, 7, 1]])
    np.testing.assert_array_equal(inputs, [[5, 1]])


def test_the_jax_benchs_decode_row_counts_forced_tokens_and_has_its_peak_memory():
    """`bench train --backend=jax --decode_sentences`'s row, on transformer_tiny (the search
    is the same under every backend): sentences of 2, 3 and 5 ids form one batch, each forced
    to round(1.1 x 5) = 6 output tokens, 18 in all; the row has the rate and the process's peak
    memory in the table's columns."""
    from t2t_repro.bench.decode import ALPHA, BEAM_SIZE, forced_batches, timed_decode
    from t2t_repro.bench.report import format_table
    from t2t_repro.bench.train_jax import _decode_row
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch
    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer

    encoded = [[4, 5], [6, 7, 8], [9, 4, 5, 6, 7]]
    model = Transformer(create_hparams("transformer_tiny"), 12, 12).build_weights()
    search = TransformerBeamSearch(model, BEAM_SIZE, ALPHA, force_max_length=True)
    timed = timed_decode(search, forced_batches(encoded))
    assert timed.tokens == 18 and [len(ids) for ids in timed.outputs] == [6, 6, 6]

    what, rate, unit, _, _, peak, _ = _decode_row(3, 12, encoded, "transformer_tiny")
    assert unit == "tok/s" and rate > 0 and peak > 2**20
    assert "transformer_tiny float32: beam-search decoding, 3 newstest2014 sentences" == what
    table = format_table([(what, rate, unit, "", None, peak, None)], "decode")
    assert f"{peak / 2**30:.2f} GiB" in table


class _Constructed(Exception):
    """Raised by a stand-in train step with the keyword arguments it was built with."""


def _record_construction(*args, **kwargs):
    raise _Constructed(kwargs)


def _tiny_pairs():
    return [([4, 5, 6], [7, 8]), ([9, 10], [11, 4, 5])]


def _bench_train_step(hparams):
    from t2t_repro.bench.train import our_training_step

    our_training_step(hparams, 12, np.array([[4, 5, 6]]), np.array([[7, 8, 9]]),
                      jit_compile=False)


def _bench_train_jax_step(hparams):
    from t2t_repro.bench.train_jax import our_jax_step

    our_jax_step(hparams, 12, np.array([[4, 5, 6]]), np.array([[7, 8, 9]]))


def _bench_packing_step(backend):
    def build(hparams):
        from t2t_repro.bench.packing import training_rate

        overrides = ",".join(f"{name}={getattr(hparams, name)}" for name in (
            "loss_chunk_tokens", "label_smoothing", "clip_grad_norm",
            "gradient_accumulation_steps"))
        training_rate(backend, _tiny_pairs(), "packed", 256, steps=1, warmup=0,
                      overrides=overrides)
    return build


@pytest.mark.parametrize("build, step_class", [
    (_bench_train_step, "t2t_repro.training.tensorflow.train_step.TensorFlowTrainStep"),
    (_bench_train_jax_step, "t2t_repro.training.jax.train_step.JaxTrainStep"),
    (_bench_packing_step("tensorflow"),
     "t2t_repro.training.tensorflow.train_step.TensorFlowTrainStep"),
    (_bench_packing_step("jax"), "t2t_repro.training.jax.train_step.JaxTrainStep"),
], ids=["train", "train_jax", "packing_tensorflow", "packing_jax"])
def test_each_benchmarked_step_takes_its_arguments_from_the_hparams(build, step_class,
                                                                    monkeypatch):
    """`--variants` and `--hparams` reach the step the benchmark times (the loss's chunks,
    smoothing and clipping), whose step is one batch whatever gradient_accumulation_steps says
    (its rate counts one batch's tokens)."""
    from t2t_repro.hparams import create_hparams

    module, name = step_class.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, _record_construction)
    with pytest.raises(_Constructed) as constructed:
        build(create_hparams("transformer_tiny", "loss_chunk_tokens=7,label_smoothing=0.2,"
                             "clip_grad_norm=3.0,gradient_accumulation_steps=4"))
    arguments = constructed.value.args[0]
    assert arguments["loss_chunk_tokens"] == 7 and arguments["accumulation_steps"] == 1
    assert arguments["smoothing"] == 0.2 and arguments["clip_norm"] == 3.0


def test_the_jax_benchs_peer_runs_on_the_given_device_without_starting_jax(monkeypatch):
    """On a GPU, JAX's client takes most of the GPU's memory once started: the peer's process
    must not start it, and takes its PyTorch device from our process instead."""
    import jax._src.xla_bridge

    from t2t_repro.bench import train_jax
    from t2t_repro.hparams import create_hparams

    def no_jax(*args, **kwargs):
        raise AssertionError("the peer's process started JAX")

    devices = []

    def peer_step(name, hparams, vocab_size, inputs, targets, device):
        devices.append(device)
        return lambda: None

    monkeypatch.setattr(jax._src.xla_bridge, "get_backend", no_jax)
    monkeypatch.setattr(jax._src.xla_bridge, "backends", no_jax)
    monkeypatch.setattr(train_jax, "_torch_peer_step", peer_step)
    seconds, device = train_jax.measure_contender(
        "PyTorch torch.compile", create_hparams("transformer_tiny"), 12, np.ones((1, 3)),
        np.ones((1, 3)), 0, 3, None, "cuda")
    assert devices == ["cuda"] and device is None and seconds >= 0


def test_our_device_names_the_pytorch_device_of_the_same_hardware():
    import jax

    from t2t_repro.bench.train_jax import our_device

    device = our_device("float32", peak_tflops=5.0)
    assert device.name == jax.devices()[0].device_kind and device.peak_tflops == 5.0
    assert device.torch_device == ("cuda" if jax.devices()[0].platform == "gpu" else "cpu")


_REAL_PEER_STEP = """
import os, sys
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np
import jax._src.xla_bridge
from t2t_repro.bench import train_jax
from t2t_repro.hparams import create_hparams
ids = np.array([[3, 4, 5], [6, 7, 0]])
train_jax.measure_contender("PyTorch eager", create_hparams("transformer_tiny"), 12, ids, ids,
                            0, 1, None, "cpu")
sys.exit(3 if jax._src.xla_bridge.backends_are_initialized() else 0)
"""


def test_the_real_peer_step_never_starts_jax():
    """The whole peer (model, positions, step), not a stand-in: in a fresh process under the
    JAX backend, one peer step leaves JAX's backends uninitialised (exit 3 if it started them,
    as a Keras operation would)."""
    import subprocess
    import sys

    from conftest import HANG_GUARD_S

    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", _REAL_PEER_STEP], capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, f"exit {done.returncode} (3: JAX started) {done.stderr[-2000:]}"


def test_the_peers_positions_are_the_papers_sinusoids():
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (§3.5),
    written out in NumPy."""
    pytest.importorskip("torch")
    from t2t_repro.bench.torch_peer import sinusoids

    length, depth = 50, 8
    angles = np.arange(length)[:, None] / 10000.0 ** (np.arange(0, depth, 2) / depth)
    expected = np.empty((length, depth))
    expected[:, 0::2], expected[:, 1::2] = np.sin(angles), np.cos(angles)
    np.testing.assert_allclose(sinusoids(length, depth).numpy(), expected, atol=1e-5)


def test_the_jax_benchs_title_promises_mfu_only_where_a_row_has_it():
    """On a CPU no peak is known (its MFU rows are left out), unless --peak_tflops gives one."""
    from t2t_repro.bench.train_jax import mfu_clause

    assert mfu_clause("cpu", {None}) == "no MFU: cpu's peak is unknown (give --peak_tflops)"
    assert mfu_clause("NVIDIA H200", {989.0, None}) == (
        "MFU against NVIDIA H200's dense peak at the dtype")
