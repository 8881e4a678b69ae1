"""What `bench train` and `bench decode` measure on: DESIGN §7's 37,000-piece shared vocabulary
and newstest2014 sentences."""

import os

from t2t_repro.bench.pipeline import multi30k_tmp_dir

VOCAB_SIZE = 37000


def shared_vocabulary_problem(data_root, work_dir):
    """translate_ende with a 37,000-piece BPE vocabulary trained on Multi30k + newstest2013
    (the paper's size; its WMT training text is not in the shared data), generated under
    `work_dir`."""
    from problems.translate_ende import TranslateEnde

    raw_dir = os.path.join(work_dir, "raw")
    os.makedirs(raw_dir)
    problem = TranslateEnde(data_dir=os.path.join(work_dir, "data"),
                            data_hparams=f"vocab_size={VOCAB_SIZE},num_train_shards=1")
    problem.generate_data(multi30k_tmp_dir(data_root, raw_dir), download=False)
    return problem


def newstest2014(data_root, language, count=None):
    """The first `count` (default: all) lines of newstest2014 in `language` ("en", "de")."""
    with open(os.path.join(data_root, "wmt14_ende", f"newstest2014.{language}"),
              encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:count]
