"""tensor2tensor `transformer` checkpoints written here, for the import's tests and its
documented example (tensor2tensor cannot run on these machines): random values under
tensor2tensor's exact variable names and shapes (the embedding in row shards, post-norm
`transformer_base_v1` or pre-norm current `transformer_base`), saved as its
`tf.compat.v1.train.Saver` saves them, with a small SubwordTextEncoder vocabulary file.

    python tests/importing/tensor2tensor_checkpoints.py --output_dir=t2t_train/ende \\
        --vocab_file=t2t_data/vocab.translate_ende_wmt32k.32768.subwords
"""

import argparse
import os

import numpy as np

from t2t_repro.cli import quiet_tensorflow

D, HEADS, FILTER, SHARDS, SPACES = 32, 2, 64, 3, 32
# Reserved ids, then word subtokens and the alphabet (tensor2tensor's file order: by count).
# Each character of every subtoken, the reserved ones' included, is a subtoken of its own, as
# in a vocabulary tensor2tensor builds, so any text can be spelled (others are escaped).
SUBTOKENS = (["<pad>", "<EOS>", "a_", "cat_", "the_", "sat_", "on_", "mat_", ".", "_", " "]
             + list("abcdefghijklmnopqrstuvwxyz.\\;0123456789u_ ,ABCDEFGHIJKLMNOPQRSTUVWXYZ<>"))
VOCAB = len(SUBTOKENS)


def t2t_variables(pre_norm, layers, seed):
    """{name: array} under tensor2tensor's names and shapes; `layers`: (encoder, decoder)."""
    rng = np.random.default_rng(seed)
    body = "transformer/body"
    variables = {f"{body}/target_space_embedding/kernel": rng.normal(size=(SPACES, D))}
    rows = [VOCAB // SHARDS + (i < VOCAB % SHARDS) for i in range(SHARDS)]
    for i, n in enumerate(rows):
        variables[f"transformer/symbol_modality_{VOCAB}_{D}/shared/weights_{i}"] = (
            rng.normal(scale=D ** -0.5, size=(n, D)))
    norm = "layer_prepostprocess" if pre_norm else "layer_postprocess"

    def add_norm(scope):
        variables[f"{scope}/layer_norm/layer_norm_scale"] = 1 + 0.1 * rng.normal(size=D)
        variables[f"{scope}/layer_norm/layer_norm_bias"] = 0.1 * rng.normal(size=D)

    for stack, count, attentions in (
            ("encoder", layers[0], ("self_attention",)),
            ("decoder", layers[1], ("self_attention", "encdec_attention"))):
        for i in range(count):
            for attention in attentions:
                scope = f"{body}/{stack}/layer_{i}/{attention}"
                for name in ("q", "k", "v", "output_transform"):
                    variables[f"{scope}/multihead_attention/{name}/kernel"] = (
                        rng.normal(scale=D ** -0.5, size=(D, D)))
                add_norm(f"{scope}/{norm}")
            scope = f"{body}/{stack}/layer_{i}/ffn"
            for name, shape in (("conv1", (D, FILTER)), ("conv2", (FILTER, D))):
                variables[f"{scope}/{name}/kernel"] = rng.normal(scale=shape[0] ** -0.5,
                                                                 size=shape)
                variables[f"{scope}/{name}/bias"] = 0.1 * rng.normal(size=shape[1])
            add_norm(f"{scope}/{norm}")
        if pre_norm:
            add_norm(f"{body}/{stack}/layer_prepostprocess")
    return {name: value.astype(np.float32) for name, value in variables.items()}


def write_checkpoint(variables, folder):
    """A checkpoint as tensor2tensor's Saver writes it: names as given, plus global_step."""
    import tensorflow as tf

    os.makedirs(folder, exist_ok=True)
    with tf.Graph().as_default():
        tensors = {name: tf.compat.v1.Variable(value, name=name)
                   for name, value in {**variables, "global_step": np.int64(7)}.items()}
        saver = tf.compat.v1.train.Saver(tensors)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(folder, "model.ckpt"), global_step=7)
    return folder


def write_vocabulary(path):
    """`SUBTOKENS` as a SubwordTextEncoder vocabulary file (one quoted subtoken a line)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"'{s}'\n" for s in SUBTOKENS))
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True, help="the checkpoint's folder")
    parser.add_argument("--vocab_file", required=True, help="the vocabulary file to write")
    parser.add_argument("--pre_norm", action="store_true")
    args = parser.parse_args()
    quiet_tensorflow.import_tensorflow()  # no start-up lines above the command's one line
    write_checkpoint(t2t_variables(args.pre_norm, (2, 1), seed=0), args.output_dir)
    write_vocabulary(args.vocab_file)
    print(f"A random tensor2tensor transformer ({'pre' if args.pre_norm else 'post'}-norm, "
          f"d_model {D}, {VOCAB} subtokens) in {args.output_dir}; vocabulary {args.vocab_file}")


if __name__ == "__main__":
    main()
