"""Draws a trained model's attention on a sentence, its positional encoding and its learning-rate
schedule, as PNG files (the paper's Figures 3-5 and its §3.5 and §5.3 formulas, for this run).

    python -m t2t_repro.visualize --problem=translate_ende_multi30k --data_dir=D --output_dir=O \\
        --inputs="A man rides a horse." [--targets="Ein Mann reitet ein Pferd."] \\
        --plot_dir=plots [--layer=2] [--checkpoint_path=...] [--positions=100] \\
        [--schedule_hparams_set=transformer_base]

Writes into --plot_dir (created if missing):
  attention_encoder_self_layer<L>.png, attention_decoder_self_layer<L>.png,
  attention_encoder_decoder_layer<L>.png   every head of layer L (--layer, default the last;
      negative counts from the end) as heatmaps labelled with the subword tokens;
  positional_encoding.png   the encoder's positions × dimensions (the sinusoids, or a learned
      table) for --positions positions;
  learning_rate.png   the schedule of the run's hparams (or --schedule_hparams_set's) over its
      train_steps.
The model and its weights are found as the decoder finds them (--output_dir's hparams.json and
newest checkpoint, or --checkpoint_path), and a source longer than --max_input_tokens (default:
hparam max_length) is refused as the decoder refuses it. Without --targets the target is the
model's own translation: beam search with the problem's decode hparams (--decode_hparams: the
search's and the sampling ones; any other, or any with --targets, is an error rather than
ignored).
"""

import sys

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro.cli import entry_point, output_paths, problem_flags, trained_run  # noqa: E402
from t2t_repro.cli.entry_point import check_usage  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402
from t2t_repro.utils.out_of_memory import advice_when_out_of_memory  # noqa: E402
from t2t_repro.visualization import plots  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("inputs", None, "The source sentence whose attention is drawn.")
flags.DEFINE_string("targets", None,
                    "Its target sentence (teacher-forced); default: the model's translation.")
flags.DEFINE_string("plot_dir", None, "Where the PNG files go (created if missing).")
flags.DEFINE_integer("layer", -1,
                     "The layer whose heads are drawn, from 0; negative counts from the end.")
flags.DEFINE_integer("positions", 100, "Positions in the positional-encoding plot.")
# The most rows a positional-encoding plot takes: its table and image grow with them, and ten
# million exhausted a 24 GiB machine's memory.
MAX_POSITIONS = 100_000
flags.DEFINE_string("schedule_hparams_set", None,
                    "Plot this registered set's learning-rate schedule instead of the run's.")


def translation_decode_hparams(problem):
    """--decode_hparams for the model's own translation of --inputs: ConfigurationError with
    --targets (no search runs), HParamsError for a setting the search does not read."""
    from t2t_repro.decoding.text_decoding import SAMPLING_DEFAULTS, decode_hparams_read_by

    if FLAGS.targets and FLAGS.decode_hparams:
        raise ConfigurationError("--decode_hparams sets the search that translates --inputs; "
                                 "with --targets none runs: leave one of them out.")
    search_reads = ("beam_size", "alpha", "extra_length", *SAMPLING_DEFAULTS)
    return decode_hparams_read_by(
        problem, FLAGS.decode_hparams, search_reads, "t2t_repro.visualize",
        "beam_size, alpha, extra_length and the sampling hparams, for one translation")


def run():
    from t2t_repro.decoding.text_decoding import input_limit
    from t2t_repro.hparams import create_hparams

    problem = problem_flags.create_problem()
    problem.check_data()
    decode_hparams = translation_decode_hparams(problem)
    hparams = trained_run.resolve_hparams()
    schedule_hparams = (create_hparams(FLAGS.schedule_hparams_set)
                        if FLAGS.schedule_hparams_set else hparams)
    plots.check_layer(hparams, FLAGS.layer)
    if not 1 <= FLAGS.positions <= MAX_POSITIONS:
        raise ConfigurationError(f"--positions={FLAGS.positions}: draw at least 1 position and "
                                 f"at most {MAX_POSITIONS:,} (a row each in the plot).")
    input_ids = plots.encode(problem, FLAGS.inputs, "inputs")
    target_ids = plots.encode(problem, FLAGS.targets, "targets") if FLAGS.targets else None
    checkpoint, model = trained_run.load_model(problem, hparams)
    plots.check_lengths(model, input_ids, target_ids,
                        input_limit(model, FLAGS.max_input_tokens))
    if target_ids is None:
        with advice_when_out_of_memory(
                "translating --inputs", f"lower beam_size (now {decode_hparams.beam_size}) or "
                f"extra_length (now {decode_hparams.extra_length} tokens) in --decode_hparams, "
                f"or give --targets."):
            target_ids = plots.own_translation(model, problem, input_ids, decode_hparams)
        print(f"Translation (the model's own, used as the target): "
              f"{problem.decode(target_ids)}", file=sys.stderr)
    drawn = plots.write_plots(model, problem, input_ids, target_ids, FLAGS.layer,
                              FLAGS.plot_dir, schedule_hparams, FLAGS.positions)
    print(f"Drew {checkpoint}:", file=sys.stderr)
    for path in drawn:
        print(path)


def main(argv):
    check_usage(argv, ("inputs", "plot_dir"), hint="see --helpfull")
    output_paths.check_output_dir(FLAGS.plot_dir, "--plot_dir")
    trained_run.start_trained_run_command(argv)
    run()


if __name__ == "__main__":
    entry_point.run(main, trained_run.KEY_FLAGS)
