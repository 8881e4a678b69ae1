"""Training under TensorFlow: `run.TrainingRun` with tf.data batches, `train_step.TrainStep`
under tf.distribute, and the strategies (`strategy`)."""
