"""A trained Transformer as a CTranslate2 model, for fast CPU and GPU inference outside TensorFlow.

CTranslate2's `TransformerSpec` describes the same network as `Transformer`; the conversion
fills it with this model's weights and makes the few choices where the two could differ
explicit, so that CTranslate2 computes what this project computes:
  - positions: the model's own table (the paper's interleaved sinusoids, tensor2tensor's and
    Marian's halves, or the learned rows), not CTranslate2's built-in sinusoids (halves with
    the paper's spacing);
  - embeddings: scaled by √d_model, as here; the decoder starts from id 0 (the padding id,
    tensor2tensor's start symbol), from a zero vector with hparam `zero_pad_embedding`, and
    the output projection is the (tied) embedding matrix, plus `final_logits_bias` if any;
  - normalisation: post-norm as the paper, or pre-norm with a final LayerNorm per stack, with
    the model's LayerNorm epsilon;
  - attention projections without biases, as tensor2tensor, or with them (hparam
    `attention_bias`); feed-forward layers with biases and the model's activation.
Tokens are the problem's sentencepiece pieces (id i is the i-th piece), so a CTranslate2 user
tokenises with the sentencepiece model written beside the weights and appends `</s>`: one
`sentencepiece.model` for a shared vocabulary, else `source.spm.model` to tokenise the source
and `target.spm.model` to detokenise the output (the source and target vocabularies differ). A
problem without a sentencepiece vocabulary gets tokens named by id (`<0>`, `<1>`, ...).

The `ctranslate2` package is an optional dependency (`pip install -e ".[bench]"`).
"""

import json
import os
import shutil

import numpy as np

from t2t_repro.utils.atomic_files import atomic_path
from t2t_repro.layers.positional import sinusoidal_position_encoding
from t2t_repro.names import EOS_ID, PAD_ID
from t2t_repro.errors import UserError

SENTENCEPIECE_FILE = "sentencepiece.model"  # a shared vocabulary
SIDE_SENTENCEPIECE_FILES = {"source": "source.spm.model", "target": "target.spm.model"}
INFO_FILE = "t2t_repro_info.json"
# Rows of the sinusoid table for a sinusoidal model: CTranslate2 cannot decode past its table.
DEFAULT_SINUSOID_POSITIONS = 1024
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16")
# hparam ffn_activation -> the name of CTranslate2's `common_spec.Activation`.
ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU", "gelu_sigmoid": "GELUSigmoid"}


class CTranslate2ExportError(UserError, ValueError):
    """A model or request the conversion cannot honour; the message says what to change."""


def import_ctranslate2():
    """The `ctranslate2` module, or a CTranslate2ExportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise CTranslate2ExportError(
            "CTranslate2 is not installed; install the optional extra: pip install -e '.[bench]' "
            "(or pip install ctranslate2)."
        ) from None
    return ctranslate2


def vocabulary_tokens(problem, side):
    """One distinct token string per id of the `side` ("source" or "target"): its
    sentencepiece pieces, or `<id>` names."""
    vocabulary = getattr(problem, f"{side}_vocabulary", None)
    if vocabulary is not None and hasattr(vocabulary, "all_pieces"):
        return vocabulary.all_pieces()
    size = problem.input_vocab_size if side == "source" else problem.target_vocab_size
    return [f"<{i}>" for i in range(size)]


def sentencepiece_files(problem):
    """{file name in the converted folder: the problem's sentencepiece model it copies}."""
    vocabularies = {side: getattr(problem, f"{side}_vocabulary", None)
                    for side in SIDE_SENTENCEPIECE_FILES}
    if not all(hasattr(vocabulary, "model_path") for vocabulary in vocabularies.values()):
        return {}
    if vocabularies["source"] is vocabularies["target"]:
        return {SENTENCEPIECE_FILE: vocabularies["source"].model_path}
    return {SIDE_SENTENCEPIECE_FILES[side]: vocabulary.model_path
            for side, vocabulary in vocabularies.items()}


def transformer_spec(model, source_tokens, target_tokens, positions=DEFAULT_SINUSOID_POSITIONS,
                     alignment_layer=-1, alignment_heads=0):
    """A validated `ctranslate2.specs.TransformerSpec` holding `model`'s weights.

    `positions`: rows of the position table for a sinusoidal model (a learned one brings its
    own `max_length` rows). `alignment_layer`, `alignment_heads`: the decoder layer (-1: the
    last) and its first heads (0: all) whose averaged cross-attention CTranslate2 returns with
    `return_attention`, as the decode hparams of the same names choose ours
    (`decoding.alignments`).
    """
    import_ctranslate2()
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as specs

    if model.self_attention_window:
        raise CTranslate2ExportError(
            f"this model restricts self-attention to a window (hparam self_attention_window="
            f"{model.self_attention_window}), which CTranslate2's Transformer cannot express; "
            f"export a SavedModel with t2t_repro.exporter instead.")
    hp = model.hparams
    if hp.encoder_input_bias:
        raise CTranslate2ExportError(
            "this model adds a trained vector to every encoder input (hparam "
            "encoder_input_bias, tensor2tensor's target-space embedding), which CTranslate2's "
            "Transformer cannot express; decode and score it with the Python commands (a "
            "SavedModel export takes it too, unless its vocabulary is tensor2tensor's subwords, "
            "as an imported checkpoint's is).")
    pre_norm = bool(hp.normalize_first)
    spec = specs.TransformerSpec.from_config(
        (len(model.encoder_layers), len(model.decoder_layers)), hp.num_heads, pre_norm=pre_norm,
        alignment_layer=alignment_layer, alignment_heads=alignment_heads,
        activation=common_spec.Activation[ACTIVATIONS[hp.ffn_activation]],
    )
    spec.decoder.start_from_zero_embedding = bool(hp.zero_pad_embedding)
    _set_stack_inputs(spec.encoder, spec.encoder.embeddings[0], model.input_embedding,
                      _position_table(model, model.encoder_position, positions))
    _set_stack_inputs(spec.decoder, spec.decoder.embeddings, model.target_embedding,
                      _position_table(model, model.decoder_position, positions))
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attention,
                            layer.self_attention_norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attention,
                            layer.self_attention_norm)
        _set_cross_attention(layer_spec.attention, layer.cross_attention,
                             layer.cross_attention_norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_norm)
    if pre_norm:
        _set_norm(spec.encoder.layer_norm, model.encoder_final_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder_final_norm)
    projection = (model.target_embedding.embeddings if model.softmax_projection is None
                  else np.transpose(_array(model.softmax_projection.kernel)))
    spec.decoder.projection.weight = _array(projection)
    if hp.logits_bias:
        spec.decoder.projection.bias = _array(model.final_logits_bias)

    spec.config.layer_norm_epsilon = float(hp.layer_norm_epsilon)
    spec.config.unk_token = source_tokens[2] if len(source_tokens) > 2 else source_tokens[-1]
    spec.config.bos_token = spec.config.decoder_start_token = target_tokens[PAD_ID]
    spec.config.eos_token = target_tokens[EOS_ID]
    spec.register_source_vocabulary(source_tokens)
    spec.register_target_vocabulary(target_tokens)
    spec.validate()
    return spec


def _array(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, np.float32)


def _position_table(model, position_layer, positions):
    if model.hparams.position_encoding == "learned":
        return _array(position_layer.position_embeddings)
    return _array(sinusoidal_position_encoding(positions, model.hparams.hidden_size,
                                               layout=model.hparams.sinusoid_layout))


def _set_stack_inputs(stack_spec, embedding_spec, embedding, table):
    embedding_spec.weight = _array(embedding.embeddings)
    stack_spec.scale_embeddings = True  # × √d_model, as SharedEmbedding
    stack_spec.position_encodings.encodings = table


def _set_linear(linear_spec, denses):
    """Keras Dense layers' kernels [in, out], side by side (a fused projection), as
    CTranslate2's [out, in], and their biases end to end where they have them."""
    weight = np.concatenate([_array(dense.kernel) for dense in denses], axis=1).T
    linear_spec.weight = np.ascontiguousarray(weight)
    if denses[0].use_bias:
        linear_spec.bias = np.concatenate([_array(dense.bias) for dense in denses])


def _set_norm(norm_spec, norm):
    norm_spec.gamma = _array(norm.gamma)
    norm_spec.beta = _array(norm.beta)


def _set_self_attention(attention_spec, attention, norm):
    _set_linear(attention_spec.linear[0], [attention.query_dense, attention.key_dense,
                                           attention.value_dense])
    _set_linear(attention_spec.linear[1], [attention.output_dense])
    _set_norm(attention_spec.layer_norm, norm)


def _set_cross_attention(attention_spec, attention, norm):
    _set_linear(attention_spec.linear[0], [attention.query_dense])
    _set_linear(attention_spec.linear[1], [attention.key_dense, attention.value_dense])
    _set_linear(attention_spec.linear[2], [attention.output_dense])
    _set_norm(attention_spec.layer_norm, norm)


def _set_feed_forward(ffn_spec, feed_forward, norm):
    _set_linear(ffn_spec.linear_0, [feed_forward.inner_dense])
    _set_linear(ffn_spec.linear_1, [feed_forward.output_dense])
    _set_norm(ffn_spec.layer_norm, norm)


def write_ctranslate2_model(model, problem, output_dir, quantization="float32", info=None,
                            positions=DEFAULT_SINUSOID_POSITIONS, alignment_layer=-1,
                            alignment_heads=0):
    """Converts `model` (a built `Transformer` with its weights) into `output_dir`, its
    `return_attention` from `alignment_layer` and `alignment_heads` (`transformer_spec`).

    Writes CTranslate2's `model.bin`, `config.json` and vocabularies, the problem's
    sentencepiece models (`sentencepiece_files`) and `info` as JSON. Written
    under a temporary name and renamed; an existing `output_dir` is an error, never replaced.
    Returns `output_dir`.
    """
    if quantization not in QUANTIZATIONS:
        raise CTranslate2ExportError(
            f"quantization must be one of {QUANTIZATIONS}, got '{quantization}'.")
    if os.path.exists(output_dir):
        raise CTranslate2ExportError(
            f"{output_dir} already exists; a converted model is never overwritten: write it "
            f"to another folder, or remove that one yourself.")
    spec = transformer_spec(model, vocabulary_tokens(problem, "source"),
                            vocabulary_tokens(problem, "target"), positions, alignment_layer,
                            alignment_heads)
    spec.optimize(quantization=quantization)
    with atomic_path(output_dir) as temporary:
        os.makedirs(temporary)
        spec.save(temporary)
        for name, model_path in sentencepiece_files(problem).items():
            shutil.copyfile(model_path, os.path.join(temporary, name))
        with open(os.path.join(temporary, INFO_FILE), "w") as f:
            json.dump({"quantization": quantization, **(info or {})}, f, indent=1)
    return output_dir
