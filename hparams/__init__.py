"""Registered hparams sets; importing this package registers them all."""

from hparams import transformer
