"""Where P_drop applies (paper §5.4): on the sum of embeddings and positions in both stacks, and
on each sublayer's output before the residual add (post-norm: LayerNorm(x + Dropout(Sub(x))),
pre-norm: x + Dropout(Sub(LayerNorm(x)))).

Every Dropout layer is replaced by one that applies a known random mask at exactly one of the
seven sites (a one-layer encoder and decoder) and passes everything else through; the model's
training-mode logits must equal a NumPy forward pass, written from the paper, that applies
the same mask at that site. Removing a site, adding one or moving one (after the residual add,
on the embedding before the positions) changes which tensor the mask meets, so the outputs
differ.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer

VOCAB = 13
RATE = 0.5
INPUTS = np.array([[5, 7, 9, 3, 0, 0], [4, 2, 8, 11, 12, 6]], dtype="int32")
TARGETS = np.array([[6, 3, 8, 1, 0], [9, 9, 2, 4, 1]], dtype="int32")
# The order in which a forward pass meets them: the encoder runs before the decoder.
SITES = (
    "encoder embedding + positions",
    "encoder self-attention output",
    "encoder feed-forward output",
    "decoder embedding + positions",
    "decoder self-attention output",
    "decoder encoder-decoder attention output",
    "decoder feed-forward output",
)


class OneSiteDropout:
    """A replacement for `keras.layers.Dropout.call`: the `site`-th call that would drop
    (training, rate > 0) multiplies by a fixed keep-mask / (1 - rate); the others return their
    input. Records how many such calls there were and the mask."""

    def __init__(self, site):
        self.site = site
        self.calls = 0
        self.mask = None
        self.rng = np.random.default_rng(site)

    def install(self, monkeypatch):
        def call(layer, inputs, training=None):
            if not training or layer.rate == 0:
                return inputs
            self.calls += 1
            if self.calls - 1 != self.site:
                return inputs
            keep = self.rng.random(tuple(inputs.shape)) >= layer.rate
            self.mask = keep.astype("float32") / (1.0 - layer.rate)
            return inputs * ops.convert_to_tensor(self.mask, inputs.dtype)

        monkeypatch.setattr(keras.layers.Dropout, "call", call)


def _np(x):
    return ops.convert_to_numpy(x).astype("float64")


def _positions(length, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    pos = np.arange(length)[:, None]
    angles = pos / 10000 ** (2 * np.arange(d // 2)[None, :] / d)
    table = np.zeros((length, d))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


def _layer_norm(x, norm, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * _np(norm.gamma) + _np(norm.beta)


def _attention(layer, query, memory, mask):
    """Concat(softmax(QKᵀ/√d_k)V per head) W^O, with illegal connections at -1e9."""
    h, d_k, d_v = layer.num_heads, layer.key_dim, layer.value_dim

    def heads(x, kernel, depth):
        projected = x @ _np(kernel)
        return projected.reshape(*x.shape[:2], h, depth).transpose(0, 2, 1, 3)

    q = heads(query, layer.query_dense.kernel, d_k)
    k = heads(memory, layer.key_dense.kernel, d_k)
    v = heads(memory, layer.value_dense.kernel, d_v)
    logits = np.where(mask, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d_k), -1e9)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    heads_out = (weights @ v).transpose(0, 2, 1, 3).reshape(*query.shape[:2], h * d_v)
    return heads_out @ _np(layer.output_dense.kernel)


def _feed_forward(layer, x):
    """max(0, xW1 + b1)W2 + b2."""
    inner = np.maximum(0.0, x @ _np(layer.inner_dense.kernel) + _np(layer.inner_dense.bias))
    return inner @ _np(layer.output_dense.kernel) + _np(layer.output_dense.bias)


def _reference_logits(model, drop):
    """The paper's forward pass in NumPy with `drop(site, x)` at each dropout site."""
    hp = model.hparams
    d, epsilon = hp.hidden_size, hp.layer_norm_epsilon
    matrix = _np(model.target_embedding.embeddings)

    def norm(x, layer_norm):
        return _layer_norm(x, layer_norm, epsilon)

    def residual(x, sublayer, layer_norm, site):
        if hp.normalize_first:
            return x + drop(site, sublayer(norm(x, layer_norm)))
        return norm(x + drop(site, sublayer(x)), layer_norm)

    def embed(ids, site):
        return drop(site, matrix[ids] * math.sqrt(d) + _positions(ids.shape[1], d))

    source_keys = (INPUTS != 0)[:, None, None, :]
    (encoder,) = model.encoder_layers
    x = embed(INPUTS, 0)
    x = residual(x, lambda h: _attention(encoder.self_attention, h, h, source_keys),
                 encoder.self_attention_norm, 1)
    x = residual(x, lambda h: _feed_forward(encoder.feed_forward, h),
                 encoder.feed_forward_norm, 2)
    memory = norm(x, model.encoder_final_norm) if hp.normalize_first else x

    decoder_inputs = np.concatenate([np.zeros_like(TARGETS[:, :1]), TARGETS[:, :-1]], axis=1)
    causal = np.tril(np.ones((TARGETS.shape[1],) * 2, bool))[None, None]
    (decoder,) = model.decoder_layers
    y = embed(decoder_inputs, 3)
    y = residual(y, lambda h: _attention(decoder.self_attention, h, h, causal),
                 decoder.self_attention_norm, 4)
    y = residual(y, lambda h: _attention(decoder.cross_attention, h, memory, source_keys),
                 decoder.cross_attention_norm, 5)
    y = residual(y, lambda h: _feed_forward(decoder.feed_forward, h),
                 decoder.feed_forward_norm, 6)
    if hp.normalize_first:
        y = norm(y, model.decoder_final_norm)
    return y @ matrix.T


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("site", range(len(SITES)), ids=SITES)
def test_dropout_masks_exactly_this_site(site, normalize_first, monkeypatch):
    dropout = OneSiteDropout(site)
    dropout.install(monkeypatch)
    hparams = create_hparams(
        "transformer_tiny",
        f"hidden_size=8,filter_size=16,num_heads=2,num_hidden_layers=1,"
        f"layer_prepostprocess_dropout={RATE},attention_dropout=0.0,relu_dropout=0.0,"
        f"normalize_first={normalize_first}",
    )
    keras.utils.set_random_seed(site)
    model = Transformer(hparams, VOCAB, VOCAB).build_weights()
    logits = _np(model({"inputs": INPUTS, "targets": TARGETS}, training=True))
    assert dropout.calls == len(SITES), "one dropout per site, no more, no fewer"
    assert 0 < (dropout.mask == 0).mean() < 1  # the mask drops some entries, not all

    def drop(index, x):
        return x * dropout.mask if index == site else x

    np.testing.assert_allclose(logits, _reference_logits(model, drop), atol=1e-4)
    # Not vacuous: the same pass without the mask differs.
    assert not np.allclose(logits, _reference_logits(model, lambda index, x: x), atol=1e-3)
