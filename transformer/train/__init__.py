"""Training: state, optimizer, losses, pure step functions, checkpoints, the loop."""
