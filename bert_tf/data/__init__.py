"""Input data: corpus readers, example processors and TFRecord pipelines."""
