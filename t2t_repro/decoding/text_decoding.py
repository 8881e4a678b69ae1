"""Decoding many sentences: decode hparams, length-sorted batches, text in and text out."""

import numpy as np

from t2t_repro.decoding.alignments import ALIGNMENT_DEFAULTS, add_alignment_hparams
from t2t_repro.decoding.sampling import create_sampler
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import HParamsError, as_override, at_least, check_ranges
from t2t_repro.names import PAD_ID


def create_decode_hparams(problem, overrides=""):
    """The problem's beam search settings with `"name=value,..."` overrides (strict), plus
    `return_beams` (write every hypothesis with its score, not only the best), the alignment
    hparams (`alignments.add_alignment_hparams`) and tensor2tensor's sampling hparams:
    `sampling_method` ("argmax": beam or greedy search; "random": sample, beam_size 1),
    `sampling_temp`, `sampling_keep_top_k` (0: all tokens) and `sampling_keep_top_p` (nucleus
    sampling; 1.0: all tokens)."""
    hparams = problem.default_decode_hparams()
    hparams.add_hparam("return_beams", OUTPUT_LINE_DEFAULTS["return_beams"])
    add_alignment_hparams(hparams)
    for name, value in SAMPLING_DEFAULTS.items():
        hparams.add_hparam(name, value)
    hparams.override_from_string(overrides or "", "decode hparam")
    check_ranges(hparams, SEARCH_RANGES, "decode hparam")
    check_switched_on(hparams, "sampling_method=random", hparams.sampling_method != "argmax",
                      SAMPLING_DEFAULTS)
    return hparams


def changed_settings(hparams, defaults):
    """`name=value` for each hparam of `defaults` ({name: default value}) that `hparams` sets
    to another value, in the order of `defaults`, written as --decode_hparams takes it."""
    return [f"{name}={as_override(getattr(hparams, name))}" for name, default in defaults.items()
            if getattr(hparams, name) != default]


def unread_settings(problem, hparams, reads):
    """`changed_settings` of the decode hparams `hparams` (of `problem`) other than the names
    `reads`: what a command that reads only those would ignore."""
    return changed_settings(hparams, {
        name: default for name, default in create_decode_hparams(problem).values().items()
        if name not in reads})


def decode_hparams_read_by(problem, overrides, reads, reader, what_it_reads):
    """`create_decode_hparams(problem, overrides)`, where a setting of a decode hparam other
    than `reads` is an HParamsError naming `reader` and `what_it_reads`, rather than ignored
    by a command that does not read it."""
    hparams = create_decode_hparams(problem, overrides)
    unread = unread_settings(problem, hparams, reads)
    if unread:
        raise HParamsError(f"{reader} does not read decode hparam {', '.join(unread)}: it "
                           f"reads {what_it_reads}.")
    return hparams


def check_switched_on(hparams, switch, on, defaults):
    """HParamsError for hparams of `defaults` set away from their defaults while `switch` is
    not `on`: a search would run as if they were not there."""
    unused = [] if on else changed_settings(hparams, defaults)
    if unused:
        raise HParamsError(f"decode hparam {', '.join(unused)} applies only with {switch}; "
                           f"add {switch} to --decode_hparams, or leave it out.")


def check_alignments_asked(hparams):
    """HParamsError for alignment hparams set without return_alignments, where the decoder
    writes no alignments (a CTranslate2 conversion reads them on their own)."""
    check_switched_on(hparams, "return_alignments=true", hparams.return_alignments,
                      ALIGNMENT_DEFAULTS)


# The values a search runs with (`hparams.check_ranges`); the sampling ones are `Sampler`'s.
SEARCH_RANGES = {"beam_size": at_least(1, " (1: greedy)"),
                 "alpha": at_least(0, " (0: no length penalty)"),
                 "extra_length": at_least(0, " (0: outputs at most the source's length)"),
                 "batch_size": at_least(1, " sentence")}


SAMPLING_DEFAULTS = {"sampling_method": "argmax", "sampling_temp": 1.0,
                     "sampling_keep_top_k": 0, "sampling_keep_top_p": 1.0}
# What shapes the decoder's output lines beyond the best translation, off by default.
OUTPUT_LINE_DEFAULTS = {"return_beams": False, **ALIGNMENT_DEFAULTS}


def create_search(model, decode_hparams, seed=None, **kwargs):
    """A TransformerBeamSearch configured by `decode_hparams`; `seed` seeds sampling (kwargs:
    its other options). Raises HParamsError for sampling settings it cannot run."""
    return TransformerBeamSearch(
        model,
        beam_size=decode_hparams.beam_size,
        alpha=decode_hparams.alpha,
        extra_length=decode_hparams.extra_length,
        sampler=create_sampler(decode_hparams),
        seed=seed,
        **kwargs,
    )


def _padded(id_lists):
    width = max(len(ids) for ids in id_lists)
    batch = np.full((len(id_lists), width), PAD_ID, dtype=np.int32)
    for row, ids in enumerate(id_lists):
        batch[row, : len(ids)] = ids
    return batch


def decode_id_lists(search, id_lists, batch_size, progress=None, prefix_lists=None):
    """Each source id list's hypotheses, `(ids [beam, length], scores [beam])`, best first;
    ids include EOS when produced and are 0-padded. `prefix_lists`, one target id list per
    source (empty: none), forces each output's first tokens.

    Sentences are decoded in batches of `batch_size` sorted by length, so a batch pads
    little and stops early together, then put back in their original order. `progress(done,
    total)` is called after each batch.
    """
    order = sorted(range(len(id_lists)), key=lambda index: len(id_lists[index]))
    outputs = [None] * len(id_lists)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        sources = _padded([id_lists[index] for index in indices])
        if prefix_lists is None:
            output = search(sources)
        else:
            output = search(sources, target_prefix=_padded(
                [prefix_lists[index] for index in indices]))
        for index, ids, scores in zip(indices, output.ids, output.scores):
            outputs[index] = (ids, scores)
        if progress is not None:
            progress(min(start + batch_size, len(order)), len(order))
    return outputs


def input_limit(model, max_input_tokens=None):
    """The most source tokens (EOS included) the decoder and an export take: `max_input_tokens`,
    or the model's `hparams.max_length`; never more than a learned position table's rows."""
    limit = max_input_tokens or model.hparams.max_length
    if model.max_positions is not None and limit > model.max_positions:
        raise ConfigurationError(
            f"max_input_tokens={limit} is more than the learned position table's "
            f"max_length={model.max_positions} rows; use at most {model.max_positions}."
        )
    return limit


def decode_encoded(problem, search, id_lists, batch_size, progress=None, prefix_lists=None):
    """Sources already encoded (`problem.encode`) -> each one's hypotheses as `[(text, score),
    ...]`, best first; lets a caller reject unencodable input before decoding anything.
    `prefix_lists`: target prefixes (`problem.encode_target_prefix`), one per source."""
    outputs = decode_id_lists(search, id_lists, batch_size, progress, prefix_lists)
    return [[(problem.decode(ids), float(score)) for ids, score in zip(beams, scores)]
            for beams, scores in outputs]


class DecodeEvaluation:
    """Beam-decodes the first `num_examples` eval examples (-1: all) and scores them with the
    problem's `decode_metrics` (sacreBLEU for translation, bracket F1 for parsing).

    The examples are read once; the compiled search is built on first use and reused. A model
    training under a mixed-precision policy decodes through a float32 copy of its weights, so
    that the figures are the decoder's (which always decodes in float32).
    """

    def __init__(self, problem, decode_hparams, num_examples):
        from t2t_repro.data.problem import EVAL

        written = changed_settings(decode_hparams, OUTPUT_LINE_DEFAULTS)
        if written:
            raise HParamsError(
                f"decode hparam {', '.join(written)} shapes the decoder's output lines; an "
                f"evaluation scores each example's best decode: leave it out of the trainer's "
                f"--decode_hparams.")
        problem.check_decode_metrics()
        self.problem = problem
        self.decode_hparams = decode_hparams
        pairs = problem.first_examples(EVAL, num_examples)
        self.input_ids = [inputs for inputs, _ in pairs]
        self.input_texts = [problem.decode_inputs(inputs) for inputs, _ in pairs]
        self.target_texts = [problem.decode(targets) for _, targets in pairs]
        self._search = None
        self._float32_copy = None

    def decode(self, model):
        """`model`'s decoded texts of the examples."""
        model = self._in_float32(model)
        if self._search is None or self._search.model is not model:
            self._search = create_search(model, self.decode_hparams)
        outputs = decode_id_lists(self._search, self.input_ids, self.decode_hparams.batch_size)
        return [self.problem.decode(beams[0]) for beams, _ in outputs]

    def _in_float32(self, model):
        """`model` if it computes in float32, else a float32 copy holding its current weights
        (made once, its weights refreshed at every call)."""
        if model.dtype_policy.name == "float32":
            return model
        if self._float32_copy is None or self._float32_copy[0] is not model:
            config = dict(model.get_config(), dtype="float32")
            self._float32_copy = (model, type(model).from_config(config).build_weights())
        copy = self._float32_copy[1]
        copy.set_weights(model.get_weights())
        return copy

    def score(self, decodes):
        """`{metric: value}` of decoded texts of the examples, in their order."""
        return self.problem.decode_metrics(self.input_texts, decodes, self.target_texts)

    def __call__(self, model):
        """`{metric: value}` of `model`'s decodes."""
        return self.score(self.decode(model))

    def exact_match_report(self, decodes, title, shown=5):
        """Lines of text: the first `shown` examples, each input and target beside its decode
        marked ok or WRONG, then `title` and how many of all the decodes equal their targets
        exactly."""
        lines = []
        for source, target, output in list(zip(self.input_texts, self.target_texts,
                                               decodes))[:shown]:
            lines += [f"  input:  {source}", f"  target: {target}",
                      f"  output: {output}  [{'ok' if output == target else 'WRONG'}]"]
        right = sum(output == target for output, target in zip(decodes, self.target_texts))
        lines.append(f"{title}: {right}/{len(decodes)} held-out sequences exactly right "
                     f"({right / max(len(decodes), 1):.1%}).")
        return "\n".join(lines)
