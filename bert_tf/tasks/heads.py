"""What every task head shares: the output projection and the softmax (or sigmoid) cross-entropy.

The pre-training heads (masked LM, next sentence) and the fine-tuning heads (classifier, NER,
SQuAD, ...) all end in `logits = x @ output_weights^T + output_bias` computed in float32, and
most are trained with a softmax cross-entropy. The variables keep the Google checkpoint names:
`output_weights` [num_outputs, H] and `output_bias` [num_outputs] inside the caller's variable
scope (e.g. `cls/seq_relationship/`, `cls/squad/`, or top level for the classifier).
"""

import dataclasses

import tensorflow as tf

from bert_tf import modeling

tf1 = tf.compat.v1

# Dropout on the encoder output feeding a fine-tuning head while training (the original's
# keep_prob=0.9 in run_classifier.py).
HEAD_DROPOUT_PROB = 0.1


def output_projection(input_tensor, num_outputs, initializer_range=0.02, output_weights=None,
                      dropout_prob=0.0):
    """Projects vectors to float32 logits with `output_weights` and `output_bias`.

    Args:
      input_tensor: float Tensor [..., H] (compute dtype), e.g. [B, H] or [B, S, H].
      num_outputs: width of the logits.
      initializer_range: stddev of the new weights' truncated normal initializer.
      output_weights: an existing [num_outputs, H] matrix to use instead of a new
        `output_weights` variable (the masked-LM decoder is tied to the word embeddings).
      dropout_prob: dropout on `input_tensor` (fine-tuning heads while training).

    Returns:
      float32 Tensor [..., num_outputs]. Softmax and losses run in float32 whatever the
      compute dtype, so the bias (a float32 variable) is added after the cast.
    """
    shape = modeling.get_shape_list(input_tensor)
    # Variables first, then dropout: with a graph seed, the order ops are created in fixes
    # the initial weights and dropout masks, which stay those of the original heads.
    if output_weights is None:
        output_weights = tf1.get_variable(
            "output_weights", [num_outputs, shape[-1]], dtype=input_tensor.dtype,
            initializer=modeling.create_initializer(initializer_range))
    output_bias = tf1.get_variable("output_bias", [num_outputs],
                                   initializer=tf1.zeros_initializer())
    if dropout_prob:
        input_tensor = modeling.dropout(input_tensor, dropout_prob)
    if len(shape) != 2:
        input_tensor = tf.reshape(input_tensor, [-1, shape[-1]])
    logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)
    return logits if len(shape) == 2 else tf.reshape(logits, shape[:-1] + [num_outputs])


def softmax_cross_entropy(logits, labels, weights=None):
    """Softmax cross-entropy per example and its (weighted) mean.

    Args:
      logits: float32 Tensor [..., C].
      labels: int Tensor [...] of class ids in [0, C).
      weights: optional float Tensor [...]: the loss is sum(weights * loss) / (sum(weights) +
        1e-5) (the 1e-5 keeps a batch with no weighted example finite); None: the plain mean.

    Returns:
      (loss scalar, per_example_loss [...], log_probs [..., C]), all float32.
    """
    num_classes = modeling.get_shape_list(logits)[-1]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_classes, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    if weights is None:
        return tf.reduce_mean(per_example_loss), per_example_loss, log_probs
    weights = tf.cast(weights, tf.float32)
    loss = tf.reduce_sum(weights * per_example_loss) / (tf.reduce_sum(weights) + 1e-5)
    return loss, per_example_loss, log_probs


def sigmoid_cross_entropy(logits, multi_hot_labels):
    """Binary cross-entropy of independent labels (multi-label classification).

    Args:
      logits: float32 Tensor [B, C].
      multi_hot_labels: int or float Tensor [B, C], 1 where the label applies.

    Returns:
      (loss scalar: the mean over examples and labels, per_example_loss [B]: the mean over
      the example's labels, probabilities [B, C] = sigmoid(logits)), all float32.
    """
    per_label_loss = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(multi_hot_labels, tf.float32), logits=logits)
    per_example_loss = tf.reduce_mean(per_label_loss, axis=-1)
    return tf.reduce_mean(per_example_loss), per_example_loss, tf.sigmoid(logits)


@dataclasses.dataclass(frozen=True)
class HfHead:
    """How one fine-tuning head is stored in both layouts (`bert_tf.tools.conversion`).

    Attributes:
      architecture: the Hugging Face class.
      google_scope: the head's variable scope ("" for the top-level classifier variables).
      hf_name: its HF module ("classifier" or "qa_outputs").
      has_pooler: whether the HF class has (and the head reads) the pooler.
      problem_type: config.json's problem_type.
      has_labels: whether label_list.txt names the outputs.
    """

    architecture: str
    google_scope: str
    hf_name: str
    has_pooler: bool
    problem_type: str | None = None
    has_labels: bool = True

    def names(self):
        """[(google variable, HF key)] of the head's weights and bias."""
        prefix = f"{self.google_scope}/" if self.google_scope else ""
        return [(f"{prefix}output_weights", f"{self.hf_name}.weight"),
                (f"{prefix}output_bias", f"{self.hf_name}.bias")]
