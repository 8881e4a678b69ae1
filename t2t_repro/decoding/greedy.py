"""Greedy decoding by re-running the decoder over the whole prefix at each step.

Simple and exact, but each step costs the whole prefix; the cached beam search of the
decoding issue replaces it for real translation work.
"""

import numpy as np
from keras import ops

from t2t_repro.special_ids import EOS_ID, PAD_ID
from t2t_repro.models.transformer import shift_right


def greedy_decode(model, inputs, max_output_length):
    """Source ids [batch, s] -> decoded ids [batch, <= max_output_length], EOS included.

    Positions after a sequence's EOS are padding. Stops early once every sequence has ended.
    """
    memory, memory_mask = model.encode(ops.convert_to_tensor(inputs, "int32"), training=False)
    batch_size = ops.shape(memory)[0]
    decoded = np.full((batch_size, max_output_length), PAD_ID, dtype=np.int32)
    finished = np.zeros(batch_size, dtype=bool)
    for position in range(max_output_length):
        decoder_inputs = shift_right(ops.convert_to_tensor(decoded[:, : position + 1]))
        logits = model.decode(decoder_inputs, memory, memory_mask, training=False)
        next_ids = ops.convert_to_numpy(ops.argmax(logits[:, position], axis=-1))
        decoded[:, position] = np.where(finished, PAD_ID, next_ids)
        finished |= decoded[:, position] == EOS_ID
        if finished.all():
            return decoded[:, : position + 1]
    return decoded
