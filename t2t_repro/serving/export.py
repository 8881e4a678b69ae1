"""A trained model as a SavedModel that takes text and returns text, in TF Serving's layout.

Everything runs in the graph: the problem's tokenizer (`Problem.graph_text`), EOS appended, the
input limit checked, the cached beam search (`TransformerBeamSearch.graph_decode`, one
`while_loop`) with the decode hparams baked in, and detokenization. Loading it needs TensorFlow
and TensorFlow Text only.

Signatures, taking `inputs` tf.string [batch]:
    serving_default  `outputs` tf.string [batch] (the best hypothesis, each line break or tab
                     in it a space, as the decoder writes it), `scores` float32 [batch]
    beams            `outputs` tf.string [batch, beam] (written alike), `scores` float32
                     [batch, beam], best first
A score is log P / ((5 + length) / 6)^alpha, as the decoder's `return_beams` prints it. Empty and
whitespace-only inputs give an empty output and score 0.
    score            also `targets` tf.string [batch]: `scores` float32 [batch], each target's
                     log P(target | input) in nats, EOS included (as the decoder's --score_file
                     writes it), and `lengths` int32 [batch], its pieces.
"""

import json
import os
import re
import time

import tensorflow as tf

from t2t_repro.utils.atomic_files import atomic_path, remove_abandoned_temporaries
from t2t_repro.utils.text_lines import FIELD_BREAKS
from t2t_repro.decoding.scoring import graph_score
from t2t_repro.decoding.text_decoding import create_search, input_limit
from t2t_repro.names import EOS_ID, PAD_ID
from t2t_repro.errors import UserError
from t2t_repro.names import (BEAMS_SIGNATURE, BEST_SIGNATURE, EXPORT_FORMAT_FILES,
                             SCORE_SIGNATURE)

EXPORT_INFO_FILE = os.path.join("assets.extra", "export_info.json")
# Nothing differentiates an export: tracing the gradients of its ops' custom gradients would
# cost every export time and bytes for nothing.
INFERENCE_ONLY = tf.saved_model.SaveOptions(experimental_custom_gradients=False)


class ExportError(UserError, ValueError):
    """An export that cannot be written as asked; the message says what to change."""


def check_decode_hparams(decode_hparams):
    """ExportError for decode hparams an export cannot answer with: it runs beam or greedy
    search and answers translations, so sampling and alignments are the decoder's only."""
    if decode_hparams.return_alignments:
        raise ExportError(
            "decode hparam return_alignments applies to t2t_repro.decoder; a SavedModel "
            "answers translations only. For attention outside TensorFlow, export "
            "--export_format=ctranslate2 with alignment_layer and alignment_heads.")
    if decode_hparams.sampling_method != "argmax":
        raise ExportError("an export runs beam or greedy search; sampling_method="
                          f"{decode_hparams.sampling_method} is the decoder's only "
                          f"(python -m t2t_repro.decoder).")


class TextToTextModule(tf.Module):
    """The exported object: the model's weights, the problem's in-graph text codec and the
    signatures. `max_input_tokens`: see `input_limit`.

    The weights are tracked once, as `model_variables`; the Keras model is reached only through
    the (untracked) search, since tracking it would save every weight a second time, and a
    trained model's optimizer slots with them."""

    def __init__(self, model, problem, decode_hparams, max_input_tokens=None):
        check_decode_hparams(decode_hparams)
        super().__init__(name="text_to_text")
        self.max_input_tokens = input_limit(model, max_input_tokens)
        self.model_variables = [variable.value for variable in model.variables]
        self.text = problem.graph_text()
        self._search = create_search(model, decode_hparams)
        spec = tf.TensorSpec([None], tf.string, name="inputs")
        self.beams = tf.function(self._beams, input_signature=[spec], autograph=False)
        self.best = tf.function(self._best, input_signature=[spec], autograph=False)
        self.score = tf.function(
            self._score, autograph=False,
            input_signature=[spec, tf.TensorSpec([None], tf.string, name="targets")])

    def _best(self, inputs):
        beams = self.beams(inputs)  # the traced search, called: not traced a second time
        return {"outputs": beams["outputs"][:, 0], "scores": beams["scores"][:, 0]}

    def _beams(self, inputs):
        blank = tf.strings.length(tf.strings.strip(inputs)) == 0
        ids, lengths = with_eos(self.text.encode(tf.where(blank, "", inputs)))
        with tf.control_dependencies([self._check_lengths(lengths)]):
            ids, scores = self._search.graph_decode(ids)
        texts = output_fields(self.text.decode(ids))
        return {"outputs": tf.where(blank[:, None], "", texts),
                "scores": tf.where(blank[:, None], 0.0, scores)}

    def _score(self, inputs, targets):
        (input_ids, input_lengths), (target_ids, target_lengths) = (
            with_eos(self.text.encode(inputs)), with_eos(self.text.encode_target(targets)))
        # A target is held to the inputs' limit (never more than a learned position table):
        # scoring costs the square of its length, and a request could ask for any.
        checks = [self._check_lengths(input_lengths), self._check_lengths(target_lengths, "target")]
        with tf.control_dependencies(checks):
            scores, lengths = graph_score(self._search.model, input_ids, target_ids)
        return {"scores": scores, "lengths": lengths}

    def _check_lengths(self, lengths, what="input"):
        """Fails the call, naming the first `what` longer than max_input_tokens and the limit;
        never truncates."""
        too_long = lengths > self.max_input_tokens
        first = tf.argmax(tf.cast(too_long, tf.int32))
        message = tf.strings.format(
            f"{what} {{}} has {{}} tokens (EOS included), more than this model takes: "
            f"max_input_tokens={self.max_input_tokens}. Split or shorten it.",
            (first, tf.gather(lengths, first)),
        )
        return tf.debugging.Assert(tf.logical_not(tf.reduce_any(too_long)), [message])


def with_eos(ids):
    """Ragged ids [rows, (n)] with EOS appended to each row, padded: [rows, longest + 1], and
    each row's length with its EOS. Not a ragged concat, whose int64 transposes make
    TensorFlow's oneDNN rewrite log an error line on some CPUs (`layers/row_gathers.py`)."""
    lengths = ids.row_lengths()
    padded = tf.pad(ids.to_tensor(default_value=PAD_ID), [[0, 0], [0, 1]],
                    constant_values=PAD_ID)
    at_end = tf.range(tf.shape(padded, out_type=lengths.dtype)[1])[None, :] == lengths[:, None]
    return tf.where(at_end, tf.constant(EOS_ID, padded.dtype), padded), lengths + 1


def output_fields(texts):
    """`utils.text_lines.output_field` in the graph: each line break or tab in a translation
    a space, so that the export answers as the decoder writes its lines."""
    return tf.strings.regex_replace(texts, f"[{FIELD_BREAKS}]", " ")


def export_version(checkpoint_path):
    """The version folder's number: the checkpoint's step, or the time for one without."""
    from t2t_repro.training.checkpoints import checkpoint_step

    step = checkpoint_step(checkpoint_path)
    return step if step is not None else int(time.time())


def check_export_format(export_dir, export_format, hint):
    """ExportError when `export_dir` holds versions of another format than `export_format`: a
    server loads a folder's newest version, and would find one it cannot read. `hint` names
    the folder to use instead."""
    if not os.path.isdir(export_dir):
        return
    versions = [name for name in os.listdir(export_dir) if re.fullmatch("[0-9]+", name)]
    for version in sorted(versions, key=int):
        for other, model_file in EXPORT_FORMAT_FILES.items():
            found = os.path.join(export_dir, version, model_file)
            if other != export_format and os.path.exists(found):
                raise ExportError(
                    f"--export_dir={export_dir} holds {other} versions ({found}); a "
                    f"{export_format} version beside them would leave a server of that folder "
                    f"a newest version it cannot read. Name another --export_dir ({hint}).")


def write_export(module, export_dir, version, info):
    """Saves `module` as `<export_dir>/<version>/`, written under a temporary name and renamed,
    so a server watching `export_dir` never sees a half-written version; an existing version is
    an ExportError, never overwritten. `info` (JSON) goes to `assets.extra/export_info.json`.
    Returns the version's path."""
    target = os.path.join(export_dir, str(version))
    if os.path.exists(target):
        raise _existing_version_error(target)
    os.makedirs(export_dir, exist_ok=True)
    remove_abandoned_temporaries(export_dir)  # what exporters killed mid-write left
    try:
        with atomic_path(target) as temporary:
            tf.saved_model.save(module, temporary, signatures={BEST_SIGNATURE: module.best,
                                                               BEAMS_SIGNATURE: module.beams,
                                                               SCORE_SIGNATURE: module.score},
                                options=INFERENCE_ONLY)
            os.makedirs(os.path.join(temporary, "assets.extra"))
            with open(os.path.join(temporary, EXPORT_INFO_FILE), "w") as f:
                json.dump(info, f, indent=1)
    except OSError as error:
        if os.path.exists(target):  # another exporter wrote the version meanwhile
            raise _existing_version_error(target) from error
        raise
    return target


def _existing_version_error(target):
    return ExportError(f"{target} already exists; an export version is never overwritten: "
                       f"write another version, or remove that folder yourself.")
