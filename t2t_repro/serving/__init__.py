"""Exporting a trained model as a SavedModel, serving it over TF Serving's REST API, and
querying it."""
