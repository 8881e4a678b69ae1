"""A toy SavedModel with the exporter's signatures, for testing the server and client fast.

It "translates" by upper-casing ASCII letters: `serving_default` maps `inputs` tf.string [batch]
to `outputs` (the upper-cased text) and `scores` (minus the text's length in bytes, float32);
`beams` gives [batch, 2] outputs (upper-cased, then lower-cased) and scores. An input longer
than `MAX_INPUT_BYTES` bytes fails with an InvalidArgumentError naming it by its index in the
call (`too_long_error`) and the limit, as an exported model rejects a too-long input.
"""

import os

import tensorflow as tf

MAX_INPUT_BYTES = 40
BEAM_SIZE = 2


class ToyTranslator(tf.Module):
    def _checked(self, inputs):
        lengths = tf.strings.length(inputs)
        too_long = lengths > MAX_INPUT_BYTES
        first = tf.argmax(tf.cast(too_long, tf.int32))
        message = tf.strings.format(too_long_error("{}", "{}"), (first, tf.gather(lengths, first)))
        check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(too_long)), [message])
        with tf.control_dependencies([check]):
            return tf.identity(inputs), -tf.cast(lengths, tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        inputs, scores = self._checked(inputs)
        return {"outputs": tf.strings.upper(inputs), "scores": scores}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def beams(self, inputs):
        inputs, scores = self._checked(inputs)
        outputs = tf.stack([tf.strings.upper(inputs), tf.strings.lower(inputs)], axis=1)
        return {"outputs": outputs, "scores": tf.stack([scores, scores - 1.0], axis=1)}


def too_long_error(index, length):
    """The model's error for input `index` (counted in the call) of `length` bytes, as the
    exporter's length check words it."""
    return (f"input {index} has {length} bytes, more than this model takes: "
            f"max_input_tokens={MAX_INPUT_BYTES}. Split or shorten it.")


def write_toy_export(export_dir, version):
    """Writes the toy model as `<export_dir>/<version>/` (TF Serving's layout); returns that
    path."""
    module = ToyTranslator()
    path = os.path.join(str(export_dir), str(version))
    tf.saved_model.save(module, path, signatures={"serving_default": module.translate,
                                                  "beams": module.beams})
    return path


def expected_translation(text):
    """What the toy model's serving_default answers for `text`: (output, score). TensorFlow
    upper-cases ASCII letters only."""
    upper = "".join(char.upper() if char.isascii() else char for char in text)
    return upper, -float(len(text.encode("utf-8")))
