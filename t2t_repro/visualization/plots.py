"""A trained model's plots as PNG files (`python -m t2t_repro.visualize` turns its flags into
these calls): its attention on one sentence pair, its positional encoding and a learning-rate
schedule. The checks run before the model is loaded, and name the flag to change."""

import os

from t2t_repro.errors import ConfigurationError, layer_choices


def check_layer(hparams, layer):
    """A ConfigurationError naming the range unless `layer` indexes both stacks."""
    from t2t_repro.models.flops import layer_counts

    counts = layer_counts(hparams)
    if not all(-count <= layer < count for count in counts):
        raise ConfigurationError(
            f"--layer={layer} is not a layer of this model, which has {counts[0]} encoder and "
            f"{counts[1]} decoder layer{'s' if counts[1] > 1 else ''}; use "
            f"{layer_choices(min(counts))}.")


def encode(problem, text, flag):
    """`problem.encode(text)`; text it cannot encode is a ConfigurationError naming `--flag`."""
    from t2t_repro.data.problem import UnencodableInputError

    try:
        return problem.encode(text)
    except UnencodableInputError as error:
        raise ConfigurationError(f"--{flag}: {error}") from None


def check_lengths(model, input_ids, target_ids, max_input_tokens):
    """A ConfigurationError unless the source fits the model's positions and
    `max_input_tokens`, as the decoder's sources must (a longer one decodes slowly, if at all),
    and the target (if any) the model's positions."""
    from t2t_repro.decoding.file_decoding import check_source_length

    try:
        check_source_length(model, input_ids, max_input_tokens)
        model.check_length(len(target_ids or []), "target")
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def own_translation(model, problem, input_ids, decode_hparams):
    """The model's best beam-search hypothesis for `input_ids` under `decode_hparams`, up to
    and with its EOS."""
    import numpy as np

    from t2t_repro.decoding.text_decoding import create_search
    from t2t_repro.names import EOS_ID

    search = create_search(model, decode_hparams)
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
    """Draws every figure into `plot_dir` (created if missing): every head of `layer` in the
    three attention stacks, the first `positions` positions of the encoding, and
    `schedule_hparams`' learning rates. Returns {path: the array drawn} (attention weights
    [heads, queries, keys], the position table, the learning rates)."""
    from t2t_repro.utils import plotting
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
