"""Tools beside training: checkpoint conversion to and from Hugging Face, the step benchmark."""
