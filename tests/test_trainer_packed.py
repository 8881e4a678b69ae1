"""The trainer with `--hparams=packed=true`: packed rows through the whole TensorFlow run
(pipeline, traced step, evaluation on ordinary batches), the loss falling."""

import re

from test_trainer import TINY_RUN, run_trainer


def test_the_trainer_trains_on_packed_rows(tmp_path):
    run = [flag for flag in TINY_RUN if not flag.startswith("--hparams=")]
    result = run_trainer(*run,
                         "--hparams=batch_size=256,max_length=24,num_hidden_layers=1,packed=true",
                         "--train_steps=40", f"--output_dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    losses = [float(loss) for loss in re.findall(r"step \d+/40 \| loss ([\d.]+)", log)]
    assert len(losses) == 8 and losses[-1] < 0.9 * losses[0], losses
    assert "eval at step 40" in log
