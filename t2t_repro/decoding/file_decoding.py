"""Decoding text lines with a trained model: a file checked before any decoding, or a stream
of lines typed one at a time (`python -m t2t_repro.decoder` turns its flags into these calls).

A blank line (empty, or ASCII whitespace only) translates to an empty line with score 0,
without decoding, as an exported model answers it. Output lines are the best hypothesis, or
with the decode hparam `return_beams` every hypothesis and its score
(`utils.text_lines.beams_line`); with `return_alignments`, followed by a tab and the best
hypothesis's alignment (`decoding.alignments`).
"""

import sys
import time

from t2t_repro.errors import ConfigurationError
from t2t_repro.utils.atomic_files import write_text_atomically
from t2t_repro.utils.text_lines import (
    TextLinesError, beams_line, decode_line, numbered_raw_lines, output_field, read_aligned_lines,
    read_lines)


class ProgressPrinter:
    """`(done, total)` progress lines on `stream` (default stderr): sentences and sentences
    per second, `verb` ("decoded", "scored") saying what was done to them."""

    def __init__(self, stream=None, verb="decoded"):
        self.stream = sys.stderr if stream is None else stream
        self.verb = verb
        self.start = time.monotonic()

    def __call__(self, done, total):
        elapsed = time.monotonic() - self.start
        print(f"{self.verb} {done}/{total} sentences ({done / max(elapsed, 1e-9):.1f}/s, "
              f"{elapsed:.0f} s)", file=self.stream, flush=True)


# What tf.strings.strip removes: a line of only these is blank, here as in an exported model.
_ASCII_WHITESPACE = " \t\n\v\f\r"


def is_blank(text):
    """Whether `text` is empty or ASCII whitespace only."""
    return not text.strip(_ASCII_WHITESPACE)


def blank_beams(decode_hparams):
    return [("", 0.0)] * decode_hparams.beam_size


def decode_output_line(beams, return_beams):
    """The best hypothesis, or with `return_beams` every one and its score, tab-separated;
    always one line (`utils.text_lines.output_field`)."""
    return beams_line(beams) if return_beams else output_field(beams[0][0])


def encode_lines(problem, lines, path, encode=None):
    """`encode` (default `problem.encode`) of every line, checked before any decoding: a line
    the problem cannot encode is a ConfigurationError naming `path`, its line number and what
    is accepted."""
    from t2t_repro.data.problem import UnencodableInputError

    encode = encode or problem.encode
    id_lists, bad = [], []
    for line_number, line in enumerate(lines, 1):
        try:
            id_lists.append(encode(line))
        except UnencodableInputError as error:
            bad.append((line_number, error))
    if bad:
        line_number, error = bad[0]
        others = f" (and {len(bad) - 1} more lines)" if len(bad) > 1 else ""
        raise ConfigurationError(f"{path} line {line_number}{others}: {error}")
    return id_lists


def check_source_length(model, ids, max_input_tokens):
    """Raises ValueError when the source `ids` (EOS included) do not fit the model (a learned
    position table of max_length rows) or are more than `max_input_tokens`: decoding a source
    longer than the model was trained on is slow, poor, and can exhaust the memory."""
    model.check_length(len(ids), "source")
    if len(ids) > max_input_tokens:
        raise ValueError(f"the source has {len(ids)} tokens (EOS included), more than the "
                         f"decoder takes: max_input_tokens={max_input_tokens} (default: hparam "
                         f"max_length). Split or shorten it, or raise --max_input_tokens.")


def check_source_lengths(model, id_lists, path, max_input_tokens):
    """Raises ConfigurationError naming `path` and the first line whose source is too long
    (`check_source_length`), before any decoding."""
    for line_number, ids in enumerate(id_lists, 1):
        try:
            check_source_length(model, ids, max_input_tokens)
        except ValueError as error:
            raise ConfigurationError(f"{path} line {line_number}: {error}") from None


def read_sources(problem, source_path, reference_path=None):
    """(source lines, their encodings, the reference lines or None), read and checked before
    a model is loaded: the references must be aligned with the sources line by line."""
    if reference_path:
        problem.check_decode_metrics()
        sources, references = read_aligned_lines(source_path, "--decode_from_file",
                                                 reference_path, "--decode_reference")
    else:
        sources, references = read_lines(source_path, "--decode_from_file"), None
    return sources, encode_lines(problem, sources, source_path), references


def decoded_with_alignments(problem, search, id_lists, batch_size, aligner, progress=None,
                            prefix_lists=None):
    """`(hypotheses, alignments)` of encoded sources: each one's `[(text, score), ...]`, best
    first (`text_decoding.decode_encoded`), and the Pharaoh line of its best hypothesis."""
    from t2t_repro.decoding.text_decoding import decode_id_lists

    outputs = decode_id_lists(search, id_lists, batch_size, progress, prefix_lists)
    hypotheses = [[(problem.decode(ids), float(score)) for ids, score in zip(beams, scores)]
                  for beams, scores in outputs]
    return hypotheses, aligner(id_lists, [beams[0] for beams, _ in outputs], batch_size)


def with_alignment(line, alignment):
    """An output line followed by a tab and its Pharaoh alignment."""
    return f"{line}\t{alignment}"


def read_target_prefixes(problem, path, sources):
    """The target prefixes of `path`, one line per line of `sources` (an empty line: none),
    encoded without EOS (`problem.encode_target_prefix`); a ConfigurationError when it has
    another number of lines, or a line cannot be encoded. A blank source's prefix is none:
    that source is answered by an empty line, never decoded."""
    lines = read_lines(path, "--target_prefix_file")
    if len(lines) != len(sources):
        raise ConfigurationError(f"--target_prefix_file has {len(lines)} lines but "
                                 f"--decode_from_file has {len(sources)}; they must be aligned "
                                 f"line by line (an empty line: no prefix).")
    lines = ["" if is_blank(source) else line for source, line in zip(sources, lines)]
    return encode_lines(problem, lines, path, problem.encode_target_prefix)


def check_prefix_lengths(search, id_lists, prefix_lists, path):
    """Raises ConfigurationError naming `path`'s first line whose prefix has more pieces than
    its source's maximum output length (`search.max_lengths`), before any decoding."""
    for line_number, (ids, prefix) in enumerate(zip(id_lists, prefix_lists), 1):
        limit = int(search.max_lengths([ids])[0])
        if len(prefix) > limit:
            raise ConfigurationError(
                f"{path} line {line_number}: the prefix has {len(prefix)} pieces, more than "
                f"the {limit} its source may be translated into; shorten it or raise the "
                f"decode hparam extra_length.")


def sampling_note(decode_hparams):
    """", sampling_method=random, ..." for a sampling decode, else ""."""
    if decode_hparams.sampling_method == "argmax":
        return ""
    return (f", sampling_method={decode_hparams.sampling_method}, "
            f"sampling_temp={decode_hparams.sampling_temp}, "
            f"sampling_keep_top_k={decode_hparams.sampling_keep_top_k}, "
            f"sampling_keep_top_p={decode_hparams.sampling_keep_top_p}")


def decode_file(problem, search, decode_hparams, sources, id_lists, references=None,
                output_path=None, stdout=None, stderr=None, aligner=None, prefix_lists=None):
    """Decodes the non-blank `sources` (encoded as `id_lists`) in batches of
    `decode_hparams.batch_size`, with progress on `stderr`; writes the output lines to
    `output_path` (atomically), else prints them on `stdout`; with `references`, prints the
    problem's scores. With an `alignments.Aligner`, each line ends with a tab and the best
    hypothesis's alignment (a blank source's is empty). `prefix_lists`: each source's target
    prefix ids (a blank source still gives an empty line). Returns the output lines."""
    from t2t_repro.decoding.text_decoding import decode_encoded

    stderr = sys.stderr if stderr is None else stderr
    blank = [is_blank(source) for source in sources]
    if any(blank):  # progress counts the sentences decoded, "Wrote" every line
        print(f"{sum(blank)} of {len(blank)} lines are blank: each is answered by an empty "
              f"line, not decoded.", file=stderr)
    to_decode = [ids for ids, skip in zip(id_lists, blank) if not skip]
    prefixes = (None if prefix_lists is None else
                [prefix for prefix, skip in zip(prefix_lists, blank) if not skip])
    progress = ProgressPrinter(stderr)
    if aligner is None:
        decoded = decode_encoded(problem, search, to_decode, decode_hparams.batch_size, progress,
                                 prefixes)
    else:
        decoded, alignments = decoded_with_alignments(
            problem, search, to_decode, decode_hparams.batch_size, aligner, progress, prefixes)
    decoded = iter(decoded)
    beams = [blank_beams(decode_hparams) if skip else next(decoded) for skip in blank]
    lines = [decode_output_line(hypotheses, decode_hparams.return_beams) for hypotheses in beams]
    if aligner is not None:
        alignments = iter(alignments)
        lines = [with_alignment(line, "" if skip else next(alignments))
                 for line, skip in zip(lines, blank)]
    write_output_lines(lines, output_path, "decodes", stdout, stderr)
    if references is not None:
        best = [hypotheses[0][0] for hypotheses in beams]
        print("\n".join(problem.decode_report(sources, best, references)), file=stdout)
    return lines


def write_output_lines(lines, output_path, what, stdout=None, stderr=None):
    """`lines` (one an input) written whole to `output_path`, saying so on `stderr` as `what`
    ("decodes"), or else printed on `stdout`, one each: no input, no line."""
    if output_path:
        write_text_atomically(output_path, "".join(line + "\n" for line in lines))
        print(f"Wrote {len(lines)} {what} to {output_path}.", file=stderr)
    else:
        print("".join(line + "\n" for line in lines), end="", file=stdout)


def decode_interactively(problem, search, decode_hparams, max_input_tokens, stdin=None,
                         stdout=None, stderr=None, aligner=None):
    """Decodes `stdin` (default sys.stdin; its bytes are read, split as files are) line by
    line, prompting on `stderr` when it is a terminal; a line that is not UTF-8, that the
    problem cannot encode, or longer than the model or `max_input_tokens` takes, is reported
    on `stderr` and answered as a blank line is, so that the output keeps one line an input.
    With an `alignments.Aligner`, each line ends with a tab and its alignment."""
    from t2t_repro.data.problem import UnencodableInputError
    from t2t_repro.decoding.text_decoding import decode_encoded

    stdin = sys.stdin if stdin is None else stdin
    stderr = sys.stderr if stderr is None else stderr
    interactive = stdin.isatty()
    if interactive:
        print("Type a sentence and press Enter (Ctrl-D to end).", file=stderr)
    lines = numbered_raw_lines(stdin.buffer)
    while True:
        if interactive:
            print("> ", end="", file=stderr, flush=True)
        line_number, raw = next(lines, (None, None))
        if raw is None:
            return
        ids = None
        try:
            line = decode_line(raw, line_number, "stdin")
            if not is_blank(line):
                ids = problem.encode(line)
                check_source_length(search.model, ids, max_input_tokens)
        except (TextLinesError, UnencodableInputError, ValueError) as error:
            print(f"error: stdin line {line_number} skipped: {error}", file=stderr, flush=True)
            ids = None
        if ids is None:
            output = decode_output_line(blank_beams(decode_hparams), decode_hparams.return_beams)
            print(output if aligner is None else with_alignment(output, ""), file=stdout,
                  flush=True)
            continue
        if aligner is None:
            beams = decode_encoded(problem, search, [ids], batch_size=1)[0]
            print(decode_output_line(beams, decode_hparams.return_beams), file=stdout, flush=True)
            continue
        (beams,), (alignment,) = decoded_with_alignments(problem, search, [ids], 1, aligner)
        print(with_alignment(decode_output_line(beams, decode_hparams.return_beams), alignment),
              file=stdout, flush=True)
