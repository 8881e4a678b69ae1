"""FLOPs of the Transformer's matmuls, counted from its sizes (2 FLOPs per multiply-add).

A sentence pair of s source and t target tokens costs, in the forward pass,
    per_source_token·s + per_target_token·t + source_pairs·s² + target_pairs·t²
    + cross_pairs·s·t
FLOPs. Per layer (d = d_model, h·d_k and h·d_v the attention's key and value widths, d_ff the
FFN's inner size, V the target vocabulary):
- encoder self-attention: Q, K, V, O projections 2s·d·(2h·d_k + h·d_v) + 2s·h·d_v·d; QKᵀ
  2s²·h·d_k; weights·V 2s²·h·d_v.
- decoder masked self-attention: the same with t. The full t × t square is counted, as the
  model computes it: the causal mask only zeroes weights, it saves no work.
- encoder-decoder attention: Q and O projections over the t target positions, K and V
  projections of the encoder's output over the s source positions (once per layer and
  sentence), QKᵀ and weights·V over the t × s pairs.
- FFN: 2·2·d·d_ff per position.
and once per target token the pre-softmax projection to the vocabulary, 2·d·V (whether or not
its matrix is shared with the embeddings).

Not counted, since they are not matmuls: embedding lookups (gathers) and their √d_model
scaling, positional encodings, the attention's 1/√d_k scaling, masks and softmaxes, layer
norms, dropout, residual adds, biases and ReLUs, the loss. Each costs a few FLOPs per element
against 2·d (or more) for a matmul's output element: well under 1% of the total at the paper's
sizes. The source vocabulary does not enter any matmul, so it is not an argument.

Training costs 3× the forward pass: for every forward matmul Y = A·B the backward pass computes
one matmul of the same size for the gradient of A and one for B (weights and activations alike;
the first layer's inputs need theirs, since the embeddings are trained).

Counted from real (non-padding) lengths this is "model FLOPs", what model FLOPs utilisation
divides by the device's peak: the work padding adds is not counted. Pure arithmetic on
hparams, importable under any backend.
"""

import dataclasses

# The parts of `forward_flops_by_part`, in the model's order.
PARTS = ("encoder_attention", "encoder_ffn", "decoder_self_attention",
         "decoder_encoder_attention", "decoder_ffn", "logits")


@dataclasses.dataclass(frozen=True)
class FlopsCoefficients:
    """FLOPs of (a part of) the model as coefficients of the length terms of a sentence pair:
    s, t, s², t² and s·t."""

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
        _check_lengths([source_length], [target_length])
        s, t = source_length, target_length
        return self.of_sums(s, t, s * s, t * t, s * t)

    def of_sums(self, source_tokens, target_tokens, source_squares, target_squares,
                source_target_products):
        """FLOPs of a batch, from its sums over pairs of s, t, s², t² and s·t (every term is
        linear in one of them, so the batch's FLOPs are the sum of its pairs')."""
        return (self.per_source_token * source_tokens + self.per_target_token * target_tokens
                + self.source_pairs * source_squares + self.target_pairs * target_squares
                + self.cross_pairs * source_target_products)

    def of_batch(self, source_lengths, target_lengths):
        """FLOPs of a batch of pairs, from their real (non-padding) lengths, two sequences of
        ints of one length (lists, NumPy arrays); a filler row of lengths 0 costs nothing."""
        sources = [int(s) for s in source_lengths]
        targets = [int(t) for t in target_lengths]
        _check_lengths(sources, targets)
        return self.of_sums(sum(sources), sum(targets), sum(s * s for s in sources),
                            sum(t * t for t in targets),
                            sum(s * t for s, t in zip(sources, targets)))


def _check_lengths(source_lengths, target_lengths):
    if len(source_lengths) != len(target_lengths):
        raise ValueError(
            f"Got {len(source_lengths)} source lengths but {len(target_lengths)} target "
            f"lengths: pass one (source, target) length per sentence pair.")
    for length in (*source_lengths, *target_lengths):
        if length < 0:
            raise ValueError(f"Sequence lengths must be >= 0 (real tokens), got {length}.")


def layer_counts(hparams):
    """(encoder layers, decoder layers), as the model builds them: `num_encoder_layers` and
    `num_decoder_layers`, 0 standing for `num_hidden_layers`."""
    return (hparams.num_encoder_layers or hparams.num_hidden_layers,
            hparams.num_decoder_layers or hparams.num_hidden_layers)


def attention_widths(hparams):
    """(h·d_k, h·d_v) as the model sizes its heads: `attention_key_channels` and
    `attention_value_channels` (0: hidden_size) split into `num_heads` heads, rounded down."""
    widths = []
    for name in ("attention_key_channels", "attention_value_channels"):
        channels = getattr(hparams, name) or hparams.hidden_size
        per_head = channels // hparams.num_heads
        if per_head < 1:
            raise ValueError(
                f"hparam {name}={channels} gives heads of size 0 with num_heads="
                f"{hparams.num_heads}: use at least num_heads channels.")
        widths.append(hparams.num_heads * per_head)
    return tuple(widths)


def forward_flops_by_part(hparams, target_vocab_size):
    """`{part: FlopsCoefficients}` of the forward pass, parts as in `PARTS`, each summed over
    its stack's layers (every layer of a stack costs the same: divide by `layer_counts` for
    one layer)."""
    if target_vocab_size < 1:
        raise ValueError(f"target_vocab_size must be >= 1, got {target_vocab_size}.")
    d = hparams.hidden_size
    keys, values = attention_widths(hparams)  # h·d_k, h·d_v
    encoder_layers, decoder_layers = layer_counts(hparams)
    query_and_output = 2 * d * keys + 2 * values * d  # per position attending
    key_and_value = 2 * d * (keys + values)  # per position attended to
    scores_and_sums = 2 * keys + 2 * values  # QKᵀ and weights·V, per pair of positions
    feed_forward = 2 * 2 * d * hparams.filter_size
    return {
        "encoder_attention": FlopsCoefficients(
            per_source_token=query_and_output + key_and_value,
            source_pairs=scores_and_sums) * encoder_layers,
        "encoder_ffn": FlopsCoefficients(per_source_token=feed_forward) * encoder_layers,
        "decoder_self_attention": FlopsCoefficients(
            per_target_token=query_and_output + key_and_value,
            target_pairs=scores_and_sums) * decoder_layers,
        "decoder_encoder_attention": FlopsCoefficients(
            per_target_token=query_and_output, per_source_token=key_and_value,
            cross_pairs=scores_and_sums) * decoder_layers,
        "decoder_ffn": FlopsCoefficients(per_target_token=feed_forward) * decoder_layers,
        "logits": FlopsCoefficients(per_target_token=2 * d * target_vocab_size),
    }


def forward_flops(hparams, target_vocab_size):
    """FlopsCoefficients of the whole forward pass: `.of_lengths(s, t)` for one pair,
    `.of_batch(source_lengths, target_lengths)` for a batch."""
    return sum(forward_flops_by_part(hparams, target_vocab_size).values(), FlopsCoefficients())


def training_flops(hparams, target_vocab_size):
    """FlopsCoefficients of one training step's forward and backward passes (3× forward)."""
    return forward_flops(hparams, target_vocab_size) * 3


def flops_by_part(hparams, target_vocab_size, source_length, target_length, training=False):
    """`{part: FLOPs, ..., "total": FLOPs}` of one pair of `source_length` and
    `target_length` tokens: the forward pass, or with `training` forward and backward."""
    factor = 3 if training else 1
    parts = {name: coefficients.of_lengths(source_length, target_length) * factor
             for name, coefficients in forward_flops_by_part(hparams, target_vocab_size).items()}
    parts["total"] = sum(parts.values())
    return parts
