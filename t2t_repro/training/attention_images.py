"""Attention pictures for TensorBoard: one fixed eval sentence's attention at each evaluation,
one image per stack (encoder self-attention, decoder self-attention, encoder-decoder
attention), layers down and heads across, so that a user watching a run sees the heads form.

Written with the tensorboard package's protos and `summaries.EventWriter`, without TensorFlow
(and PNGs encoded here with zlib), so it runs on every backend. Images go to a directory of
their own, one small event file per call, each complete when the call returns: TensorBoard reads
a directory's event files one after another, which a second writer appending to the `eval/` file
of the run's own summaries would defeat.

The training loop's calls (the chief only):

    example = fixed_eval_example(problem)                       # once, before training
    images = attention_images(model, problem, *example)         # at each evaluation
    write_attention_images(os.path.join(output_dir, names.EVAL_ATTENTION_SUBDIR), step, images)
"""

import collections
import struct
import time
import zlib

import numpy as np

from t2t_repro.visualization.attention import STACK_TITLES, STACKS, attention_maps

TAG_PREFIX = "attention/"
# A head's tile is its weights enlarged to about this many pixels on its longer side.
TILE_PIXELS = 96
MAX_PIXELS_PER_POSITION = 8
SEPARATOR_PIXELS = 2
SEPARATOR_GREY = 160
# Weight 0 is white and weight 1 this dark blue, linearly between.
FULL_WEIGHT_RGB = np.array([8, 48, 107], np.float32)

AttentionImages = collections.namedtuple("AttentionImages", ["images", "description"])


def fixed_eval_example(problem, max_tokens=24, search=1000):
    """(input ids, target ids) of the first of the problem's first `search` eval examples
    whose sides both have at most `max_tokens` ids (a picture stays readable), else the
    first example: the sentence every evaluation draws."""
    from t2t_repro.data.problem import EVAL

    examples = [([int(i) for i in inputs], [int(i) for i in targets])
                for inputs, targets in problem.first_examples(EVAL, search)]
    if not examples:
        raise ValueError(f"{problem.name} has no eval examples to draw attention for.")
    return next((ids for ids in examples if max(map(len, ids)) <= max_tokens), examples[0])


def pixels_per_position(length):
    """How many pixels one position gets in a tile of a sequence of `length` positions."""
    return max(1, min(MAX_PIXELS_PER_POSITION, TILE_PIXELS // max(length, 1)))


def tile_heads(weights):
    """[layers, heads, queries, keys] weights in [0, 1] -> uint8 [height, width, 3]: a grid of
    one tile per head (layers down, heads across) between grey separators."""
    layers, heads, queries, keys = weights.shape
    scale = pixels_per_position(max(queries, keys))
    tile_height, tile_width = queries * scale, keys * scale
    height = layers * tile_height + (layers + 1) * SEPARATOR_PIXELS
    width = heads * tile_width + (heads + 1) * SEPARATOR_PIXELS
    canvas = np.full((height, width, 3), SEPARATOR_GREY, np.uint8)
    enlarged = np.repeat(np.repeat(np.clip(weights, 0.0, 1.0), scale, axis=2), scale, axis=3)
    colours = 255.0 - enlarged[..., None] * (255.0 - FULL_WEIGHT_RGB)
    for layer in range(layers):
        top = SEPARATOR_PIXELS + layer * (tile_height + SEPARATOR_PIXELS)
        for head in range(heads):
            left = SEPARATOR_PIXELS + head * (tile_width + SEPARATOR_PIXELS)
            canvas[top:top + tile_height, left:left + tile_width] = np.round(
                colours[layer, head]).astype(np.uint8)
    return canvas


def attention_images(model, problem, input_ids, target_ids):
    """AttentionImages: {stack: uint8 [height, width, 3]} of `model` reading the pair
    teacher-forced (`tile_heads` of `attention_maps`), and a description naming the sentence
    and the layout."""
    maps = attention_maps(model, input_ids, target_ids)
    layers, heads = maps["encoder_self"].shape[:2]
    description = (f"source: {problem.decode_inputs(input_ids)} | target: "
                   f"{problem.decode(target_ids)}"
                   f" | rows: layers 0..{layers - 1}, columns: heads 0..{heads - 1}; darker is "
                   f"more weight (white 0, dark blue 1)")
    return AttentionImages({stack: tile_heads(maps[stack]) for stack in STACKS}, description)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the first bytes of every PNG file


def png_bytes(image):
    """uint8 [height, width, 3] -> a PNG file's bytes (8-bit RGB, no filtering)."""
    height, width, _ = image.shape

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = np.concatenate([np.zeros((height, 1), np.uint8),  # filter type 0 per row
                           image.reshape(height, width * 3)], axis=1)
    return (PNG_SIGNATURE
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))


def write_attention_images(logdir, step, attention):
    """Writes `attention` (from `attention_images`) to a new event file in `logdir` as image
    summaries tagged attention/<stack>, at `step`."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from t2t_repro.training.summaries import EventWriter

    values = []
    for stack, image in attention.images.items():
        height, width, channels = image.shape
        values.append(summary_pb2.Summary.Value(
            tag=TAG_PREFIX + stack,
            metadata=summary_pb2.SummaryMetadata(
                display_name=STACK_TITLES[stack], summary_description=attention.description),
            image=summary_pb2.Summary.Image(height=height, width=width, colorspace=channels,
                                            encoded_image_string=png_bytes(image))))
    writer = EventWriter(logdir)
    writer.write(event_pb2.Event(wall_time=time.time(), step=step,
                                 summary=summary_pb2.Summary(value=values)))
    writer.close()
