"""The `--strategy` choices, importable without TensorFlow (the trainer defines its flags before
it knows the backend): under TensorFlow they name tf.distribute strategies (`strategy`), under
JAX how many local devices train (`jax.run`)."""

from t2t_repro.errors import UserError

STRATEGIES = ("auto", "default", "mirrored", "multi_worker")


class StrategyError(UserError, ValueError):
    """The strategy cannot be built as asked; the message says why and how to fix it."""


class WorkerFailureError(UserError):
    """Another worker of a multi-worker run stopped; the message says where training resumes."""
