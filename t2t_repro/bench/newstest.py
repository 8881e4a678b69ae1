"""What `bench train` and `bench decode` measure on: DESIGN §7's 37,000-piece shared vocabulary
and newstest2014 sentences."""

import os

from t2t_repro.bench.pipeline import multi30k_tmp_dir, shared_data_file
from t2t_repro.names import EOS_ID

VOCAB_SIZE = 37000


def _translate_ende(data_root, work_dir):
    raw_dir = os.path.join(work_dir, "raw")
    os.makedirs(raw_dir)
    return shared_vocabulary_problem_in(work_dir), multi30k_tmp_dir(data_root, raw_dir)


def shared_vocabulary_problem_in(work_dir):
    """translate_ende with `shared_vocabulary_problem`'s settings and its data folder under
    `work_dir`: once generated there, the problem itself (another process opens it so)."""
    from problems.translate_ende import TranslateEnde

    return TranslateEnde(data_dir=os.path.join(work_dir, "data"),
                         data_hparams=f"vocab_size={VOCAB_SIZE},num_train_shards=1")


def shared_vocabulary_problem(data_root, work_dir):
    """translate_ende with a 37,000-piece BPE vocabulary trained on Multi30k + newstest2013
    (the paper's size; its WMT training text is not in the shared data), generated under
    `work_dir`."""
    problem, tmp_dir = _translate_ende(data_root, work_dir)
    problem.generate_data(tmp_dir, download=False)
    return problem


def encode_with_shared_vocabulary(data_root, work_dir, lines):
    """(`lines` as id lists ending in EOS, vocabulary size) with `shared_vocabulary_problem`'s
    vocabulary, trained alone: no TFRecords, no TensorFlow."""
    problem, tmp_dir = _translate_ende(data_root, work_dir)
    vocabulary = problem.generate_vocabulary(tmp_dir, download=False)
    return [ids + [EOS_ID] for ids in vocabulary.encode(lines)], vocabulary.vocab_size


def newstest2014(data_root, language, count=None):
    """The first `count` (default: all) lines of newstest2014 in `language` ("en", "de")."""
    with open(shared_data_file(data_root, "wmt14_ende", f"newstest2014.{language}"),
              encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:count]
