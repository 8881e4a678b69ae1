"""Evaluation metrics of the paper's tasks."""
