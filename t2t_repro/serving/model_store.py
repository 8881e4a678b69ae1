"""Finds and loads the newest version of an export in TF Serving's layout, answers which
versions are served, and runs a signature on a batch of instances.

`<export_dir>/<version>/saved_model.pb` with integer versions (`00300` is version 300, as TF
Serving reads it); other folders (an exporter's `.tmp-...` one still being written) are not
versions. As TF Serving's default "latest" policy, only the newest version is loaded. Loading
needs TensorFlow and TensorFlow Text only (it registers the text ops the exported graph uses),
nothing of this project.
"""

import os
import re

import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2

from t2t_repro.errors import UserError
from t2t_repro.names import EXPORT_FORMAT_FILES
from t2t_repro.utils import out_of_memory
from t2t_repro.utils.stderr_lines import (
    SENTENCEPIECE_IDENTITY_NORMALIZATION, UNSAVED_CUSTOM_GRADIENTS, absl_log_dropped,
    lines_dropped)

EXPORT_HINT = "export one with `python -m t2t_repro.exporter --output_dir=RUN` first"
SAVED_MODEL_FILE = EXPORT_FORMAT_FILES["saved_model"]
VARIABLES_INDEX = os.path.join("variables", "variables.index")  # the weights' table of contents

# What TensorFlow wraps a model's own error text in: a heading, where the failing node was
# defined (a traceback, or a line saying there is none), and the node and function names.
_GRAPH_HEADING = re.compile(r"^Graph execution error:\s*")
_DEFINED_AT = re.compile(r"Detected at node .*? \(most recent call last\):\n"
                         r"(?:<stack traces unavailable>\n|(?:[ \t].*\n|\n)*)")
_NODE_NAMES = re.compile(r"\s*\[\[\{\{node .*", re.DOTALL)
_FUNCTION_NAME = re.compile(r"\s*\[Op:[^\]]*\]\s*$")
_ASSERTION = re.compile(r"assertion failed: \[(.*?)\](?: \[|\n|$)", re.DOTALL)
# How the exporter's length check names the input (or target) at fault: by its index in the call.
_NUMBERED_INPUT = re.compile(r"(input|target) ([0-9]+) (?=has )")


class ExportNotFoundError(UserError, ValueError):
    """No version to serve in the export folder; the message says how to make one."""


class ModelInputError(ValueError):
    """The model rejected an input (tf.errors.InvalidArgumentError, e.g. one too long); the
    message is the model's own, without TensorFlow's graph noise."""

    def in_request(self, offset):
        """This error of a call on a request's instances from `offset` on, as the request sees
        it: the input the exporter's message names (`input I has N tokens ...`, I counted in
        the call) numbered in the request."""
        match = _NUMBERED_INPUT.match(str(self))
        if not match or not offset:
            return self
        return ModelInputError(f"{match[1]} {int(match[2]) + offset} {str(self)[match.end():]}")


class ModelOutOfMemoryError(MemoryError):
    """A call could not allocate the memory its instances need (TensorFlow's
    ResourceExhaustedError); the message names how many instances and what it could not
    allocate. Fewer instances at once may fit."""


class ServableNotFoundError(LookupError):
    """A model name or version this server does not serve (HTTP 404); TF Serving's text."""


def export_versions(export_dir):
    """{version: its folder's name} for the integer-named folders of `export_dir`, newest
    first; a name may have leading zeros (`00300`: version 300)."""
    if not os.path.isdir(export_dir):
        raise ExportNotFoundError(f"{export_dir} is not a folder; {EXPORT_HINT}.")
    names = sorted(name for name in os.listdir(export_dir)
                   if re.fullmatch(r"[0-9]+", name)
                   and os.path.isdir(os.path.join(export_dir, name)))
    if not names and os.path.exists(os.path.join(export_dir, SAVED_MODEL_FILE)):
        parent = os.path.dirname(os.path.abspath(export_dir))
        raise ExportNotFoundError(
            f"{export_dir} is one version of an export (it holds {SAVED_MODEL_FILE}); give the "
            f"folder of the versions, --export_dir={parent}.")
    if not names:
        raise ExportNotFoundError(
            f"{export_dir} holds no version (a folder <version>/{SAVED_MODEL_FILE}, the version "
            f"an integer); {EXPORT_HINT}.")
    versions = {}
    for name in names:
        versions.setdefault(int(name), []).append(name)
    return dict(sorted(versions.items(), reverse=True))


def newest_version(export_dir):
    """(version, its folder) of the newest version in `export_dir`; ExportNotFoundError when
    two folders name that number (`300` and `0300`), as it is not clear which to serve."""
    version, names = next(iter(export_versions(export_dir).items()))
    if len(names) > 1:
        folders = " and ".join(os.path.join(export_dir, name) for name in names)
        raise ExportNotFoundError(f"{folders} are both version {version}, the newest; remove or "
                                  f"renumber all but one of them.")
    return version, os.path.join(export_dir, names[0])


def check_saved_model(version_dir):
    """ExportNotFoundError when `version_dir` holds no SavedModel, naming what it holds
    instead where that is a CTranslate2 model (the other export format), or one without its
    weights (`variables/`: TensorFlow would speak of devices)."""
    if os.path.exists(os.path.join(version_dir, SAVED_MODEL_FILE)):
        if not os.path.exists(os.path.join(version_dir, VARIABLES_INDEX)):
            raise ExportNotFoundError(
                f"{version_dir}, the newest version, holds a SavedModel without its weights "
                f"({VARIABLES_INDEX}), as a copy cut short would; export it again.")
        return
    model_file = EXPORT_FORMAT_FILES["ctranslate2"]
    found = (f"a CTranslate2 model ({model_file}), which CTranslate2 serves"
             if os.path.exists(os.path.join(version_dir, model_file)) else "no SavedModel")
    raise ExportNotFoundError(f"{version_dir}, the newest version, holds {found}; {EXPORT_HINT} "
                              f"(--export_format=saved_model, the default).")


def read_signature_defs(version_dir):
    """The SignatureDefMap of the SavedModel in `version_dir` as TF Serving's metadata writes
    it: proto field names, default values included, int64 as strings."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, SAVED_MODEL_FILE), "rb") as f:
        saved_model.ParseFromString(f.read())
    signatures = saved_model.meta_graphs[0].signature_def
    return {name: json_format.MessageToDict(signature, preserving_proto_field_name=True,
                                            always_print_fields_with_no_presence=True)
            for name, signature in signatures.items()}


def model_error_text(message):
    """A model's error without TensorFlow's graph noise: the message of a failed assertion
    (e.g. the input limit), else the message's own text."""
    assertion = _ASSERTION.search(message)
    if assertion:
        return assertion.group(1)
    for noise in (_GRAPH_HEADING, _DEFINED_AT, _NODE_NAMES, _FUNCTION_NAME):
        message = noise.sub("", message)
    return message.strip()


def json_output(value):
    """A model's output (an array, or one of its items) for JSON: nested lists, strings as
    text, a float32 with the fewest digits that read back as that float32 (as TF Serving
    writes it: 0.2, not 0.20000000298023224)."""
    if isinstance(value, np.ndarray):
        return [json_output(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.float32):
        return float(str(value))
    return value.item()


class ServedModel:
    """One loaded version: its predict signatures (each taking string inputs [batch]) and the
    signature defs its metadata shows."""

    def __init__(self, name, version, signatures, signature_defs):
        self.name = name
        self.version = version
        self.signatures = signatures
        self.signature_defs = signature_defs

    def input_names(self, signature_name):
        _, inputs = self.signatures[signature_name].structured_input_signature
        return sorted(inputs)

    def output_names(self, signature_name):
        return sorted(self.signatures[signature_name].structured_outputs)

    def predict(self, signature_name, instances):
        """Runs the signature on `instances` ({input name: bytes} each) as one batch; returns
        {output name: JSON value} for each instance. An input the model rejects raises
        ModelInputError, a call out of memory ModelOutOfMemoryError."""
        inputs = {name: tf.constant([instance[name] for instance in instances], tf.string)
                  for name in self.input_names(signature_name)}
        try:
            outputs = self.signatures[signature_name](**inputs)
        except tf.errors.InvalidArgumentError as error:
            raise ModelInputError(model_error_text(error.message)) from None
        except Exception as error:
            if not out_of_memory.is_out_of_memory(error):
                raise
            count = f"{len(instances)} instance{'s' if len(instances) > 1 else ''}"
            raise ModelOutOfMemoryError(f"The model ran out of memory on {count} "
                                        f"({out_of_memory.allocation(error)})") from None
        columns = {name: json_output(outputs[name].numpy())
                   for name in self.output_names(signature_name)}
        return [{name: column[row] for name, column in columns.items()}
                for row in range(len(instances))]


def load_latest(export_dir, model_name):
    """The newest version under `export_dir`, loaded and served as `model_name`."""
    import tensorflow_text  # noqa: F401  (registers the ops of the exported text codec)

    version, version_dir = newest_version(export_dir)
    check_saved_model(version_dir)
    with (lines_dropped(SENTENCEPIECE_IDENTITY_NORMALIZATION),
          absl_log_dropped(UNSAVED_CUSTOM_GRADIENTS)):
        signatures = dict(tf.saved_model.load(version_dir).signatures)
    return ServedModel(model_name, version, signatures, read_signature_defs(version_dir))


class ModelStore:
    """The models this server serves (one, in one version) looked up as TF Serving does."""

    def __init__(self, model):
        self.model = model

    def find(self, name, version=None):
        """The model for a predict or metadata request; TF Serving's 404 text otherwise."""
        if name == self.model.name and version in (None, self.model.version):
            return self.model
        wanted = f"Latest({name})" if version is None else f"Specific({name}, {version})"
        raise ServableNotFoundError(f"Servable not found for request: {wanted}")

    def version_status(self, name, version=None):
        """The GetModelStatus answer for `name` (all versions) or one version of it."""
        if name != self.model.name:
            raise ServableNotFoundError(f"Could not find any versions of model {name}")
        if version not in (None, self.model.version):
            raise ServableNotFoundError(f"Could not find version {version} of model {name}")
        return {"model_version_status": [{
            "version": str(self.model.version),
            "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""},
        }]}
