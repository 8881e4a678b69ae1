"""Training under JAX, without TensorFlow: `run.JaxTrainingRun` with the NumPy token-array
batches, and `train_step.JaxTrainStep`, jitted, on one or all local devices."""
