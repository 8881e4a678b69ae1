"""Training: schedules, loss and metrics, optimizer, checkpoints, summaries, strategies, loop."""
