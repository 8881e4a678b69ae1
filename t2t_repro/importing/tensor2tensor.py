"""tensor2tensor `transformer` checkpoints as runs of this project.

tensor2tensor names its variables by scope: `transformer/body/{encoder,decoder}/layer_<i>/
{self_attention,encdec_attention}/multihead_attention/{q,k,v,output_transform}/kernel` (no
biases), `.../ffn/conv1/{kernel,bias}` and `conv2`, LayerNorms `.../layer_norm/
layer_norm_{scale,bias}` under `layer_postprocess` (post-norm, `transformer_base_v1` and
`transformer_big` before v2) or `layer_prepostprocess` (pre-norm, the current
`transformer_base`, whose stacks end with one more LayerNorm), `transformer/body/
target_space_embedding/kernel` [32, d], and the embedding in row shards `transformer/
symbol_modality_<V>_<d>/shared/weights_<i>` (or `input_emb`, `target_emb`, `softmax`).

What it computes, in our hparams: the embedding × √d with id 0 zeroed
(`zero_pad_embedding`, which also starts the decoder from zeros as its shift right does), its
timing signal (`sinusoid_layout=halves`), the problem's target-space row added to every
encoder input (`encoder_input_bias`), LayerNorm ε 1e-6, ReLU, no attention biases. Its ids
are ours (0 padding, 1 EOS), so nothing is remapped.
"""

import glob
import os
import re

import numpy as np

from t2t_repro.importing.imported_model import (
    ImportedModel,
    ModelImportError,
    check_all_taken,
)

BODY = "transformer/body/"
TARGET_SPACE_EMBEDDING = BODY + "target_space_embedding/kernel"
_MODALITY = re.compile(r"transformer/symbol_modality_(\d+)_(\d+)/(\w+)/weights_(\d+)$")
NORM_EPSILON = 1e-6  # tensor2tensor's norm_epsilon in every transformer set


def vocabulary_file(data_dir, problem):
    """The SubwordTextEncoder file tensor2tensor's datagen wrote for `problem` in `data_dir`
    (`vocab.<problem>.<size>.subwords`)."""
    paths = glob.glob(os.path.join(data_dir, f"vocab.{problem}.*.subwords"))
    if len(paths) != 1:
        raise ModelImportError(f"{data_dir} holds {len(paths)} files vocab.{problem}.*.subwords; "
                               f"give the vocabulary with --vocab_file.")
    return paths[0]


# The files a TensorFlow checkpoint `<prefix>` is written as.
_CHECKPOINT_FILE = re.compile(r"^(.+)\.(index|meta|data-\d+-of-\d+)$")
_CHECKPOINT_HINT = ("give the folder tensor2tensor trained in (with its `checkpoint` file), or "
                    "a checkpoint prefix such as model.ckpt-250000")


def checkpoint_prefix(path):
    """The TensorFlow checkpoint `path` names: a folder's newest (its `checkpoint` file), a
    prefix, or the prefix of one of its files (`.index`, `.data-*`, `.meta`, which a user may
    well name; TensorFlow reads an `.index` as a checkpoint of no variables). A path that
    names none is a ModelImportError saying what it is instead."""
    import tensorflow as tf

    from t2t_repro.training import checkpoints

    if os.path.isdir(path):
        newest = tf.train.latest_checkpoint(path)
        if newest is not None:
            return newest
        if checkpoints.list_checkpoints(path):
            raise ModelImportError(f"{path} is a run of this project, which needs no import: "
                                   f"decode, export or fine-tune it as it is.")
        raise ModelImportError(f"{path} holds no TensorFlow checkpoint; {_CHECKPOINT_HINT}.")
    own_file = _CHECKPOINT_FILE.match(path)
    if own_file and os.path.exists(own_file.group(1) + ".index"):
        return own_file.group(1)
    if not os.path.exists(path) and not os.path.exists(path + ".index"):
        raise ModelImportError(f"{path} does not exist, nor does {path}.index; "
                               f"{_CHECKPOINT_HINT}.")
    if path.endswith(".weights.h5"):
        raise ModelImportError(f"{path} is a Keras weights file (a checkpoint of this "
                               f"project, which needs no import), not tensor2tensor's; "
                               f"{_CHECKPOINT_HINT}.")
    return path


class CheckpointWeights:
    """The checkpoint's `transformer/` variables, taken by name; `check_all_taken` names any
    left over."""

    def __init__(self, checkpoint):
        import tensorflow as tf

        self.checkpoint = checkpoint
        prefix = checkpoint_prefix(checkpoint)
        try:
            self.reader = tf.train.load_checkpoint(prefix)
        except (ValueError, tf.errors.OpError) as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ModelImportError(f"{checkpoint} is not a readable TensorFlow checkpoint: "
                                   f"{message}.") from None
        names = sorted(self.reader.get_variable_to_shape_map())
        self.names = {name for name in names if name.startswith("transformer/")
                      and not re.search(r"/(Adam|Adafactor|adafactor|Momentum)", name)}
        if not any(name.startswith(BODY) for name in self.names):
            scopes = sorted({name.split("/")[0] for name in names if "/" in name})
            raise ModelImportError(
                f"{checkpoint} is not a tensor2tensor transformer checkpoint: it has no "
                f"variables under {BODY} (its scopes: {', '.join(scopes[:5]) or 'none'}).")

    def has(self, name):
        return name in self.names

    def take(self, name):
        if name not in self.names:
            raise ModelImportError(f"{self.checkpoint} has no variable '{name}', which a "
                                   f"tensor2tensor transformer of its layout has.")
        self.names.remove(name)
        return np.asarray(self.reader.get_tensor(name), np.float32)

    def take_norm(self, scope):
        return [self.take(f"{scope}/layer_norm/layer_norm_scale"),
                self.take(f"{scope}/layer_norm/layer_norm_bias")]

    def check_all_taken(self):
        check_all_taken(self.names, self.checkpoint, "variables", "it is not the plain "
                        "transformer of transformer_base or transformer_big")


def _embeddings(weights):
    """{role: [V, d] matrix} from the modality's row shards; role is shared, input_emb,
    target_emb or softmax."""
    shards = {}
    for name in sorted(weights.names):
        match = _MODALITY.match(name)
        if match:
            vocab_size, role, index = int(match.group(1)), match.group(3), int(match.group(4))
            shards.setdefault(role, {})[index] = (vocab_size, name)
    if not shards:
        raise ModelImportError(f"{weights.checkpoint} has no symbol modality weights "
                               f"(transformer/symbol_modality_<V>_<d>/shared/weights_0 ...).")
    matrices = {}
    for role, by_index in shards.items():
        sizes = {size for size, _ in by_index.values()}
        if len(sizes) != 1 or sorted(by_index) != list(range(len(by_index))):
            raise ModelImportError(
                f"{weights.checkpoint}: the '{role}' embedding's shards are not one "
                f"vocabulary's weights_0 ... weights_{len(by_index) - 1} (separate source and "
                f"target vocabularies are not supported).")
        matrices[role] = np.concatenate([weights.take(by_index[i][1])
                                         for i in range(len(by_index))])
        if matrices[role].shape[0] != sizes.pop():
            raise ModelImportError(f"{weights.checkpoint}: the '{role}' shards hold "
                                   f"{matrices[role].shape[0]} rows, not the modality's size.")
    return matrices


def _layer_weights(weights, scope, sublayers, pre_norm):
    """[(projections, [gamma, beta])] of one layer's sublayers, in our order."""
    norm_scope = "layer_prepostprocess" if pre_norm else "layer_postprocess"
    converted = []
    for sublayer in sublayers:
        prefix = f"{scope}/{sublayer}"
        if sublayer == "ffn":
            projections = [weights.take(f"{prefix}/conv{i}/{kind}")
                           for i in (1, 2) for kind in ("kernel", "bias")]
        else:
            projections = [weights.take(f"{prefix}/multihead_attention/{name}/kernel")
                           for name in ("q", "k", "v", "output_transform")]
        converted.append((projections, weights.take_norm(f"{prefix}/{norm_scope}")))
    return converted


def tensor2tensor_hparams(num_layers, hidden_size, filter_size, num_heads, pre_norm, shared):
    """transformer_base with a tensor2tensor checkpoint's sizes and choices."""
    from t2t_repro.hparams import create_hparams

    hparams = create_hparams("transformer_base")
    for name, value in {
        "hidden_size": hidden_size, "filter_size": filter_size, "num_heads": num_heads,
        "num_hidden_layers": num_layers[0], "num_encoder_layers": num_layers[0],
        "num_decoder_layers": num_layers[1], "normalize_first": pre_norm,
        "layer_norm_epsilon": NORM_EPSILON, "sinusoid_layout": "halves",
        "zero_pad_embedding": True, "encoder_input_bias": True,
        "shared_source_target_embedding": "shared" in shared or "input_emb" not in shared,
        "shared_embedding_and_softmax_weights": "softmax" not in shared,
    }.items():
        setattr(hparams, name, value)
    return hparams


def tensor2tensor_model(checkpoint, vocab_file, num_heads, target_space_id):
    """An `ImportedModel` from a tensor2tensor transformer checkpoint (a folder or a
    checkpoint prefix) and its SubwordTextEncoder vocabulary file."""
    from t2t_repro.data.tensor2tensor_subwords import Tensor2TensorSubwords
    from t2t_repro.data.vocabulary import VocabularyError

    if not os.path.isfile(vocab_file):
        raise ModelImportError(f"vocabulary file {vocab_file} is missing (or not a file).")
    try:
        vocabulary = Tensor2TensorSubwords(vocab_file)
    except VocabularyError as error:
        raise ModelImportError(str(error)) from None
    weights = CheckpointWeights(checkpoint)
    matrices = _embeddings(weights)
    target = matrices.get("shared", matrices.get("target_emb"))
    if target is None or target.shape[0] != vocabulary.vocab_size:
        raise ModelImportError(
            f"{vocab_file} lists {vocabulary.vocab_size} subtokens but {checkpoint} embeds "
            f"{None if target is None else target.shape[0]} ids; they are not one model's.")
    pre_norm = weights.has(f"{BODY}encoder/layer_prepostprocess/layer_norm/layer_norm_scale")
    num_layers = [len({m.group(1) for m in map(re.compile(
        rf"{BODY}{stack}/layer_(\d+)/").match, weights.names) if m})
        for stack in ("encoder", "decoder")]
    space_table = weights.take(TARGET_SPACE_EMBEDDING)
    if not 0 <= target_space_id < space_table.shape[0]:
        raise ModelImportError(f"--target_space_id={target_space_id} is not a row of "
                               f"{checkpoint}'s target_space_embedding ({space_table.shape[0]}).")
    converted = {
        "source_embedding": matrices.get("shared", matrices.get("input_emb")),
        "target_embedding": target,
        "encoder_input_bias": space_table[target_space_id],
        "encoder": [_layer_weights(weights, f"{BODY}encoder/layer_{i}",
                                   ("self_attention", "ffn"), pre_norm)
                    for i in range(num_layers[0])],
        "decoder": [_layer_weights(weights, f"{BODY}decoder/layer_{i}",
                                   ("self_attention", "encdec_attention", "ffn"), pre_norm)
                    for i in range(num_layers[1])],
    }
    if "softmax" in matrices:
        converted["output"] = matrices["softmax"].T
    if pre_norm:
        for stack in ("encoder", "decoder"):
            converted[f"{stack}_top"] = weights.take_norm(f"{BODY}{stack}/layer_prepostprocess")
    weights.check_all_taken()
    inner = converted["encoder"][0][1][0][0] if num_layers[0] else None
    hparams = tensor2tensor_hparams(num_layers, target.shape[1],
                                    inner.shape[1] if inner is not None else 0, num_heads,
                                    pre_norm, set(matrices))
    if target.shape[1] % num_heads:
        raise ModelImportError(f"--num_heads={num_heads} does not divide {checkpoint}'s "
                               f"hidden size {target.shape[1]}.")
    return ImportedModel(
        hparams=hparams, source_model=vocabulary, target_model=vocabulary,
        vocabulary_counts={}, weights=converted,
        description={"format": "tensor2tensor", "checkpoint": checkpoint,
                     "vocab_file": vocab_file, "num_heads": num_heads,
                     "target_space_id": target_space_id,
                     "layout": "pre-norm" if pre_norm else "post-norm"},
        vocabulary_format="tensor2tensor_subwords")
