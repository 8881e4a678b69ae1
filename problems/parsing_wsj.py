"""English constituency parsing on the Penn Treebank WSJ (paper §6.3).

Words in, linearised trees out (Vinyals et al. 2015): `(S (NP NNP NNP )NP ... )S`. The paper
trains on sections 02-21 and reports F1 on section 23 (development: 22). The treebank is
LDC-licensed: bring your own copy (see `t2t_repro.data.treebank`).
"""

import os

from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.data.text_problem import PairSources, TextPairProblem
from t2t_repro.data.treebank import TreebankPairs, TreeLinePairs
from t2t_repro.data.trees import delinearise
from t2t_repro.metrics.bracket_f1 import corpus_bracket_f1
from t2t_repro.registry import problems


@problems.register
class ParsingWsj(TextPairProblem):
    """WSJ only (~40K training trees), one shared 16K vocabulary."""

    default_vocab_size = 16000
    main_decode_metric = "bracket_f1"
    # Lets each bracket token (`(NP`, `)NP`) be one piece: by default sentencepiece splits it
    # into `(` and `NP`, which made targets 60% longer on the treebank sample.
    vocab_split_by_script = False

    def default_data_hparams(self):
        hparams = super().default_data_hparams()
        hparams.add_hparam("train_sections", "02-21")
        hparams.add_hparam("eval_sections", "22")
        hparams.num_train_shards = 10
        return hparams

    def raw_pairs(self, mode, tmp_dir, download):
        sections = {TRAIN: self.data_hparams.train_sections, EVAL: self.data_hparams.eval_sections}
        return PairSources([TreebankPairs(tmp_dir, sections[mode])])

    def tree_of(self, input_text, output_text):
        """The tree a model's output text describes over the input sentence's words, repaired
        as needed (see `trees.delinearise`), so every prediction can be scored."""
        return delinearise(output_text.split(), input_text.split())

    def default_decode_hparams(self):
        """Paper §6.3: beam 21, α = 0.3, outputs up to the input length + 300."""
        hparams = super().default_decode_hparams()
        hparams.beam_size = 21
        hparams.alpha = 0.3
        hparams.extra_length = 300
        return hparams

    def decode_metric_names(self):
        return ("bracket_precision", "bracket_recall", "bracket_f1")

    def decode_metrics(self, inputs, outputs, targets):
        """Labelled bracket precision, recall and F1 (EVALB, COLLINS.prm), in percent."""
        score = corpus_bracket_f1(
            [self.tree_of(words, target) for words, target in zip(inputs, targets)],
            [self.tree_of(words, output) for words, output in zip(inputs, outputs)],
        )
        return {"bracket_precision": 100 * score.precision, "bracket_recall": 100 * score.recall,
                "bracket_f1": 100 * score.f1}


@problems.register
class ParsingWsjSemisup(ParsingWsj):
    """WSJ plus extra automatically parsed sentences (the paper's ~17M), one shared 32K
    vocabulary."""

    default_vocab_size = 32000

    def default_data_hparams(self):
        hparams = super().default_data_hparams()
        hparams.add_hparam("extra_trees_file", "parsing_wsj_semisup.trees")
        hparams.num_train_shards = 100
        return hparams

    def raw_pairs(self, mode, tmp_dir, download):
        treebank = super().raw_pairs(mode, tmp_dir, download)
        if mode != TRAIN:
            return treebank
        extra = TreeLinePairs(os.path.join(tmp_dir, self.data_hparams.extra_trees_file))
        return PairSources(treebank.sources + [extra])
