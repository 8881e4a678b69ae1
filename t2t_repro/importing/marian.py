"""Marian Transformers (every OPUS-MT release) as runs of this project.

A Marian model is an `.npz` of named arrays with its options as YAML in the entry
`special:model.yml`; OPUS-MT ships one with its vocabulary `.yml` files, `source.spm` and
`target.spm`, and a `decoder.yml` naming the `.npz` and the vocabularies. `marian_model`
reads those files, checks that every option is one this project's Transformer computes, and
returns its hparams, its weights in our layout and the rewritten SentencePiece models
(`importing.vocabularies`); `importing.run_folder` writes them as a run.

What Marian computes, in our hparams: Swish (or ReLU, or its sigmoid GELU) feed-forward
activations, biases on the attention projections and on the output logits, tensor2tensor's
sinusoids (halves, spaced by log(10⁴)/(d/2 − 1)), LayerNorm ε 1e-9, a decoder starting from a
zero vector, and one, two or three embedding matrices (`tied-embeddings-all`,
`tied-embeddings`). Ids are ours: Marian's id + 1, our 0 being padding, which Marian's
vocabulary lacks: its embedding row is zero and its output bias `PAD_LOGIT_BIAS`, so its
probability is 0 as in Marian wherever a softmax runs over the whole vocabulary.
"""

import dataclasses
import os
import zipfile

import numpy as np
import yaml

from t2t_repro.importing.imported_model import (
    ImportedModel,
    ModelImportError,
    check_all_taken,
)
from t2t_repro.importing.vocabularies import (
    read_marian_vocabulary,
    read_sentencepiece_model,
    rewritten_model,
)

CONFIG_ENTRY = "special:model.yml"
# Marian's defaults of the options read here, for a model.yml that leaves one out.
MARIAN_DEFAULTS = {
    "type": "amun", "dim-emb": 512, "enc-depth": 6, "dec-depth": 6, "transformer-heads": 8,
    "transformer-dim-ffn": 2048, "transformer-ffn-depth": 2,
    "transformer-ffn-activation": "swish", "transformer-decoder-autoreg": "self-attention",
    "transformer-preprocess": "", "transformer-postprocess": "dan",
    "transformer-postprocess-emb": "d", "transformer-postprocess-top": "",
    "transformer-train-position-embeddings": False, "transformer-no-projection": False,
    "transformer-tied-layers": [], "right-left": False, "tied-embeddings": False,
    "tied-embeddings-all": False, "tied-embeddings-src": False, "transformer-dropout": 0.1,
    "transformer-dropout-attention": 0.0, "transformer-dropout-ffn": 0.0,
    "label-smoothing": 0.1,
}
# Marian's activation names -> hparam ffn_activation (Marian's "gelu" is x·σ(1.702x)).
ACTIVATIONS = {"swish": "swish", "relu": "relu", "gelu": "gelu_sigmoid"}
# The LayerNorm ε of Marian's layerNorm.
MARIAN_LAYER_NORM_EPSILON = 1e-9
# Output bias of our padding id 0, which Marian's vocabulary does not have: exp(-10⁴) is 0 in
# float32 beside any real logit, and the bias stays this far down however training moves it.
PAD_LOGIT_BIAS = -1e4


@dataclasses.dataclass(frozen=True)
class MarianFiles:
    """A Marian model's files: the `.npz`, the source and target vocabulary `.yml` files (one
    file twice for a joint vocabulary) and SentencePiece models."""

    model: str
    source_vocabulary: str
    target_vocabulary: str
    source_sentencepiece: str
    target_sentencepiece: str

    def paths(self):
        return dataclasses.astuple(self)


def opus_mt_files(model_dir):
    """The files of an OPUS-MT release folder: `decoder.yml` names the model and the
    vocabularies; the SentencePiece models are `source.spm` and `target.spm`."""
    if not os.path.isdir(model_dir):
        state = "is not a folder" if os.path.exists(model_dir) else "does not exist"
        raise ModelImportError(f"{model_dir} {state}; name an OPUS-MT release folder (its "
                               f"decoder.yml, model, vocabularies, source.spm and target.spm).")
    path = os.path.join(model_dir, "decoder.yml")
    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (FileNotFoundError, IsADirectoryError):
        raise ModelImportError(f"{path} is missing (or not a file): an OPUS-MT release folder "
                               f"has a decoder.yml naming its model and vocabularies.") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ModelImportError(f"{path} does not name the model and the vocabularies "
                               f"(keys 'models' and 'vocabs'): {error}.") from None
    models, vocabularies = (_file_names(config, key, path) for key in ("models", "vocabs"))
    if len(models) != 1 or len(vocabularies) != 2:
        raise ModelImportError(f"{path} names {len(models)} models and {len(vocabularies)} "
                               f"vocabularies; this import takes one model and a source and a "
                               f"target vocabulary.")
    return MarianFiles(*(os.path.join(model_dir, name) for name in (
        models[0], vocabularies[0], vocabularies[1], "source.spm", "target.spm")))


def _file_names(config, key, path):
    """decoder.yml's list of file names under `key` (one name alone, as a list of one)."""
    names = config.get(key) if isinstance(config, dict) else None
    if isinstance(names, str):
        names = [names]
    if not (isinstance(names, list) and names
            and all(isinstance(name, str) and name for name in names)):
        raise ModelImportError(f"{path} does not name the model and the vocabularies: its "
                               f"'{key}' is {names!r}, where a list of file names belongs "
                               f"(models: [model.npz], vocabs: [source.yml, target.yml]).")
    return names


def read_npz(path):
    """{name: array} of a Marian `.npz`, every array read now; a file that is missing,
    truncated or not an `.npz` is a ModelImportError naming it."""
    try:
        if not zipfile.is_zipfile(path):  # NumPy would try it as a pickle, and advise that
            raise ValueError("not a zip archive, which an .npz is")
        with np.load(path) as arrays:
            return {name: arrays[name] for name in arrays.files}
    except FileNotFoundError:
        raise ModelImportError(f"model file {path} is missing.") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        why = str(error).rstrip(".") or type(error).__name__
        raise ModelImportError(f"{path} is not a readable Marian model (.npz): {why}.") from None


def marian_config(arrays, path):
    """The options of `special:model.yml`, with Marian's defaults for those it leaves out."""
    if CONFIG_ENTRY not in arrays:
        raise ModelImportError(f"{path} has no '{CONFIG_ENTRY}' entry, so its options are "
                               f"unknown; it is not a model Marian saved.")
    text = arrays.pop(CONFIG_ENTRY).tobytes().rstrip(b"\0").decode("utf-8")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ModelImportError(f"{path}: '{CONFIG_ENTRY}' is not YAML ({error}).") from None
    return {**MARIAN_DEFAULTS, **(config or {})}


def _without_dropout(operations):
    """A Marian pre/postprocess string ('dan', 'n', ...) less 'd': dropout acts only in
    training, where our dropout sits at the same places."""
    return str(operations).replace("d", "")


def check_config(config, path):
    """Raises ModelImportError naming the first option whose value our Transformer cannot
    compute; returns whether the model is pre-norm."""

    def refuse(option, why):
        raise ModelImportError(f"{path}: Marian option --{option}={config[option]!r} is not "
                               f"supported ({why}).")

    expected = {"type": "transformer", "transformer-decoder-autoreg": "self-attention",
                "transformer-ffn-depth": 2, "transformer-train-position-embeddings": False,
                "transformer-no-projection": False, "right-left": False}
    for option, value in expected.items():
        if config[option] != value:
            refuse(option, f"this import reads Transformers with {option}={value!r}")
    if config["transformer-tied-layers"]:
        refuse("transformer-tied-layers", "every layer has weights of its own here")
    if config["transformer-ffn-activation"] not in ACTIVATIONS:
        refuse("transformer-ffn-activation", f"supported: {', '.join(ACTIVATIONS)}")
    if _without_dropout(config["transformer-postprocess-emb"]):
        refuse("transformer-postprocess-emb", "embeddings get dropout only here: 'd' or ''")
    for option in ("transformer-decoder-ffn-depth", "transformer-decoder-dim-ffn"):
        encoder_option = option.replace("decoder-", "")
        if config.get(option) not in (None, 0, config[encoder_option]):
            refuse(option, f"the decoder's feed-forward layers are the encoder's "
                           f"({encoder_option}={config[encoder_option]!r})")
    layout = tuple(_without_dropout(config[f"transformer-{name}"])
                   for name in ("preprocess", "postprocess", "postprocess-top"))
    if layout not in (("", "an", ""), ("n", "a", "n")):
        name = ("preprocess" if layout[0] not in ("", "n") else
                "postprocess" if layout[1] != ("a" if layout[0] else "an") else
                "postprocess-top")
        refuse(f"transformer-{name}", "post-norm is --transformer-preprocess '' "
               "--transformer-postprocess dan, pre-norm --transformer-preprocess n "
               "--transformer-postprocess da --transformer-postprocess-top n")
    return layout[0] == "n"


def marian_hparams(config, pre_norm, shared_embedding, tied_output):
    """transformer_base with the sizes, dropouts and choices of a Marian model."""
    from t2t_repro.hparams import create_hparams

    hparams = create_hparams("transformer_base")
    layers = int(config["enc-depth"])
    for name, value in {
        "hidden_size": int(config["dim-emb"]), "filter_size": int(config["transformer-dim-ffn"]),
        "num_heads": int(config["transformer-heads"]), "num_hidden_layers": layers,
        "num_encoder_layers": layers, "num_decoder_layers": int(config["dec-depth"]),
        "normalize_first": pre_norm, "layer_norm_epsilon": MARIAN_LAYER_NORM_EPSILON,
        "shared_source_target_embedding": shared_embedding,
        "shared_embedding_and_softmax_weights": tied_output,
        "ffn_activation": ACTIVATIONS[config["transformer-ffn-activation"]],
        "attention_bias": True, "sinusoid_layout": "halves", "logits_bias": True,
        "zero_pad_embedding": True,
        "layer_prepostprocess_dropout": float(config["transformer-dropout"]),
        "attention_dropout": float(config["transformer-dropout-attention"]),
        "relu_dropout": float(config["transformer-dropout-ffn"]),
        "label_smoothing": float(config["label-smoothing"]),
    }.items():
        setattr(hparams, name, value)
    return hparams


class MarianWeights:
    """A Marian model's arrays, taken by name into our layout; `check_all_taken` names any
    left over (weights of something this import does not know)."""

    def __init__(self, arrays, path):
        self.arrays = arrays
        self.path = path

    def take(self, name):
        if name not in self.arrays:
            raise ModelImportError(f"{self.path} has no weight '{name}', which its options "
                                   f"need; it is not a complete Marian Transformer.")
        return np.asarray(self.arrays.pop(name), np.float32)

    def take_norm(self, prefix, pre_norm):
        suffix = "_pre" if pre_norm else ""
        return [self.take(f"{prefix}_ln_scale{suffix}"), self.take(f"{prefix}_ln_bias{suffix}")]

    def take_linear(self, prefix, suffix):
        return [self.take(f"{prefix}_W{suffix}"), self.take(f"{prefix}_b{suffix}")]

    def check_all_taken(self):
        check_all_taken(self.arrays, self.path, "weights",
                        "the model has parts our Transformer lacks")


def _with_pad_row(matrix):
    """[V, d] Marian embeddings -> [V + 1, d], our padding id 0 first, as a zero row."""
    return np.concatenate([np.zeros_like(matrix[:1]), matrix])


def _attention_weights(weights, prefix, pre_norm):
    """([kernel, bias] of the query, key, value and output projections, end to end;
    [gamma, beta] of the sublayer's LayerNorm)."""
    projections = [array for suffix in "qkvo" for array in weights.take_linear(prefix, suffix)]
    return projections, weights.take_norm(f"{prefix}_Wo", pre_norm)


def _feed_forward_weights(weights, prefix, pre_norm):
    """([kernel, bias] of the inner and output layers, end to end; [gamma, beta])."""
    projections = weights.take_linear(prefix, "1") + weights.take_linear(prefix, "2")
    return projections, weights.take_norm(f"{prefix}_ffn", pre_norm)


def marian_model(files):
    """An `ImportedModel` from a Marian model's files (`MarianFiles`); every file is read and
    every option checked before anything is returned."""
    for path in files.paths():
        if not os.path.isfile(path):
            raise ModelImportError(f"{path} is missing (or not a file).")
    arrays = read_npz(files.model)
    config = marian_config(arrays, files.model)
    pre_norm = check_config(config, files.model)
    source_pieces = read_marian_vocabulary(files.source_vocabulary)
    target_pieces = read_marian_vocabulary(files.target_vocabulary)
    source_model, source_counts = rewritten_model(
        read_sentencepiece_model(files.source_sentencepiece), source_pieces)
    target_model, target_counts = rewritten_model(
        read_sentencepiece_model(files.target_sentencepiece), target_pieces)

    weights = MarianWeights(arrays, files.model)
    shared_embedding = "Wemb" in arrays
    embeddings = {}
    if shared_embedding:
        embeddings["source_embedding"] = embeddings["target_embedding"] = weights.take("Wemb")
    else:
        embeddings["source_embedding"] = weights.take("encoder_Wemb")
        embeddings["target_embedding"] = weights.take("decoder_Wemb")
    for side, pieces, path in (("source", source_pieces, files.source_vocabulary),
                               ("target", target_pieces, files.target_vocabulary)):
        rows = embeddings[f"{side}_embedding"].shape[0]
        if rows != len(pieces):
            raise ModelImportError(f"{path} lists {len(pieces)} pieces but {files.model} "
                                   f"embeds {rows} {side} ids; they are not one model's.")
    untied = [name for name in ("decoder_ff_logit_out_W", "decoder_ff_logit_out_Wt")
              if name in arrays]
    converted = {name: _with_pad_row(matrix) for name, matrix in embeddings.items()}
    if untied:
        output = weights.take(untied[0])
        output = output if untied[0].endswith("_W") else output.T  # [d, V]
        converted["output"] = np.concatenate([np.zeros_like(output[:, :1]), output], axis=1)
    bias = (weights.take("decoder_ff_logit_out_b").reshape(-1)
            if "decoder_ff_logit_out_b" in arrays else np.zeros(len(target_pieces), np.float32))
    converted["logits_bias"] = np.concatenate([[PAD_LOGIT_BIAS], bias]).astype(np.float32)
    hparams = marian_hparams(config, pre_norm, shared_embedding, not untied)
    converted["encoder"] = [
        [_attention_weights(weights, f"encoder_l{i}_self", pre_norm),
         _feed_forward_weights(weights, f"encoder_l{i}_ffn", pre_norm)]
        for i in range(1, hparams.num_encoder_layers + 1)]
    converted["decoder"] = [
        [_attention_weights(weights, f"decoder_l{i}_self", pre_norm),
         _attention_weights(weights, f"decoder_l{i}_context", pre_norm),
         _feed_forward_weights(weights, f"decoder_l{i}_ffn", pre_norm)]
        for i in range(1, hparams.num_decoder_layers + 1)]
    if pre_norm:
        for stack in ("encoder", "decoder"):
            converted[f"{stack}_top"] = [weights.take(f"{stack}_top_ln_scale"),
                                         weights.take(f"{stack}_top_ln_bias")]
    weights.check_all_taken()
    return ImportedModel(
        hparams=hparams, source_model=source_model, target_model=target_model,
        vocabulary_counts={"source": source_counts, "target": target_counts},
        weights=converted,
        description={"format": "marian", **dataclasses.asdict(files),
                     "options": {name: config[name] for name in sorted(MARIAN_DEFAULTS)}})
