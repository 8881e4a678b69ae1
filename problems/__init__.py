"""Registered problems; importing this package registers them all."""

from problems import algorithmic
