"""Tasks: a model_fn (heads, losses, metrics) and an input_fn per training objective."""
