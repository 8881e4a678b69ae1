"""Trained models of other toolkits as runs of this project (`python -m t2t_repro.import_model`)."""
