"""The trainer on real text, as the README runs it: `--generate_data` from raw files in
`--tmp_dir`, then training whose held-out loss falls (Multi30k EN-DE, the treebank sample),
with beam-search BLEU or bracket F1 at every evaluation, in TensorBoard."""

import re

from conftest import read_scalars
from test_trainer import run_trainer

# A tiny model and budget, so that a few dozen CPU steps move the loss.
SMALL_RUN = [
    "--hparams_set=transformer_tiny",
    "--hparams=batch_size=1024,max_length=64",
    "--train_steps=40",
    "--eval_every=20",
    "--eval_steps=4",
    "--log_every=20",
    "--random_seed=1",
    "--generate_data",
    "--eval_decode_examples=8",
]
TEACHER_FORCED_EVAL_TAGS = {"loss", "accuracy", "neg_log_perplexity"}


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
    assert all(0 <= bleu <= 100 for bleu in evals["bleu"].values())
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
    assert all(0 <= f1 <= 100 for f1 in evals["bracket_f1"].values())


def test_training_without_generated_data_says_how_to_generate_it(tmp_path):
    result = run_trainer(
        "--problem=translate_ende", "--hparams_set=transformer_tiny",
        f"--data_dir={tmp_path / 'empty'}", f"--output_dir={tmp_path / 'run'}",
    )
    assert result.returncode != 0
    assert "No translate_ende data in" in result.stderr
    assert "t2t_repro.datagen" in result.stderr and "--generate_data" in result.stderr
    assert not (tmp_path / "run").exists()
