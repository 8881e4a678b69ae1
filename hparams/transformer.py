"""Hparams sets of the Transformer: the paper's base and big, every row of Table 3, parsing.

Each set is a small function deriving from its parent with a few overrides (the
tensor2tensor convention). The paper-exact sets carry the plain names; variants get their own.
`batch_size` is in tokens and global across replicas, counting padding (longest sequence ×
sentences), as tensor2tensor counts it.
"""

from t2t_repro.hparams import HParams
from t2t_repro.registry import hparams_sets


def paper_model(make_hparams):
    """Marks a set as one of the paper's models: the trainer checkpoints it every
    --save_checkpoints_minutes alone unless --save_checkpoints_steps is given (§6.1 averages
    checkpoints "written at 10-minute intervals")."""
    make_hparams.checkpoints_by_time = True
    return make_hparams


@hparams_sets.register
@paper_model
def transformer_base():
    """Paper §3 and §5: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, ε_ls=0.1, 100K steps."""
    return HParams(
        # Architecture.
        hidden_size=512,
        filter_size=2048,
        num_heads=8,
        num_hidden_layers=6,
        num_encoder_layers=0,  # 0: use num_hidden_layers
        num_decoder_layers=0,
        attention_key_channels=0,  # h·d_k; 0: hidden_size
        attention_value_channels=0,  # h·d_v; 0: hidden_size
        position_encoding="sinusoidal",
        normalize_first=False,  # the paper is post-norm
        layer_norm_epsilon=1e-6,
        shared_source_target_embedding=True,
        shared_embedding_and_softmax_weights=True,
        # Restricted self-attention (Table 1, row 4): attend to positions fewer than this many
        # away (the decoder: to the last this many); 0, the paper's models: to all.
        self_attention_window=0,
        # What imported models need (docs/importing.md); each default is the paper's choice.
        ffn_activation="relu",  # or swish, gelu, gelu_sigmoid (Marian's "gelu": x·σ(1.702x))
        attention_bias=False,  # biases on the four attention projections (Marian's)
        sinusoid_layout="interleaved",  # or halves: tensor2tensor's and Marian's timing signal
        logits_bias=False,  # a bias on the output logits (Marian's decoder_ff_logit_out_b)
        zero_pad_embedding=False,  # id 0 (padding, decoder start) embeds as zeros (Marian, t2t)
        encoder_input_bias=False,  # a trained vector added to every source position (t2t's
        # target_space_embedding row)
        # Attention through keras.ops.dot_product_attention where no weights are needed (cuDNN
        # flash attention on NVIDIA GPUs under JAX in 16 bits): the same model, computed fused.
        fused_attention=False,
        # Regularisation.
        layer_prepostprocess_dropout=0.1,  # P_drop: residual and embedding dropout
        attention_dropout=0.0,
        relu_dropout=0.0,
        label_smoothing=0.1,
        # Optimisation: lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5).
        learning_rate_schedule="constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size",
        learning_rate_constant=1.0,
        learning_rate_warmup_steps=4000,
        optimizer_adam_beta1=0.9,
        optimizer_adam_beta2=0.98,
        optimizer_adam_epsilon=1e-9,
        clip_grad_norm=0.0,  # 0: no clipping (the paper clips nothing)
        # Target positions whose logits the training loss computes at a time: the same loss
        # and gradient, without the [tokens, vocabulary] logits in memory whole
        # (training/chunked_loss.py).
        loss_chunk_tokens=1024,
        dtype_policy="float32",  # or mixed_bfloat16 / mixed_float16 (training only)
        # Data and schedule.
        batch_size=25000,  # tokens per micro-batch, all replicas together (paper §5.1)
        # Micro-batches per optimizer update: the update's batch is batch_size × this many
        # tokens (tensor2tensor's optimizer_multistep_accumulate_steps).
        gradient_accumulation_steps=1,
        max_length=256,  # longer examples are dropped from training
        # Training batches of rows of max_length positions, each holding several pairs end to
        # end (tensor2tensor's _packed problems; data/pair_packing.py): less padding.
        packed=False,
        train_steps=100000,
    )


@hparams_sets.register
@paper_model
def transformer_big():
    """Paper Table 3 'big': d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300K steps."""
    hparams = transformer_base()
    hparams.hidden_size = 1024
    hparams.filter_size = 4096
    hparams.num_heads = 16
    hparams.layer_prepostprocess_dropout = 0.3
    hparams.train_steps = 300000
    return hparams


@hparams_sets.register
@paper_model
def transformer_big_enfr():
    """Paper §6.1: the big EN-FR model used P_drop = 0.1 instead of 0.3."""
    hparams = transformer_big()
    hparams.layer_prepostprocess_dropout = 0.1
    return hparams


@hparams_sets.register
def transformer_base_prenorm():
    """Not the paper: LayerNorm before each sublayer (and after each stack), which trains more
    stably at depth and with larger learning rates."""
    hparams = transformer_base()
    hparams.normalize_first = True
    return hparams


@hparams_sets.register
@paper_model
def transformer_parsing():
    """Paper §6.3: 4 layers, d_model=1024 for WSJ constituency parsing; "all other parameters
    remained unchanged from the English-to-German base translation model": d_ff=2048, h=8
    (d_k=d_v=128), P_drop=0.1."""
    hparams = transformer_base()
    hparams.hidden_size = 1024
    hparams.num_hidden_layers = 4
    return hparams


@hparams_sets.register
@paper_model
def transformer_parsing_from_big():
    """Not the paper's reading: the parsing model with big's other values (d_ff=4096, h=16,
    300K steps) and P_drop=0.1."""
    hparams = transformer_big()
    hparams.num_hidden_layers = 4
    hparams.layer_prepostprocess_dropout = 0.1
    return hparams


@hparams_sets.register
def transformer_small():
    """Not the paper: a CPU-sized model for real but small corpora (e.g. Multi30k)."""
    hparams = transformer_base()
    hparams.hidden_size = 256
    hparams.filter_size = 1024
    hparams.num_heads = 4
    hparams.num_hidden_layers = 3
    hparams.batch_size = 4096
    hparams.learning_rate_constant = 2.0
    hparams.train_steps = 20000
    return hparams


@hparams_sets.register
def transformer_tiny():
    """Not the paper: the smallest useful model, for tests and the algorithmic demo."""
    hparams = transformer_base()
    hparams.hidden_size = 64
    hparams.filter_size = 256
    hparams.num_heads = 4
    hparams.num_hidden_layers = 2
    hparams.batch_size = 2048
    hparams.max_length = 64
    hparams.learning_rate_constant = 2.0
    hparams.learning_rate_warmup_steps = 400
    hparams.train_steps = 2000
    return hparams


# Table 3 (newstest2013, EN-DE): one set per row, each the base model with the row's changes.
# `attention_key_channels` and `attention_value_channels` are h·d_k and h·d_v.


def _table3_variant(**overrides):
    hparams = transformer_base()
    for key, value in overrides.items():
        hparams.set_hparam(key, value)
    return hparams


def _register_table3_rows(rows):
    for name, overrides in rows.items():
        hparams_sets.register(name)(
            paper_model(lambda overrides=overrides: _table3_variant(**overrides)))


TABLE3_ROWS = {
    # (A) number of heads at constant computation: h · d_k = 512.
    "transformer_table3_a_h1": dict(num_heads=1),
    "transformer_table3_a_h4": dict(num_heads=4),
    "transformer_table3_a_h16": dict(num_heads=16),
    "transformer_table3_a_h32": dict(num_heads=32),
    # (B) smaller attention keys, d_v stays 64.
    "transformer_table3_b_dk16": dict(attention_key_channels=8 * 16),
    "transformer_table3_b_dk32": dict(attention_key_channels=8 * 32),
    # (C) model size.
    "transformer_table3_c_n2": dict(num_hidden_layers=2),
    "transformer_table3_c_n4": dict(num_hidden_layers=4),
    "transformer_table3_c_n8": dict(num_hidden_layers=8),
    "transformer_table3_c_d256": dict(hidden_size=256),  # d_k = d_v = 32
    "transformer_table3_c_d1024": dict(hidden_size=1024),  # d_k = d_v = 128
    "transformer_table3_c_ff1024": dict(filter_size=1024),
    "transformer_table3_c_ff4096": dict(filter_size=4096),
    # (D) regularisation.
    "transformer_table3_d_drop0": dict(layer_prepostprocess_dropout=0.0),
    "transformer_table3_d_drop02": dict(layer_prepostprocess_dropout=0.2),
    "transformer_table3_d_ls0": dict(label_smoothing=0.0),
    "transformer_table3_d_ls02": dict(label_smoothing=0.2),
    # (E) learned positional embedding instead of sinusoids.
    "transformer_table3_e_learned_pos": dict(position_encoding="learned"),
}

_register_table3_rows(TABLE3_ROWS)
