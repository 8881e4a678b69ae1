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
newest checkpoint, or --checkpoint_path). Without --targets the target is the model's own
translation: beam search with the problem's decode hparams (--decode_hparams).
"""

import os
import sys

from t2t_repro import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro import command_line, problem_flags, trained_model_flags  # noqa: E402
from t2t_repro.command_line import check_usage  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("inputs", None, "The source sentence whose attention is drawn.")
flags.DEFINE_string("targets", None,
                    "Its target sentence (teacher-forced); default: the model's translation.")
flags.DEFINE_string("plot_dir", None, "Where the PNG files go (created if missing).")
flags.DEFINE_integer("layer", -1,
                     "The layer whose heads are drawn, from 0; negative counts from the end.")
flags.DEFINE_integer("positions", 100, "Positions in the positional-encoding plot.")
flags.DEFINE_string("schedule_hparams_set", None,
                    "Plot this registered set's learning-rate schedule instead of the run's.")


def check_layer(hparams, layer):
    """A ConfigurationError naming the range unless `layer` indexes both stacks."""
    from t2t_repro.models.flops import layer_counts

    counts = layer_counts(hparams)
    if not all(-count <= layer < count for count in counts):
        raise ConfigurationError(
            f"--layer={layer} is not a layer of this model, which has {counts[0]} encoder and "
            f"{counts[1]} decoder layers; use 0..{min(counts) - 1} (or -1 for the last).")


def encode(problem, text, flag):
    from t2t_repro.data.problem import UnencodableInputError

    try:
        return problem.encode(text)
    except UnencodableInputError as error:
        raise ConfigurationError(f"--{flag}: {error}") from None


def own_translation(model, problem, input_ids):
    """The model's best beam-search hypothesis for `input_ids`, up to and with its EOS."""
    import numpy as np

    from t2t_repro.decoding.text_decoding import create_decode_hparams, create_search
    from t2t_repro.special_ids import EOS_ID

    search = create_search(model, create_decode_hparams(problem, FLAGS.decode_hparams))
    ids = [int(token) for token in search(np.asarray([input_ids])).ids[0, 0]]
    return ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


def position_table(model, positions):
    """The encoder's position encoding [positions, d_model] (a learned table has at most
    max_length rows)."""
    import numpy as np
    from keras import ops

    if model.max_positions is not None:
        positions = min(positions, model.max_positions)
    dummy = np.zeros((1, positions, model.hparams.hidden_size), "float32")
    return ops.convert_to_numpy(model.encoder_position(dummy))


def schedule_rates(hparams):
    """(steps 1..train_steps, the learning rate of each) under `hparams`' schedule."""
    import numpy as np
    from keras import ops

    from t2t_repro.training.learning_rate import schedule_from_hparams

    iterations = np.arange(hparams.train_steps)
    return iterations + 1, ops.convert_to_numpy(schedule_from_hparams(hparams)(iterations))


def write_plots(model, problem, input_ids, target_ids, layer, plot_dir, schedule_hparams,
                positions):
    """Draws every figure into `plot_dir`; returns {path: the array drawn} (attention weights
    [heads, queries, keys], the position table, the learning rates)."""
    from t2t_repro import plotting
    from t2t_repro.visualization import attention, figures

    os.makedirs(plot_dir, exist_ok=True)
    maps = attention.attention_maps(model, input_ids, target_ids)
    labels = attention.axis_labels(problem, input_ids, target_ids)
    drawn = {}
    for stack in attention.STACKS:
        count = len(maps[stack])
        index = layer % count
        weights = maps[stack][index]
        path = os.path.join(plot_dir, f"attention_{stack}_layer{index}.png")
        title = (f"{attention.STACK_TITLES[stack]}, layer {index} of 0..{count - 1}, every "
                 f"head (rows: queries, columns: keys)")
        plotting.save(figures.heads_figure(weights, *labels[stack], title), path, figures.DPI)
        drawn[path] = weights

    table = position_table(model, positions)
    d_model = model.hparams.hidden_size
    title = (f"learned position table, d_model = {d_model}"
             if model.hparams.position_encoding == "learned" else
             f"PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), d = {d_model}")
    path = os.path.join(plot_dir, "positional_encoding.png")
    plotting.save(figures.positions_figure(table, title), path, figures.DPI)
    drawn[path] = table

    steps, rates = schedule_rates(schedule_hparams)
    title = (f"{schedule_hparams.learning_rate_schedule}, constant "
             f"{schedule_hparams.learning_rate_constant:g}, d_model "
             f"{schedule_hparams.hidden_size}")
    path = os.path.join(plot_dir, "learning_rate.png")
    plotting.save(figures.learning_rate_figure(
        steps, rates, schedule_hparams.learning_rate_warmup_steps, title), path, figures.DPI)
    drawn[path] = rates
    return drawn


def run():
    from t2t_repro.hparams import create_hparams

    problem = problem_flags.create_problem()
    problem.check_data()
    hparams = trained_model_flags.resolve_hparams()
    schedule_hparams = (create_hparams(FLAGS.schedule_hparams_set)
                        if FLAGS.schedule_hparams_set else hparams)
    check_layer(hparams, FLAGS.layer)
    if FLAGS.positions < 1:
        raise ConfigurationError(f"--positions={FLAGS.positions}: draw at least 1 position.")
    input_ids = encode(problem, FLAGS.inputs, "inputs")
    target_ids = encode(problem, FLAGS.targets, "targets") if FLAGS.targets else None
    checkpoint, model = trained_model_flags.load_model(problem, hparams)
    for ids, what in ((input_ids, "source"), (target_ids or [], "target")):
        try:
            model.check_length(len(ids), what)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
    if target_ids is None:
        target_ids = own_translation(model, problem, input_ids)
        print(f"Translation (the model's own, used as the target): "
              f"{problem.decode(target_ids)}", file=sys.stderr)
    drawn = write_plots(model, problem, input_ids, target_ids, FLAGS.layer, FLAGS.plot_dir,
                        schedule_hparams, FLAGS.positions)
    print(f"Drew {checkpoint}:", file=sys.stderr)
    for path in drawn:
        print(path)


def main(argv):
    check_usage(argv, ("inputs", "plot_dir"), hint="see --helpfull")
    trained_model_flags.start_trained_run_command(argv)
    run()


if __name__ == "__main__":
    command_line.run(main)
