"""FLOPs of the Transformer's matmuls, counted from its sizes (2 FLOPs per multiply-add).

A sentence pair of s source and t target tokens costs, in the forward pass,
    per_source_token·s + per_target_token·t + source_pairs·s² + target_pairs·t²
    + cross_pairs·s·t
FLOPs: projections and feed-forward layers grow with the tokens, attention scores and their
weighted sums with the pairs of positions. The decoder's masked self-attention is counted over
the full t × t square, as the model computes it (the mask only zeroes weights). Embedding
lookups, positional encodings, softmaxes, layer norms, dropout and residual adds are not matmuls
and are left out (a few percent of the total at the paper's sizes). Training costs 3× the
forward pass: the backward pass computes, for each forward matmul, one matmul for the gradient
of its input and one for the gradient of its weight.

Counted from real (non-padding) lengths this is "model FLOPs": what model FLOPs utilisation
divides by the device's peak. Pure arithmetic on hparams, importable under any backend.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class FlopsCoefficients:
    """Forward FLOPs of one part of the model, as coefficients of the length terms."""

    per_source_token: float = 0.0
    per_target_token: float = 0.0
    source_pairs: float = 0.0
    target_pairs: float = 0.0
    cross_pairs: float = 0.0

    def __add__(self, other):
        return FlopsCoefficients(*(a + b for a, b in zip(dataclasses.astuple(self),
                                                         dataclasses.astuple(other))))

    def __mul__(self, factor):
        return FlopsCoefficients(*(a * factor for a in dataclasses.astuple(self)))

    def of_lengths(self, source_length, target_length):
        """FLOPs of one pair of `source_length` and `target_length` tokens."""
        s, t = source_length, target_length
        return (self.per_source_token * s + self.per_target_token * t + self.source_pairs * s * s
                + self.target_pairs * t * t + self.cross_pairs * s * t)

    def of_sums(self, source_tokens, target_tokens, source_squares, target_squares,
                source_target_products):
        """FLOPs of a batch, from its sums over pairs of s, t, s², t² and s·t."""
        return (self.per_source_token * source_tokens + self.per_target_token * target_tokens
                + self.source_pairs * source_squares + self.target_pairs * target_squares
                + self.cross_pairs * source_target_products)


def forward_flops_by_part(hparams, target_vocab_size):
    """`{part: FlopsCoefficients}` of the forward pass: encoder_attention, encoder_ffn,
    decoder_self_attention, decoder_encoder_attention, decoder_ffn, logits."""
    d = hparams.hidden_size
    keys = hparams.attention_key_channels or d  # h·d_k
    values = hparams.attention_value_channels or d  # h·d_v
    encoder_layers = hparams.num_encoder_layers or hparams.num_hidden_layers
    decoder_layers = hparams.num_decoder_layers or hparams.num_hidden_layers
    projections = 2 * d * (2 * keys + values) + 2 * values * d  # Q, K, V in; O out
    feed_forward = 2 * 2 * d * hparams.filter_size
    scores_and_sums = 2 * keys + 2 * values  # QKᵀ and weights·V, per pair of positions
    return {
        "encoder_attention": FlopsCoefficients(
            per_source_token=projections, source_pairs=scores_and_sums) * encoder_layers,
        "encoder_ffn": FlopsCoefficients(per_source_token=feed_forward) * encoder_layers,
        "decoder_self_attention": FlopsCoefficients(
            per_target_token=projections, target_pairs=scores_and_sums) * decoder_layers,
        "decoder_encoder_attention": FlopsCoefficients(
            per_target_token=2 * d * keys + 2 * values * d,  # Q in, O out
            per_source_token=2 * d * (keys + values),  # K, V of the encoder's output
            cross_pairs=scores_and_sums) * decoder_layers,
        "decoder_ffn": FlopsCoefficients(per_target_token=feed_forward) * decoder_layers,
        "logits": FlopsCoefficients(per_target_token=2 * d * target_vocab_size),
    }


def forward_flops(hparams, target_vocab_size):
    """FlopsCoefficients of the whole forward pass."""
    return sum(forward_flops_by_part(hparams, target_vocab_size).values(), FlopsCoefficients())


def training_flops(hparams, target_vocab_size):
    """FlopsCoefficients of one training step's forward and backward passes (3× forward)."""
    return forward_flops(hparams, target_vocab_size) * 3
