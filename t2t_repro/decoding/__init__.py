"""Decoding: search over the model's next-token distributions."""
