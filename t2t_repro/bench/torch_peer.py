"""The peer of `bench train`: PyTorch's `nn.Transformer` set up as this project's Transformer
with the same hparams, one training step at a time.

Same sizes, post-norm (or pre-norm with `normalize_first`), one embedding matrix for source,
target and the pre-softmax projection scaled by √d_model, the paper's sinusoids, label-smoothed
cross-entropy over non-padding targets and Adam with the hparams' betas and epsilon. The
differences are PyTorch's own layers': its attention projections have biases (tensor2tensor's
have none), `nn.Transformer` ends each stack with a LayerNorm even when post-norm, and its one
dropout rate (the residual one) also drops attention weights and the feed-forward's inner
activations, where transformer_base's rates are 0. Each adds a little work, well under 1%.
"""

import math
import os

import numpy as np
import torch

from t2t_repro.models.flops import layer_counts


class TiedTransformer(torch.nn.Module):
    """`nn.Transformer` between one shared embedding and its transpose."""

    def __init__(self, hparams, vocab_size, max_positions=1024):
        super().__init__()
        self.hidden_size = hparams.hidden_size
        self.embedding = torch.nn.Embedding(vocab_size, hparams.hidden_size, padding_idx=0)
        torch.nn.init.normal_(self.embedding.weight, std=hparams.hidden_size ** -0.5)
        self.transformer = torch.nn.Transformer(
            d_model=hparams.hidden_size, nhead=hparams.num_heads,
            num_encoder_layers=hparams.num_encoder_layers or hparams.num_hidden_layers,
            num_decoder_layers=hparams.num_decoder_layers or hparams.num_hidden_layers,
            dim_feedforward=hparams.filter_size, dropout=hparams.layer_prepostprocess_dropout,
            layer_norm_eps=hparams.layer_norm_epsilon, batch_first=True,
            norm_first=bool(hparams.normalize_first))
        self.register_buffer("positions", sinusoids(max_positions, hparams.hidden_size))

    def _embed(self, ids):
        return self.embedding(ids) * math.sqrt(self.hidden_size) + self.positions[: ids.shape[1]]

    def forward(self, inputs, decoder_inputs):
        source_padding = inputs == 0
        causal = torch.nn.Transformer.generate_square_subsequent_mask(decoder_inputs.shape[1])
        hidden = self.transformer(
            self._embed(inputs), self._embed(decoder_inputs), tgt_mask=causal,
            tgt_is_causal=True, src_key_padding_mask=source_padding,
            memory_key_padding_mask=source_padding)
        return hidden @ self.embedding.weight.t()


def sinusoids(length, hidden_size):
    """The paper's position encoding (§3.5), [length, hidden_size] float32, sines at even
    channels and cosines at odd, in PyTorch: the peer's process runs no Keras operation, which
    under the JAX backend would start JAX's GPU client and take most of the GPU's memory."""
    positions = torch.arange(length, dtype=torch.float32)[:, None]
    channels = torch.arange(0, hidden_size, 2, dtype=torch.float32)
    angles = positions * torch.pow(10000.0, -channels / hidden_size)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(length, hidden_size)


def training_step(hparams, vocab_size, inputs, targets, compile_model=False, device="cpu",
                  bfloat16=False):
    """`(step, parameter count)`: `step()` runs one training step of a new TiedTransformer on
    the batch (int arrays [batch, s] and [batch, t], 0-padded) on `device` (float32 matmuls
    in TF32 where the GPU has it); on the CPU on
    every core, as TensorFlow runs (PyTorch's default is the physical cores only). With
    `bfloat16` the forward pass runs under bfloat16 autocast (weights and Adam stay float32,
    as Keras's mixed_bfloat16)."""
    if device == "cpu":
        torch.set_num_threads(os.cpu_count())
    else:  # float32 matmuls on TF32 tensor cores, as XLA and TensorFlow run them on GPUs
        torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    model = TiedTransformer(hparams, vocab_size).to(device)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1e-4, eps=hparams.optimizer_adam_epsilon,
        betas=(hparams.optimizer_adam_beta1, hparams.optimizer_adam_beta2))
    forward = torch.compile(model) if compile_model else model
    inputs = torch.as_tensor(np.asarray(inputs), dtype=torch.long, device=device)
    targets = torch.as_tensor(np.asarray(targets), dtype=torch.long, device=device)
    decoder_inputs = torch.nn.functional.pad(targets, (1, 0))[:, :-1]
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=bfloat16)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logits = forward(inputs, decoder_inputs)
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, vocab_size), targets.reshape(-1), ignore_index=0,
            label_smoothing=hparams.label_smoothing)
        loss.backward()
        optimizer.step()
        return float(loss.detach())  # waits for the device

    return step, sum(parameter.numel() for parameter in model.parameters())


def parameters_beyond_ours(hparams):
    """How many more parameters `TiedTransformer` has than this project's Transformer: the
    biases of its attention's four projections, and the LayerNorm ending each stack."""
    encoder_layers, decoder_layers = layer_counts(hparams)
    attention_layers = encoder_layers + 2 * decoder_layers
    return 4 * hparams.hidden_size * attention_layers + 2 * 2 * hparams.hidden_size
