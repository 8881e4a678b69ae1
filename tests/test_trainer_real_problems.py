"""The trainer on real text, as the README runs it: `--generate_data` from raw files in
`--tmp_dir`, then training whose held-out loss falls (Multi30k EN-DE, the treebank sample),
with beam-search BLEU or bracket F1 at every evaluation, in TensorBoard."""

import collections
import re

import pytest
import sacrebleu

from conftest import read_scalars
from t2t_repro import registry
from t2t_repro.data.trees import delinearise
from test_trainer import run_trainer

EVAL_DECODE_EXAMPLES = 8
# A tiny model (one layer) and budget, so that a few dozen CPU steps move the loss.
SMALL_RUN = [
    "--hparams_set=transformer_tiny",
    "--hparams=batch_size=1024,max_length=64,num_hidden_layers=1",
    "--train_steps=40",
    "--eval_every=20",
    "--eval_steps=4",
    "--log_every=20",
    "--random_seed=1",
    "--generate_data",
    f"--eval_decode_examples={EVAL_DECODE_EXAMPLES}",
]
TEACHER_FORCED_EVAL_TAGS = {"loss", "accuracy", "neg_log_perplexity"}


def decode_files(eval_dir, step):
    """(inputs, targets, decodes) the trainer wrote beside the eval events, line-aligned."""
    texts = [(eval_dir / name).read_text(encoding="utf-8").splitlines()
             for name in ("inputs.txt", "targets.txt", f"decodes-{step}.txt")]
    assert [len(lines) for lines in texts] == [EVAL_DECODE_EXAMPLES] * 3
    return texts


# COLLINS.prm, written out again for the check: punctuation tags (by the gold tree) take no
# room in spans, POS tags and the root are not brackets, PRT counts as ADVP.
PUNCTUATION_TAGS = {",", ":", "``", "''", "."}


def preterminal_tags(tree):
    """POS tags of the words, left to right."""
    if len(tree.children) == 1 and isinstance(tree.children[0], str):
        return [tree.label]
    return [tag for child in tree.children for tag in preterminal_tags(child)]


def labelled_spans(tree, punctuation):
    """Multiset of (label, start, end) phrases over the non-punctuation words."""
    spans, word, position = collections.Counter(), 0, 0

    def visit(node):
        nonlocal word, position
        start = position
        for child in node.children:
            if len(child.children) == 1 and isinstance(child.children[0], str):
                position += not punctuation[word]
                word += 1
            else:
                visit(child)
        label = "ADVP" if node.label == "PRT" else node.label
        if position > start and label != "TOP":
            spans[label, start, position] += 1

    visit(tree)
    return spans


def bracket_f1_by_hand(inputs, targets, decodes):
    """Pooled labelled bracket F1 (percent) of the decoded trees against the gold ones."""
    matched = gold_count = test_count = 0
    for words, target, decoded in zip(inputs, targets, decodes):
        gold_tree = delinearise(target.split(), words.split())
        punctuation = [tag in PUNCTUATION_TAGS for tag in preterminal_tags(gold_tree)]
        gold = labelled_spans(gold_tree, punctuation)
        test = labelled_spans(delinearise(decoded.split(), words.split()), punctuation)
        matched += sum((gold & test).values())
        gold_count += sum(gold.values())
        test_count += sum(test.values())
    if not matched:
        return 0.0
    precision, recall = matched / test_count, matched / gold_count
    return 100 * 2 * precision * recall / (precision + recall)


def eval_losses(stdout):
    """`{step: loss}` from the trainer's `eval at step N | loss X | ...` lines."""
    return {int(step): float(loss)
            for step, loss in re.findall(r"eval at step (\d+) \| loss ([\d.]+)", stdout)}


def test_translate_ende_generates_data_from_multi30k_and_its_loss_falls(multi30k_tmp_dir, tmp_path):
    result = run_trainer(
        "--problem=translate_ende", f"--tmp_dir={multi30k_tmp_dir}",
        f"--data_dir={tmp_path / 'data'}", f"--output_dir={tmp_path / 'run'}",
        "--data_hparams=vocab_size=4000,num_train_shards=2", *SMALL_RUN,
        "--decode_hparams=beam_size=2,extra_length=5",
    )
    assert result.returncode == 0, result.stderr
    assert "translate_ende train: 29000 examples" in result.stdout
    assert "translate_ende eval: 3000 examples" in result.stdout
    assert (tmp_path / "data" / "translate_ende.spm.model").exists()
    losses = eval_losses(result.stdout)
    assert sorted(losses) == [20, 40]
    assert losses[40] < losses[20] - 0.2, losses
    assert "--data_hparams=vocab_size=4000,num_train_shards=2" in (
        tmp_path / "run" / "flags.txt").read_text()
    evals = read_scalars(str(tmp_path / "run" / "eval"))
    assert TEACHER_FORCED_EVAL_TAGS | {"bleu", "bleu_tokenized_compound_split"} <= set(evals)
    assert sorted(evals["bleu"]) == [20, 40]
    for step, bleu in evals["bleu"].items():
        inputs, targets, decodes = decode_files(tmp_path / "run" / "eval", step)
        expected = sacrebleu.corpus_bleu(decodes, [targets]).score
        assert bleu == pytest.approx(expected, rel=1e-5, abs=1e-5), step
    # 40 steps decode too poorly for a BLEU above 0; the references without their last word do.
    registry.import_all()
    shortened = [" ".join(target.split()[:-1]) for target in targets]
    expected = sacrebleu.corpus_bleu(shortened, [targets]).score
    assert 0 < expected < 100
    bleu = registry.problems["translate_ende"]().decode_metrics(inputs, shortened, targets)["bleu"]
    assert bleu == pytest.approx(expected, rel=1e-9)
    assert re.search(r"eval at step 40 \| .*\| bleu [\d.]+", result.stdout)
    assert "learning_rate" in read_scalars(str(tmp_path / "run" / "train"))


def test_parsing_wsj_trains_on_section_01_and_evaluates_on_section_00(shared_data_dir, tmp_path):
    result = run_trainer(
        "--problem=parsing_wsj", f"--tmp_dir={shared_data_dir / 'ptb_sample' / 'combined_mrg'}",
        f"--data_dir={tmp_path / 'data'}", f"--output_dir={tmp_path / 'run'}",
        "--data_hparams=train_sections=01,eval_sections=00,vocab_size=2000,num_train_shards=2",
        *SMALL_RUN, "--decode_hparams=beam_size=2,extra_length=10",
    )
    assert result.returncode == 0, result.stderr
    assert "parsing_wsj train: 1993 examples" in result.stdout
    assert "parsing_wsj eval: 1921 examples" in result.stdout
    losses = eval_losses(result.stdout)
    assert losses[40] < losses[20] - 0.2, losses
    evals = read_scalars(str(tmp_path / "run" / "eval"))
    assert TEACHER_FORCED_EVAL_TAGS | {"bracket_f1", "bracket_precision", "bracket_recall"} <= set(
        evals)
    assert sorted(evals["bracket_f1"]) == [20, 40]
    for step, f1 in evals["bracket_f1"].items():
        inputs, targets, decodes = decode_files(tmp_path / "run" / "eval", step)
        assert f1 == pytest.approx(bracket_f1_by_hand(inputs, targets, decodes),
                                   rel=1e-5, abs=1e-5), step
    # 40 steps parse too poorly for an F1 above 0; the gold trees with every other sentence's NPs
    # relabelled VP do.
    registry.import_all()
    relabelled = [target.replace("(NP ", "(VP ").replace(")NP", ")VP") if index % 2 else target
                  for index, target in enumerate(targets)]
    expected = bracket_f1_by_hand(inputs, targets, relabelled)
    assert 0 < expected < 100
    metrics = registry.problems["parsing_wsj"]().decode_metrics(inputs, relabelled, targets)
    assert metrics["bracket_f1"] == pytest.approx(expected, rel=1e-9)


def test_training_without_generated_data_says_how_to_generate_it(tmp_path):
    result = run_trainer(
        "--problem=translate_ende", "--hparams_set=transformer_tiny",
        f"--data_dir={tmp_path / 'empty'}", f"--output_dir={tmp_path / 'run'}",
    )
    assert result.returncode != 0
    assert "No translate_ende data in" in result.stderr
    assert "t2t_repro.datagen" in result.stderr and "--generate_data" in result.stderr
    assert not (tmp_path / "run").exists()
