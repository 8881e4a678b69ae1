"""Translates (decodes) text with a trained model: a file, or lines typed on stdin.

    python -m t2t_repro.decoder --problem=translate_ende --data_dir=D --output_dir=O \\
        --decode_hparams="beam_size=4,alpha=0.6,extra_length=50" \\
        --decode_from_file=newstest2014.en --decode_to_file=out.de \\
        --decode_reference=newstest2014.de

The hparams are those saved in --output_dir (or --hparams_set/--hparams, checked against
them); the weights are the latest checkpoint there, or --checkpoint_path (a checkpoint file,
or a directory such as avg_checkpoints' output; without --output_dir, one names its run).
With --decode_reference it prints the problem's scores: sacreBLEU and the paper's tokenized
BLEU for translation. A source longer than --max_input_tokens (default: hparam max_length) is
an error naming its line, never truncated (on stdin, reported and answered with an empty line);
--decode_to_file is checked before anything is decoded.

With --score_file (lines `source<TAB>target`) it scores given translations instead: one line
per input, the target's log-probability given the source in nats (summed over its pieces, EOS
included) and its number of pieces, tab-separated. --checkpoint_path=A,B,... decodes or scores
with an ensemble of several runs or checkpoints (the log of the mean of their probabilities).
--target_prefix_file (one line per source line; empty: none) makes each output begin with its
line's pieces; --decode_hparams=beam_size=1,sampling_method=random samples translations,
reproducibly under --random_seed (see docs/decoding.md). --decode_precision=bfloat16 decodes
(or scores) with a copy of the weights in bfloat16, which pays on CPUs with bfloat16
instructions (AVX512_BF16); int8 is Keras's weight quantization, slower than float32 on CPUs
(docs/performance.md#decoding-in-less-than-32-bits).
"""

import sys

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro.cli import (  # noqa: E402
    checkpoint_flag, ensemble_models, entry_point, output_paths, problem_flags, trained_run)
from t2t_repro.cli import precision_flag  # noqa: E402,F401 (--decode_precision)
from t2t_repro.cli import seed_flag  # noqa: E402,F401 (--random_seed)
from t2t_repro.decoding import file_decoding  # noqa: E402
from t2t_repro.decoding.precision import model_in_precision  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402
from t2t_repro.training.run_records import run_dir_of  # noqa: E402
from t2t_repro.utils.out_of_memory import advice_when_out_of_memory  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("decode_from_file", None,
                    "Source text, one sentence per line; without it, lines are read from stdin.")
flags.DEFINE_string("decode_to_file", None,
                    "Where the decodes go, one per line (default: stdout).")
flags.DEFINE_string("decode_reference", None,
                    "Reference text aligned with --decode_from_file: print the problem's scores.")
flags.DEFINE_string("target_prefix_file", None,
                    "Target text aligned with --decode_from_file: each output begins with its "
                    "line's pieces, then the search continues (an empty line: no prefix).")
flags.DEFINE_string("score_file", None,
                    "Score given translations instead of decoding: lines source<TAB>target; "
                    "writes each target's log-probability (nats, EOS included) and its pieces.")
# The files the decoder reads, which --decode_to_file must not replace.
INPUT_FILE_FLAGS = ("decode_from_file", "decode_reference", "target_prefix_file", "score_file")
# The files only a search reads: given with --score_file, an error rather than ignored, as is
# every decode hparam but the one scoring reads.
SEARCH_ONLY_FLAGS = ("decode_from_file", "decode_reference", "target_prefix_file")
SCORING_DECODE_HPARAMS = ("batch_size",)


def score(problem, decode_hparams):
    """--score_file: every pair checked and encoded, then scored in batches."""
    from t2t_repro.decoding import file_scoring
    from t2t_repro.decoding.scoring import Scorer
    from t2t_repro.decoding.text_decoding import input_limit, unread_settings

    given = [f"--{name}" for name in SEARCH_ONLY_FLAGS if FLAGS[name].value]
    unread = unread_settings(problem, decode_hparams, SCORING_DECODE_HPARAMS)
    if unread:
        given.append(f"decode hparam {', '.join(unread)}")
    if given:
        raise ConfigurationError(f"--score_file scores given translations; it takes no "
                                 f"{', '.join(given)}, which only decoding uses.")
    pairs = file_scoring.read_score_pairs(problem, FLAGS.score_file)
    checkpoint, model = ensemble_models.load_decoding_model(problem, trained_run.resolve_hparams())
    model = model_in_precision(model, FLAGS.decode_precision)
    file_scoring.check_pair_lengths(model, pairs, FLAGS.score_file,
                                    input_limit(model, FLAGS.max_input_tokens))
    print(f"Scoring with {checkpoint}, in {FLAGS.decode_precision}.", file=sys.stderr)
    with advice_when_out_of_memory(
            "scoring", f"lower batch_size in --decode_hparams (now {decode_hparams.batch_size} "
            f"pairs)."):
        file_scoring.score_file(Scorer(model), pairs, decode_hparams.batch_size,
                                output_path=FLAGS.decode_to_file)


def check_decode_to_file(problem):
    """--decode_to_file must be a file that can be written, and none the decoder reads (its
    input files, the run's records, the problem's vocabularies, any checkpoint) or that the
    run, the runs of the checkpoints decoded (an ensemble's members) and the data keep."""
    path = FLAGS.decode_to_file
    output_paths.check_output_file(path, "--decode_to_file")
    output_paths.check_not_an_input(path, "--decode_to_file", {
        **{f"--{name}": FLAGS[name].value for name in INPUT_FILE_FLAGS},
        **trained_run.records_and_vocabularies(problem)})
    output_paths.check_not_a_checkpoint(path, "--decode_to_file")
    runs = {FLAGS.output_dir, *filter(None, map(run_dir_of, checkpoint_flag.named_checkpoints()))}
    for run_dir in sorted(runs):  # --output_dir's, and those of the models decoded
        output_paths.check_not_kept(path, "--decode_to_file", run_dir, problem.data_dir,
                                    getattr(problem, "data_name", None))


def run():
    from t2t_repro.decoding.alignments import Aligner
    from t2t_repro.decoding.text_decoding import (
        check_alignments_asked, create_decode_hparams, create_search, input_limit)

    if FLAGS.decode_to_file and not (FLAGS.decode_from_file or FLAGS.score_file):
        raise ConfigurationError("--decode_to_file needs --decode_from_file (or --score_file): "
                                 "sentences read from stdin are decoded to stdout; redirect "
                                 "it (> FILE) instead.")
    problem = problem_flags.create_problem()
    problem.check_data()
    if FLAGS.decode_to_file:  # before the work whose result it is to hold
        check_decode_to_file(problem)
    decode_hparams = create_decode_hparams(problem, FLAGS.decode_hparams)
    if FLAGS.score_file:
        return score(problem, decode_hparams)
    check_alignments_asked(decode_hparams)
    for name in ("decode_reference", "target_prefix_file"):
        if FLAGS[name].value and not FLAGS.decode_from_file:
            raise ConfigurationError(f"--{name} needs --decode_from_file, the sources its lines "
                                     f"are aligned with.")
    hparams = trained_run.resolve_hparams()
    sources = (file_decoding.read_sources(problem, FLAGS.decode_from_file, FLAGS.decode_reference)
               if FLAGS.decode_from_file else None)
    prefixes = None
    if FLAGS.target_prefix_file:
        prefixes = file_decoding.read_target_prefixes(problem, FLAGS.target_prefix_file,
                                                      sources[0])
    checkpoint, model = ensemble_models.load_decoding_model(problem, hparams)
    model = model_in_precision(model, FLAGS.decode_precision)
    max_input_tokens = input_limit(model, FLAGS.max_input_tokens)
    aligner = Aligner(model, problem, decode_hparams) if decode_hparams.return_alignments else None
    if sources is not None:
        file_decoding.check_source_lengths(model, sources[1], FLAGS.decode_from_file,
                                           max_input_tokens)
    search = create_search(model, decode_hparams, seed=FLAGS.random_seed)
    if prefixes is not None:
        file_decoding.check_prefix_lengths(search, sources[1], prefixes, FLAGS.target_prefix_file)
    print(f"Decoding with {checkpoint}: beam_size={decode_hparams.beam_size}, "
          f"alpha={decode_hparams.alpha}, extra_length={decode_hparams.extra_length}"
          f"{file_decoding.sampling_note(decode_hparams)}, in {FLAGS.decode_precision}.",
          file=sys.stderr)
    with advice_when_out_of_memory(
            "decoding", f"lower beam_size (now {decode_hparams.beam_size}), batch_size (now "
            f"{decode_hparams.batch_size} sentences) or extra_length (now "
            f"{decode_hparams.extra_length} tokens) in --decode_hparams."):
        if sources is not None:
            file_decoding.decode_file(problem, search, decode_hparams, *sources,
                                      output_path=FLAGS.decode_to_file, aligner=aligner,
                                      prefix_lists=prefixes)
        else:
            file_decoding.decode_interactively(problem, search, decode_hparams,
                                               max_input_tokens, aligner=aligner)


def main(argv):
    trained_run.start_trained_run_command(argv, takes_ensembles=True)
    run()


if __name__ == "__main__":
    entry_point.run(main, (*trained_run.KEY_FLAGS, "decode_precision", "random_seed"))
