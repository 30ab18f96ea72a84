"""Tasks: data, model, loss and evaluation glued together for the trainer and the command line."""
