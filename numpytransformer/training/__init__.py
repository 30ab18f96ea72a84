"""Training: the trainer, the optimiser and schedules, checkpoints and data parallelism."""
