"""bert_tf: a graph-mode (tf.compat.v1) BERT toolkit for current TensorFlow 2.x."""

__version__ = "0.1.0"
