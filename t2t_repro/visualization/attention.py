"""A sentence's attention weights in every layer and head, and the tokens that label them.

Three stacks of attention, as the paper's Figures 3-5 show them: encoder self-attention (source
positions attending to source positions), decoder self-attention and encoder-decoder attention.
A decoder position's row is labelled with the target token it predicts; the decoder
self-attention's columns with the token at each position (the decoder's input: the start
token, then the target shifted right), the encoder's rows and columns with the source tokens.
Backend-agnostic (keras.ops), like the model.
"""

import numpy as np
from keras import ops

from t2t_repro.names import EOS_ID, PAD_ID

STACKS = ("encoder_self", "decoder_self", "encoder_decoder")
STACK_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "encoder_decoder": "encoder-decoder attention",
}
START_LABEL, EOS_LABEL = "<s>", "</s>"


def attention_maps(model, input_ids, target_ids):
    """{stack: weights [layers, heads, queries, keys]} (NumPy float32) of `model` reading one
    sentence pair, teacher-forced: `input_ids` and `target_ids` are lists of ids (EOS
    included, no padding). Every row sums to 1 over its keys."""
    features = {"inputs": np.asarray([input_ids], np.int32),
                "targets": np.asarray([target_ids], np.int32)}
    scores = model.attention_weights(features)

    def stacked(names, part=None):
        return np.stack([ops.convert_to_numpy(scores[name] if part is None
                                              else scores[name][part])[0] for name in names])

    encoder = [layer.name for layer in model.encoder_layers]
    decoder = [layer.name for layer in model.decoder_layers]
    return {"encoder_self": stacked(encoder), "decoder_self": stacked(decoder, "self"),
            "encoder_decoder": stacked(decoder, "cross")}


def token_labels(problem, ids, side):
    """A label per id of the `side` ("source" or "target"): the subword piece for a problem
    with sentencepiece vocabularies (e.g. "▁house"), else the problem's decoding of the id
    alone; EOS as "</s>"."""
    vocabulary = getattr(problem, f"{side}_vocabulary", None)
    pieces = vocabulary.all_pieces() if hasattr(vocabulary, "all_pieces") else None
    decode = problem.decode_inputs if side == "source" else problem.decode
    labels = []
    for token in map(int, ids):
        if token == EOS_ID:
            labels.append(EOS_LABEL)
        elif token == PAD_ID:
            labels.append(START_LABEL)  # id 0 only ever starts the decoder's input
        else:
            labels.append(pieces[token] if pieces else decode([token]))
    return labels


def axis_labels(problem, input_ids, target_ids):
    """{stack: (row labels, column labels)} for `attention_maps`' matrices."""
    source = token_labels(problem, input_ids, "source")
    target = token_labels(problem, target_ids, "target")
    decoder_inputs = [START_LABEL] + target[:-1]
    return {"encoder_self": (source, source), "decoder_self": (target, decoder_inputs),
            "encoder_decoder": (target, source)}
