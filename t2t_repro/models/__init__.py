"""Registered models."""

from t2t_repro.models.transformer import Transformer
