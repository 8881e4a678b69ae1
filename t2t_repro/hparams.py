"""HParams: named, typed hyperparameters with tensor2tensor's strict `k=v,k2=v2` overrides.

The type of each hyperparameter is fixed by its first value (int, float, bool or str). An
override string may only name existing hyperparameters, each once, with a value of that type
(an int is accepted where a float is expected). The resolved values round-trip through JSON so a
run can be reloaded from `output_dir/hparams.json`.
"""

import difflib
import json
import math
import os
import traceback

from t2t_repro.utils.atomic_files import write_text_atomically
from t2t_repro.errors import UserError
from t2t_repro.names import HPARAMS_FILENAME

_TYPES = (bool, int, float, str)

# The set every registered set starts from: a saved hparam it also has must have its type.
REFERENCE_SET = "transformer_base"

# Hparams added after runs were first saved, each with the value that computes what those runs
# computed (the paper's choice, which every set of hparams/transformer.py has): a saved run
# without one was trained with that value (`with_added_model_hparams`). The loss's chunk size
# changes no result, only the training step's memory.
ADDED_MODEL_HPARAMS = {
    "ffn_activation": "relu",
    "attention_bias": False,
    "sinusoid_layout": "interleaved",
    "logits_bias": False,
    "zero_pad_embedding": False,
    "encoder_input_bias": False,
    "fused_attention": False,
    "loss_chunk_tokens": 1024,
}


class HParamsError(UserError, ValueError):
    """A bad hyperparameter name, value or override string; the message names the key."""


class MissingHParamError(HParamsError, AttributeError):
    """An hparam read that the HParams lack: a run's hparams.json edited by hand, say. An
    AttributeError too, so that `getattr(hparams, name, default)` gives the default."""

    def __init__(self, key):
        super().__init__(
            f"hparam '{key}' is missing from the hparams in use (a run's hparams.json edited by "
            f"hand?): restore the file from a copy, or delete it and give the run's "
            f"--hparams_set and --hparams again (its checkpoints are kept).")


def as_override(value):
    """`value` as an override string writes it: a boolean as true or false."""
    return str(value).lower() if isinstance(value, bool) else value


def differences_text(hparams, other, theirs, names=None):
    """`name=<value in hparams> (<theirs> <value in other>), ...` for `names` (default: every
    hparam in which the two differ), values as overrides write them, "not set" where one lacks
    the hparam."""
    def value(values, name):
        return as_override(values[name]) if name in values else "not set"

    return ", ".join(f"{name}={value(hparams.values(), name)} ({theirs} "
                     f"{value(other.values(), name)})"
                     for name in (hparams.differences(other) if names is None else names))


def at_least(lowest, note=""):
    """A range for `check_ranges`: values >= `lowest`; `note` says what the lowest means."""
    return (lambda value: value >= lowest), f"at least {lowest}{note}"


def one_of(choices):
    """A range for `check_ranges`: one of the values `choices`."""
    return (lambda value: value in choices), f"one of {', '.join(map(str, choices))}"


ABOVE_ZERO = ((lambda value: value > 0), "above 0")
A_FRACTION = ((lambda value: 0 <= value < 1), "at least 0 and below 1")


def check_ranges(hparams, ranges, kind="hparam"):
    """HParamsError naming the first hparam of `ranges` ({name: (test, what the value must
    be)}) whose value fails its test; names `hparams` lacks are skipped. `kind` names the
    hparams in the message ("data hparam", ...)."""
    for name, (test, requirement) in ranges.items():
        if name in hparams and not test(getattr(hparams, name)):
            raise HParamsError(f"{kind} {name}={getattr(hparams, name)!r} must be "
                               f"{requirement}.")


def _parse_value(key, text, expected_type, kind="hparam"):
    text = text.strip()
    if expected_type is bool:
        lowered = text.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise HParamsError(f"{kind} '{key}' expects a bool (true/false), got '{text}'.")
    if expected_type is str:
        return text
    try:
        value = int(text) if expected_type is int else float(text)
    except ValueError:
        raise HParamsError(
            f"{kind} '{key}' expects {expected_type.__name__}, got '{text}'."
        ) from None
    if not math.isfinite(value):
        raise HParamsError(f"{kind} '{key}' expects a finite number, got '{text}'.")
    return value


def _unknown_hparam_message(key, names, kind="hparam"):
    """Says `key` is unknown and lists the valid names, the closest first. Only a model's
    hparams come from a set a user may extend (`add_hparam`); data and decode hparams are
    the problem's and the search's own."""
    names = sorted(names)
    extend = kind == "hparam"
    if names:
        closest = difflib.get_close_matches(key, names, n=len(names), cutoff=0.0)
        message = f"Unknown {kind} '{key}'. Valid {kind}s (closest first): {', '.join(closest)}."
    else:
        message = (f"Unknown {kind} '{key}': there are no {kind}s to set here"
                   f"{'.' if extend else '; leave it out.'}")
    if not extend:
        return message
    return (f"{message} Fix the name, or define the hparam in its set with "
            f"add_hparam(name, value) first: overrides and set_hparam only change existing "
            f"hparams.")


class HParams:
    """A set of typed hyperparameters, readable as attributes (`hparams.hidden_size`)."""

    def __init__(self, **values):
        object.__setattr__(self, "_values", {})
        for key, value in values.items():
            self.add_hparam(key, value)

    def add_hparam(self, key, value):
        if key in self._values:
            raise HParamsError(f"hparam '{key}' already exists; use set_hparam to change it.")
        if type(value) not in _TYPES:
            raise HParamsError(
                f"hparam '{key}' has unsupported type {type(value).__name__}; "
                f"use one of bool, int, float, str."
            )
        self._values[key] = value

    def set_hparam(self, key, value):
        """Sets an existing hyperparameter, checking its type (int is accepted for float)."""
        expected = type(self._get_existing(key))
        if expected is float and type(value) is int:
            value = float(value)
        if type(value) is not expected:
            raise HParamsError(
                f"hparam '{key}' expects {expected.__name__}, got {type(value).__name__} "
                f"({value!r})."
            )
        self._values[key] = value

    def override_from_string(self, overrides, kind="hparam"):
        """Applies `"k=v,k2=v2"`; unknown keys, duplicates and mistyped values are errors,
        which name the hparams as `kind` ("data hparam", ...)."""
        parsed = {}
        for item in filter(None, (part.strip() for part in overrides.split(","))):
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise HParamsError(f"{kind} override '{item}' is not of the form name=value.")
            if key in parsed:
                raise HParamsError(f"{kind} '{key}' is given twice in '{overrides}'.")
            parsed[key] = _parse_value(key, text, type(self._get_existing(key, kind)), kind)
        # Applied only once every item is valid, so a bad string changes nothing.
        self._values.update(parsed)
        return self

    def _get_existing(self, key, kind="hparam"):
        if key not in self._values:
            raise HParamsError(_unknown_hparam_message(key, self._values, kind))
        return self._values[key]

    def __getattr__(self, key):
        values = object.__getattribute__(self, "_values")
        if key in values:
            return values[key]
        raise MissingHParamError(key)

    def __setattr__(self, key, value):
        self.set_hparam(key, value)

    def __contains__(self, key):
        return key in self._values

    def __eq__(self, other):
        return isinstance(other, HParams) and self._values == other._values

    def values(self):
        return dict(self._values)

    def differences(self, other):
        """Names of hyperparameters whose values differ from `other` (or exist in one only)."""
        keys = set(self._values) | set(other._values)
        return sorted(k for k in keys if self._values.get(k) != other._values.get(k))

    def to_json(self):
        return json.dumps(self._values, indent=2, sort_keys=True)

    def __repr__(self):
        return f"HParams({', '.join(f'{k}={v!r}' for k, v in sorted(self._values.items()))})"


def save(hparams, output_dir):
    """Writes `output_dir/hparams.json`, atomically."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, HPARAMS_FILENAME)
    write_text_atomically(path, hparams.to_json() + "\n")
    return path


def load(output_dir):
    """Reads the hparams a run saved in `output_dir`, or None if it saved none.

    Raises HParamsError naming the file when it is not a JSON object of hparams."""
    path = os.path.join(output_dir, HPARAMS_FILENAME)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:  # bytes: json.loads decodes them inside from_json's check
        return from_json(
            f.read(), f"{path} is not a readable hparams file",
            "Restore it from a copy, or delete it and pass the run's --hparams_set and "
            "--hparams again (checkpoints are kept).")


def from_json(text, unreadable, fix):
    """The HParams a JSON object of them in `text` (str, or UTF-8 bytes) holds; else
    HParamsError "<unreadable> (<why>). <fix>"."""
    try:
        values = json.loads(text)
        if not isinstance(values, dict):
            raise TypeError(f"a JSON {type(values).__name__}, not an object")
        return HParams(**_with_reference_types(values))
    except (ValueError, TypeError) as error:  # JSONDecodeError and HParamsError included
        raise HParamsError(f"{unreadable} ({error}). {fix}") from None


def _with_reference_types(values):
    """`values` (read from JSON) with each hparam the reference set `transformer_base` also
    has checked to be of its type there (a whole number is taken for a float); HParamsError
    naming the first that is not, since a hand-edited "4" or 64.0 would fail deep inside the
    model."""
    reference = create_hparams(REFERENCE_SET).values()
    checked = {}
    for name, value in sorted(values.items()):
        expected = type(reference.get(name, value))
        if expected is float and type(value) is int:
            value = float(value)
        elif type(value) is not expected:
            raise HParamsError(
                f"hparam '{name}' holds {value!r} of type {type(value).__name__}; "
                f"{REFERENCE_SET}'s is of type {expected.__name__}")
        checked[name] = value
    return checked


def with_added_model_hparams(saved, current):
    """`saved` (a run's hparams) with each `ADDED_MODEL_HPARAMS` hparam that `current` has and
    it lacks at the value that run was trained with, so that a run older than the hparam
    compares equal to a set that keeps the paper's value."""
    added = {name: value for name, value in ADDED_MODEL_HPARAMS.items()
             if name in current and name not in saved}
    return HParams(**{**added, **saved.values()})


def create_hparams(hparams_set, overrides=""):
    """The registered set `hparams_set` with the override string applied."""
    from t2t_repro import registry

    if not isinstance(overrides or "", str):
        raise HParamsError(f"overrides={overrides!r}: give them as a string, "
                           f"'name=value,name2=value2', as --hparams takes them.")
    hparams = _called_set(hparams_set, registry.hparams_sets[hparams_set])
    return hparams.override_from_string(overrides or "")


def _called_set(name, function):
    """The HParams the set `function` (registered as `name`, perhaps a --t2t_usr_dir's) builds;
    an HParamsError naming the set and the line of its file when it raises or returns anything
    else."""
    code = function.__code__
    try:
        hparams = function()
    except Exception as error:  # noqa: BLE001 - a set's own mistake, reported at its line
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                 if frame.filename == code.co_filename]
        raise HParamsError(
            f"hparams set {name} raised {type(error).__name__}: {error} (at "
            f"{code.co_filename}:{lines[-1] if lines else code.co_firstlineno}); fix the "
            f"set.") from error
    if not isinstance(hparams, HParams):
        raise HParamsError(
            f"hparams set {name} ({code.co_filename}:{code.co_firstlineno}) returned "
            f"{'None' if hparams is None else 'a ' + type(hparams).__name__}, not HParams; end "
            f"it with the HParams it builds (return hparams).")
    return hparams
