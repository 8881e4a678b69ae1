# Two entry points for a fresh machine: `make demo` (set up, then train the algorithmic demo)
# and `make test` (set up, then run the whole test suite). See BUILD.md.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= runs/algorithmic_reverse

.PHONY: setup demo test

# Reinstalls when pyproject.toml changes; the stamp file marks a finished install.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

setup: $(VENV)/.installed

# Trains transformer_tiny on sequence reversal from scratch (DEMO_DIR is wiped first), then
# greedy-decodes held-out sequences beside their targets. Dropout is off (the task has no noise
# to overfit), LayerNorm comes first and the learning rate is half the tiny set's: with the
# paper's post-norm this task stalls for a seed-dependent while (81-99% token accuracy at step
# 1500 over three seeds), and at the full rate even pre-norm ended one seed in three at 91%;
# at half the rate seeds 1, 2 and 3 reach 98.7-99.3% by step 1200.
demo: setup
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m t2t_repro.trainer --problem=algorithmic_reverse \
	  --hparams_set=transformer_tiny \
	  --hparams=layer_prepostprocess_dropout=0.0,normalize_first=true,learning_rate_constant=1.0 \
	  --output_dir=$(DEMO_DIR) --train_steps=1200 --eval_every=400 --log_every=200 \
	  --random_seed=1 --decode_examples=200

test: setup
	$(BIN)/python -m pytest
