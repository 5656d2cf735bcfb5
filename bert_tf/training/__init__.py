"""The training engine: the Estimator and its hooks, checkpoints, distribution, faults, exact
resume, the output-dir lock, the steps every run shares and evaluation during training."""
