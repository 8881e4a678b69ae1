"""TensorBoard attention images: tiles against hand-placed pixels, the PNG encoding and event
file read back with TensorBoard's own reader, the fixed eval sentence, and the writer working
where TensorFlow cannot be imported."""

import io
import subprocess
import sys

import keras
import numpy as np
from conftest import REPO_ROOT
from matplotlib import image as matplotlib_image
from tensorboard.backend.event_processing import event_accumulator

from problems.algorithmic import AlgorithmicReverse
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer
from t2t_repro.names import EOS_ID
from t2t_repro.training import attention_images
from t2t_repro.visualization.attention import STACKS

WHITE, DARK_BLUE, GREY = (255, 255, 255), (8, 48, 107), (160, 160, 160)


def test_tiles_place_each_head_and_layer_between_separators():
    # 1 layer, 2 heads, 2 queries × 3 keys: 3 positions get 96 // 3 = 32, capped at 8 pixels.
    weights = np.zeros((1, 2, 2, 3), np.float32)
    weights[0, 0, 0, 2] = 1.0  # head 0: query 0 -> key 2
    weights[0, 1, 1, 0] = 0.5  # head 1: query 1 -> key 0, half
    tiles = attention_images.tile_heads(weights)
    assert tiles.dtype == np.uint8
    assert tiles.shape == (2 + 16 + 2, 2 + 24 + 2 + 24 + 2, 3)  # separators of 2 pixels
    assert tuple(tiles[0, 0]) == GREY and tuple(tiles[19, 53]) == GREY
    assert tuple(tiles[2, 2 + 16]) == DARK_BLUE  # head 0, query 0's rows, key 2's columns
    assert tuple(tiles[2 + 7, 2 + 23]) == DARK_BLUE  # the same 8 × 8 block's far corner
    assert tuple(tiles[2, 2]) == WHITE  # head 0, query 0, key 0: weight 0
    half = tuple(round(255 - 0.5 * (255 - c)) for c in DARK_BLUE)
    assert tuple(tiles[2 + 8, 2 + 24 + 2]) == half  # head 1, query 1, key 0


def test_png_bytes_decode_to_the_same_pixels():
    image = np.random.default_rng(0).integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    decoded = matplotlib_image.imread(io.BytesIO(attention_images.png_bytes(image)),
                                      format="png")
    np.testing.assert_array_equal(np.round(decoded * 255).astype(np.uint8), image)


def _tiny_model():
    keras.utils.set_random_seed(0)
    hparams = create_hparams("transformer_tiny")
    return Transformer(hparams, 12, 12).build_weights()


def test_images_of_a_model_are_written_as_tensorboard_reads_them(tmp_path):
    problem = AlgorithmicReverse()
    input_ids, target_ids = problem.encode("3 1 4 1 5 9"), problem.encode("9 5 1 4 1 3")
    attention = attention_images.attention_images(_tiny_model(), problem, input_ids, target_ids)
    assert attention.description.startswith("source: 3 1 4 1 5 9 | target: 9 5 1 4 1 3")
    # 2 layers × 4 heads of 7 × 7 positions at 96 // 7 = 13, capped at 8 pixels each.
    for stack in STACKS:
        assert attention.images[stack].shape == (2 * 56 + 3 * 2, 4 * 56 + 5 * 2, 3)

    logdir = tmp_path / "eval_attention"
    attention_images.write_attention_images(str(logdir), 40, attention)
    attention_images.write_attention_images(str(logdir), 80, attention)
    accumulator = event_accumulator.EventAccumulator(
        str(logdir), size_guidance={event_accumulator.IMAGES: 0})
    accumulator.Reload()
    assert sorted(accumulator.Tags()["images"]) == sorted(f"attention/{s}" for s in STACKS)
    for stack in STACKS:
        events = accumulator.Images(f"attention/{stack}")
        assert [event.step for event in events] == [40, 80]
        assert (events[0].height, events[0].width) == (118, 234)
        pixels = matplotlib_image.imread(io.BytesIO(events[0].encoded_image_string), format="png")
        np.testing.assert_array_equal(np.round(pixels * 255).astype(np.uint8),
                                      attention.images[stack])


def test_the_fixed_eval_example_is_the_first_short_one():
    problem = AlgorithmicReverse()
    first = problem.sequences("eval")[0]  # every eval sequence has at most 20 symbols
    inputs, targets = attention_images.fixed_eval_example(problem)
    assert inputs == [symbol + 2 for symbol in first] + [EOS_ID]
    assert targets == [symbol + 2 for symbol in reversed(first)] + [EOS_ID]
    shortest = min(len(s) for s in problem.sequences("eval")[:50])
    inputs, _ = attention_images.fixed_eval_example(problem, max_tokens=shortest + 1)
    assert len(inputs) == shortest + 1


def test_writing_needs_no_tensorflow(tmp_path):
    """The writer imports nothing of TensorFlow: run where importing it fails (on Keras's
    NumPy backend, as a machine without TensorFlow would have JAX's)."""
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"
        "import numpy as np\n"
        "from t2t_repro.training import attention_images as a\n"
        "images = a.AttentionImages({'encoder_self': a.tile_heads(np.ones((1, 2, 3, 3)) / 3)},"
        " 'three keys')\n"
        f"a.write_attention_images({str(tmp_path)!r}, 5, images)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO_ROOT, env={"KERAS_BACKEND": "numpy",
                                                "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr
    accumulator = event_accumulator.EventAccumulator(
        str(tmp_path), size_guidance={event_accumulator.IMAGES: 0})
    accumulator.Reload()
    assert [event.step for event in accumulator.Images("attention/encoder_self")] == [5]
