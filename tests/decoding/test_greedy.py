"""Greedy decoding against a scripted model whose next-token choices are known by hand."""

import numpy as np
from keras import ops

from t2t_repro.decoding.greedy import greedy_decode
from t2t_repro.special_ids import EOS_ID, PAD_ID

VOCAB = 6


class ScriptedModel:
    """Stands in for the Transformer: at decoder position t, row b's argmax is script[b][t].

    It records the decoder inputs it was given, to check that each step sees the prefix
    decoded so far shifted right behind the start symbol (id 0).
    """

    def __init__(self, script):
        self.script = np.array(script)
        self.decoder_inputs = []

    def encode(self, inputs, training=None):
        return ops.zeros((ops.shape(inputs)[0], 3, 4)), None

    def decode(self, decoder_inputs, memory, memory_mask, training=None):
        decoder_inputs = ops.convert_to_numpy(decoder_inputs)
        self.decoder_inputs.append(decoder_inputs)
        length = decoder_inputs.shape[1]
        logits = np.zeros((len(self.script), length, VOCAB), np.float32)
        for row, tokens in enumerate(self.script[:, :length]):
            logits[row, np.arange(length), tokens] = 5.0
        return ops.convert_to_tensor(logits)


def test_rows_stop_at_their_own_eos_and_are_padded_after_it():
    model = ScriptedModel([[3, 4, EOS_ID, 5, 5], [2, EOS_ID, 4, 4, 4]])
    decoded = greedy_decode(model, np.ones((2, 3), np.int32), max_output_length=5)
    # Every row has ended by position 2, so decoding stops there.
    np.testing.assert_array_equal(decoded, [[3, 4, EOS_ID], [2, EOS_ID, PAD_ID]])
    assert len(model.decoder_inputs) == 3
    # The last step saw the start symbol and the two tokens before it.
    np.testing.assert_array_equal(model.decoder_inputs[-1], [[PAD_ID, 3, 4], [PAD_ID, 2, EOS_ID]])


def test_output_is_cut_at_max_output_length_without_eos():
    model = ScriptedModel([[2, 3, 4, 5, 2, 3]])
    decoded = greedy_decode(model, np.ones((1, 2), np.int32), max_output_length=4)
    np.testing.assert_array_equal(decoded, [[2, 3, 4, 5]])
