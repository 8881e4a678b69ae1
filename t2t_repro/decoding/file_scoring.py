"""Scoring a file of given translations (`python -m t2t_repro.decoder --score_file=F`): each
line `source<TAB>target`, checked and encoded before any scoring; one output line per input,
`log P(target | source)<TAB>pieces` (`utils.text_lines.score_line`)."""

import sys

from t2t_repro.decoding.file_decoding import (ProgressPrinter, check_source_length,
                                              write_output_lines)
from t2t_repro.errors import ConfigurationError
from t2t_repro.utils.text_lines import read_lines, score_line, source_target_pair


def read_score_pairs(problem, path):
    """Each line of `path` as `(source ids, target ids)`, both ending in EOS; a line without
    exactly one tab, or that the problem cannot encode, is a ConfigurationError naming `path`
    and its line number."""
    from t2t_repro.data.problem import UnencodableInputError

    pairs = []
    for line_number, line in enumerate(read_lines(path, "--score_file"), 1):
        try:
            source, target = source_target_pair(line)
            pairs.append((problem.encode(source), problem.encode_target(target)))
        except (UnencodableInputError, ValueError) as error:
            raise ConfigurationError(f"{path} line {line_number}: {error}") from None
    return pairs


def check_pair_lengths(model, pairs, path, max_input_tokens):
    """ConfigurationError naming `path` and the first line whose source is longer than the
    decoder takes (`check_source_length`) or whose target does not fit the model."""
    for line_number, (source, target) in enumerate(pairs, 1):
        try:
            check_source_length(model, source, max_input_tokens)
            model.check_length(len(target), "target")
        except ValueError as error:
            raise ConfigurationError(f"{path} line {line_number}: {error}") from None


def score_file(scorer, pairs, batch_size, output_path=None, stdout=None, stderr=None):
    """Scores the encoded `pairs` in batches of `batch_size`, with progress on `stderr`; writes
    one `score_line` per pair to `output_path` (atomically), else prints them on `stdout`.
    Returns the `(score, pieces)` pairs."""
    from t2t_repro.decoding.scoring import score_id_pairs

    stderr = sys.stderr if stderr is None else stderr
    results = score_id_pairs(scorer, pairs, batch_size, ProgressPrinter(stderr, "scored"))
    lines = [score_line(score, length) for score, length in results]
    write_output_lines(lines, output_path, "scores", stdout, stderr)
    return results
