"""Input pipeline throughput on Multi30k, beside the rate transformer_base training consumes it.

    python -m t2t_repro.bench pipeline [--data_root ../shared/data] [--vocab_size 37000]
        [--passes 3] [--train_steps 3] [--train_batch_size 4096]

In one run, on this machine:
  1. datagen: Multi30k train (29k pairs) and newstest2013 -> vocabulary and TFRecords, timed;
  2. t2t_repro's training pipeline (read records, parse, drop examples over max_length,
     shuffle, batch by length to transformer_base's 25,000-token budget) over full passes;
  3. the peer: the same records through the per-example pipeline tensor2tensor and the TF
     Model Garden use (parse each record, filter, a 10k shuffle buffer, then
     `bucket_by_sequence_length` with t2t's bucket boundaries);
  4. the TensorFlow-free pipeline of training under JAX (`data.array_batches`) over the same
     examples' token arrays, beside ours on tf.data: batches as tf.data's, and padded to the
     bucket shapes the JAX trainer uses;
  5. transformer_base (paper sizes) training steps on batches of our pipeline, timed after a
     warm-up step: the rate training consumes data.
Tokens are real (non-padding) source plus target tokens. Multi30k has no WMT download: the
files come from `--data_root` (the project's shared data), laid out as translate_ende expects.
"""

import os
import statistics
import tempfile
import time

from t2t_repro.bench.arguments import positive_int
from t2t_repro.bench.peak_memory import peak_bytes, reset_peak
from t2t_repro.cli.one_line_parser import OneLineErrorParser
from t2t_repro.errors import ConfigurationError

DEFAULT_DATA_ROOT = os.environ.get(
    "T2T_TEST_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
)
GOAL_PAIRS_PER_SECOND = 20000
GOAL_TIMES_TRAINING = 10


def shared_data_file(data_root, *parts):
    """The absolute path of a file of the shared data under `data_root`; ConfigurationError
    naming it when it is not there."""
    path = os.path.abspath(os.path.join(data_root, *parts))
    if not os.path.exists(path):
        raise ConfigurationError(f"{path} not found; point --data_root at the shared data.")
    return path


def multi30k_tmp_dir(data_root, directory):
    """Links Multi30k train and newstest2013 into `directory` as translate_ende's raw files."""
    sources = {
        "train.en": ("multi30k_ende", "train.en"), "train.de": ("multi30k_ende", "train.de"),
        "newstest2013.en": ("wmt14_ende", "newstest2013.en"),
        "newstest2013.de": ("wmt14_ende", "newstest2013.de"),
    }
    for name, parts in sources.items():
        os.symlink(shared_data_file(data_root, *parts), os.path.join(directory, name))
    return directory


def per_example_pipeline(problem, hparams, seed):
    """The peer: t2t's per-example bucketing (each record parsed, filtered and bucketed alone)."""
    import tensorflow as tf

    from t2t_repro.data import records
    from t2t_repro.data.problem import TRAIN

    def length(example):
        return tf.maximum(tf.size(example["inputs"]), tf.size(example["targets"]))

    boundaries, boundary = [], 8
    while boundary < hparams.max_length:  # t2t: 8, 9, ... growing by 10%
        boundaries.append(boundary)
        boundary = max(boundary + 1, int(boundary * 1.1))
    boundaries.append(hparams.max_length + 1)
    batch_sizes = [max(1, hparams.batch_size // (b - 1)) for b in boundaries] + [1]
    examples = records.read_shards(problem.shard_paths(TRAIN))
    examples = examples.filter(lambda example: length(example) <= hparams.max_length)
    examples = examples.shuffle(10000, seed=seed)
    return examples.bucket_by_sequence_length(
        length, boundaries, batch_sizes, padded_shapes={"inputs": [None], "targets": [None]}
    ).prefetch(tf.data.AUTOTUNE)


def our_pipeline(problem, hparams, seed):
    from t2t_repro.data.problem import TRAIN

    features = problem.dataset(TRAIN, hparams, repeat=False, seed=seed)
    return features.map(lambda features, targets: features)


def array_pipeline(problem, hparams, seed, fixed_shapes):
    """One shuffled training pass of the NumPy pipeline over the token arrays."""
    from t2t_repro.data.array_batches import ArrayBatches
    from t2t_repro.data.problem import TRAIN

    batches = ArrayBatches(problem.token_arrays(TRAIN), hparams.batch_size, hparams.max_length,
                           shuffle=True, seed=seed, fixed_shapes=fixed_shapes)
    return (features for features, _ in batches)


def timed_pass(dataset):
    """(seconds, pairs, tokens) of one full pass; tokens are non-padding ids."""
    import numpy as np

    started = time.perf_counter()
    pairs = tokens = 0
    for batch in dataset:
        inputs, targets = np.asarray(batch["inputs"]), np.asarray(batch["targets"])
        pairs += inputs.shape[0]
        tokens += int(np.count_nonzero(inputs)) + int(np.count_nonzero(targets))
    return time.perf_counter() - started, pairs, tokens


def pipeline_rates(make_dataset, passes):
    """Median pairs/s and tokens/s over `passes` full passes (a fresh iterator each), and the
    process's peak resident bytes meanwhile."""
    reset_peak()
    results = [timed_pass(make_dataset(seed)) for seed in range(passes)]
    seconds = statistics.median(r[0] for r in results)
    _, pairs, tokens = results[0]
    return pairs / seconds, tokens / seconds, peak_bytes()


def training_rates(problem, hparams, steps, batch_size):
    """Pairs/s and tokens/s that transformer_base training steps consume (after a warm-up),
    and the process's peak resident bytes meanwhile."""
    import numpy as np

    from t2t_repro.hparams import HParams
    from t2t_repro.training.run import build_model, compile_for_training

    reset_peak()
    train_hparams = HParams(**dict(hparams.values(), batch_size=batch_size))
    model = compile_for_training(build_model("transformer", train_hparams, problem), train_hparams)
    batches = iter(our_pipeline(problem, train_hparams, seed=0).repeat())
    seconds = pairs = tokens = 0
    for step in range(steps + 1):
        batch = next(batches)
        started = time.perf_counter()
        model.train_on_batch(batch, batch["targets"])
        if step:  # the first step builds the train function
            seconds += time.perf_counter() - started
            pairs += batch["inputs"].shape[0]
            tokens += int(np.count_nonzero(batch["inputs"])) + int(
                np.count_nonzero(batch["targets"]))
    return pairs / seconds, tokens / seconds, peak_bytes()


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench pipeline",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT,
                        help="the shared data folder holding multi30k_ende/ and wmt14_ende/")
    parser.add_argument("--vocab_size", type=positive_int, default=37000,
                        help="translate_ende's vocabulary size (paper: 37000)")
    parser.add_argument("--passes", type=positive_int, default=3, help="full passes per pipeline")
    parser.add_argument("--train_steps", type=positive_int, default=3, help="timed training steps")
    parser.add_argument("--train_batch_size", type=positive_int, default=4096,
                        help="tokens per training step (the paper's per-GPU share is ~3,100)")
    args = parser.parse_args(argv)

    from problems.translate_ende import TranslateEnde
    from t2t_repro.hparams import create_hparams

    hparams = create_hparams("transformer_base")
    with tempfile.TemporaryDirectory() as work:
        os.makedirs(os.path.join(work, "raw"))
        tmp_dir = multi30k_tmp_dir(args.data_root, os.path.join(work, "raw"))
        problem = TranslateEnde(data_dir=os.path.join(work, "data"),
                                data_hparams=f"vocab_size={args.vocab_size},num_train_shards=10")
        reset_peak()
        started = time.perf_counter()
        problem.generate_data(tmp_dir, download=False)
        datagen_seconds, datagen_peak = time.perf_counter() - started, peak_bytes()
        ours = pipeline_rates(lambda seed: our_pipeline(problem, hparams, seed), args.passes)
        peer = pipeline_rates(lambda seed: per_example_pipeline(problem, hparams, seed),
                              args.passes)
        arrays = pipeline_rates(lambda seed: array_pipeline(problem, hparams, seed, False),
                                args.passes)
        bucketed = pipeline_rates(lambda seed: array_pipeline(problem, hparams, seed, True),
                                  args.passes)
        training = training_rates(problem, hparams, args.train_steps, args.train_batch_size)

    rows = [
        ("datagen, Multi30k + newstest2013", datagen_seconds, "s", "", None, datagen_peak,
         None),
        ("pipeline, sentence pairs", ours[0], "pairs/s", "t2t per-example", peer[0], ours[2],
         peer[2]),
        ("pipeline, tokens", ours[1], "tok/s", "t2t per-example", peer[1]),
        ("NumPy token arrays (no TensorFlow), pairs", arrays[0], "pairs/s", "ours on tf.data",
         ours[0], arrays[2], ours[2]),
        ("NumPy token arrays, bucket shapes (JAX trainer), pairs", bucketed[0], "pairs/s",
         "ours on tf.data", ours[0], bucketed[2], ours[2]),
        ("pipeline vs training, pairs", ours[0], "pairs/s", "transformer_base training",
         training[0], ours[2], training[2]),
        ("pipeline vs training, tokens", ours[1], "tok/s", "transformer_base training",
         training[1]),
    ]
    from t2t_repro.bench.report import format_table

    title = (f"Input pipeline on Multi30k (translate_ende, vocab {args.vocab_size}, budget "
             f"{hparams.batch_size} tokens, max_length {hparams.max_length}); peak memory: "
             f"this one process's peak resident size while each ran")
    print(format_table(rows, title))
    times_training = ours[0] / training[0]
    print(f"goal >= {GOAL_PAIRS_PER_SECOND:,} pairs/s: {_verdict(ours[0] >= GOAL_PAIRS_PER_SECOND)}"
          f"; goal >= {GOAL_TIMES_TRAINING}x training consumption: "
          f"{_verdict(times_training >= GOAL_TIMES_TRAINING)} ({times_training:,.0f}x)")


def _verdict(met):
    return "met" if met else "MISSED"
