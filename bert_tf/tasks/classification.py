"""Sentence (pair) classification and regression: the head, model_fn, input_fn, run_classifier.

The head follows the original run_classifier.py: top-level variables `output_weights`
[num_labels, H] and `output_bias` [num_labels] on the pooled [CLS] output, with dropout 0.1
while training. Regression tasks (STS-B, or a csv/tsv task with --regression) use one output
and a mean squared error loss.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import estimator as estimator_lib
from bert_tf import fileio, heads
from bert_tf.data import classification as classification_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import classification as classification_metrics
from bert_tf.tasks import finetuning, model_fn_parts, runner

tf1 = tf.compat.v1

def classifier_logits(pooled_output, num_labels, is_training, initializer_range=0.02):
    """The classification head: top-level `output_weights` / `output_bias`.

    Args:
      pooled_output: float Tensor [B, H], the pooled [CLS] output (compute dtype).
      num_labels: number of classes (1 for regression).
      is_training: apply dropout 0.1 to `pooled_output`.
      initializer_range: stddev of the weights' truncated normal initializer.

    Returns:
      float32 Tensor [B, num_labels].
    """
    return heads.output_projection(pooled_output, num_labels, initializer_range,
                                   dropout_prob=heads.HEAD_DROPOUT_PROB if is_training else 0.0)


def classifier_loss(logits, labels, is_regression):
    """Per-example and mean loss, and the predictions.

    Args:
      logits: float32 [B, num_labels] ([B, 1] for regression).
      labels: [B] class ids (int) or target values (float, regression).
      is_regression: mean squared error on logits[:, 0] instead of softmax cross-entropy.

    Returns:
      (loss scalar, per_example_loss [B], outputs): outputs is a dict with "probabilities"
      [B, num_labels] and "predictions" [B] (the argmax id), or for regression
      "predictions" [B] (the predicted value).
    """
    if is_regression:
        predictions = logits[:, 0]
        per_example_loss = tf.square(predictions - tf.cast(labels, tf.float32))
        return tf.reduce_mean(per_example_loss), per_example_loss, {"predictions": predictions}
    loss, per_example_loss, log_probs = heads.softmax_cross_entropy(logits, labels)
    outputs = {"probabilities": tf.exp(log_probs),
               "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32)}
    return loss, per_example_loss, outputs


def model_fn_builder(bert_config, num_labels, is_regression=False, init_checkpoint=None,
                     learning_rate=5e-5, num_train_steps=1, num_warmup_steps=0,
                     optimizer="adamw", num_accumulation_steps=1, compute_dtype=tf.float32,
                     use_one_hot_embeddings=False, eval_collector=None, trainable=None):
    """Returns a model_fn(features, labels, mode, params) for classification / regression.

    Features: input_ids, input_mask, segment_ids [B, S]; label_ids [B] or [B, 1] and
    is_real_example (TRAIN / EVAL). PREDICT and the export return {"probabilities":
    [B, num_labels]} (regression: {"predictions": [B]}).

    Args:
      bert_config: `BertConfig`.
      num_labels: classes (1 for regression).
      is_regression: regression head (MSE) instead of classification.
      init_checkpoint: checkpoint to initialize same-named variables from.
      learning_rate, num_train_steps, num_warmup_steps, optimizer, num_accumulation_steps:
        see `optimization.create_optimizer`.
      compute_dtype: tf.float32, tf.bfloat16 or tf.float16.
      use_one_hot_embeddings: one-hot embedding lookup (TPUs).
      eval_collector: a `finetuning.ExampleCollector` that receives each eval example's
        "predictions", "label_ids" and "is_real_example".
      trainable: an `optimization.TrainableSelection` (frozen layers), or None.
    """

    encoder = model_fn_parts.Encoder(bert_config, init_checkpoint, compute_dtype,
                                     use_one_hot_embeddings)

    def head(model, is_training):
        return classifier_logits(model.get_pooled_output(), num_labels, is_training,
                                 bert_config.initializer_range)

    def model_fn(features, labels, mode, params):
        del labels, params  # Labels travel in `features`, as in the TFRecords.
        logits = encoder.build(features, mode, head)

        if mode == estimator_lib.ModeKeys.PREDICT:
            if is_regression:
                predictions = {"predictions": logits[:, 0]}
            else:
                predictions = {"probabilities": tf.nn.softmax(logits, axis=-1)}
            return estimator_lib.EstimatorSpec(mode=mode, predictions=predictions)

        label_ids = tf.reshape(features["label_ids"], [-1])
        loss, per_example_loss, outputs = classifier_loss(logits, label_ids, is_regression)
        if mode == estimator_lib.ModeKeys.TRAIN:
            return model_fn_parts.train_spec(
                loss, features["input_ids"], learning_rate, num_train_steps, num_warmup_steps,
                optimizer, num_accumulation_steps, compute_dtype, trainable=trainable)

        return eval_spec(loss, per_example_loss, outputs, label_ids,
                         features["is_real_example"], is_regression, eval_collector)

    return model_fn


def eval_spec(loss, per_example_loss, outputs, label_ids, is_real_example, is_regression,
              eval_collector=None):
    """The EVAL-mode EstimatorSpec: eval_loss (and eval_accuracy) over the real examples.

    Args:
      loss: float32 scalar; per_example_loss: [B]; outputs: see `classifier_loss`.
      label_ids: [B] gold labels; is_real_example: [B] or [B, 1], 0 for padding examples.
      is_regression: no accuracy for regression.
      eval_collector: a `finetuning.ExampleCollector` receiving each example's
        "predictions", "label_ids" and "is_real_example".
    """
    is_real_example = tf.cast(tf.reshape(is_real_example, [-1]), tf.float32)
    metrics = {"eval_loss": tf1.metrics.mean(per_example_loss, weights=is_real_example)}
    if not is_regression:
        metrics["eval_accuracy"] = tf1.metrics.accuracy(
            labels=label_ids, predictions=outputs["predictions"], weights=is_real_example)
    hooks = []
    if eval_collector is not None:
        hooks.append(eval_collector.hook({"predictions": outputs["predictions"],
                                          "label_ids": label_ids,
                                          "is_real_example": is_real_example}))
    return estimator_lib.EstimatorSpec(mode=estimator_lib.ModeKeys.EVAL, loss=loss,
                                       eval_metric_ops=metrics, evaluation_hooks=hooks)


def feature_spec(seq_length, is_regression=False):
    """The classification TFRecord keys (SPEC section 6); label_ids is float for regression."""
    return {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([1], tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([1], tf.int64),
    }


def format_test_results(outputs):
    """test_results.tsv: per example, the class probabilities tab separated (regression: the
    predicted value), one line each, as the original."""
    return "".join("\t".join(str(float(value)) for value in np.atleast_1d(row)) + "\n"
                   for row in outputs)


class ClassificationTask(finetuning.FinetuningTask):
    """GLUE, XNLI and csv/tsv sentence (pair) classification and regression.

    Writes to --output_dir: train.tf_record / eval.tf_record / predict.tf_record (cached
    features, reused while the data and settings are unchanged), checkpoints,
    eval_results.txt (eval_loss, eval_accuracy, global_step, loss and the task's GLUE metrics)
    and test_results.tsv; with --export_dir a SavedModel (see `finetuning`).
    """

    cached_features = staticmethod(
        classification_data.cached_file_based_convert_examples_to_features)

    def __init__(self, task_options):
        """`task_options`: `bert_tf.options.ClassifierOptions`."""
        self.task_options = task_options
        self.task_name = classification_data.normalize_task_name(task_options.task_name)
        self.processor = None
        self.collector = finetuning.ExampleCollector()

    @property
    def is_regression(self):
        return self.processor.is_regression

    def check(self, options):
        del options
        t = self.task_options
        self.processor = classification_data.get_processor(
            t.task_name, text_a_column=t.text_a_column, text_b_column=t.text_b_column,
            label_column=t.label_column, labels=t.labels, header=t.has_header,
            regression=t.regression, language=t.language)
        finetuning.require_data_dir(t.data_dir, f"the {self.task_name} files")

    def read_examples(self, options):
        splits = finetuning.read_splits(self.processor, self.task_options.data_dir, options)
        self.label_list = None if self.is_regression else self.processor.get_labels()
        logging.info("Task %s: %s", self.task_name,
                     "regression" if self.is_regression else f"labels {self.label_list}")
        return splits

    def model_fn(self, bert_config, init_checkpoint, training):
        num_labels = 1 if self.is_regression else len(self.label_list)
        return model_fn_builder(bert_config, num_labels, is_regression=self.is_regression,
                                init_checkpoint=init_checkpoint, eval_collector=self.collector,
                                **training)

    def feature_spec(self, seq_length, is_training):
        del is_training
        return feature_spec(seq_length, self.is_regression)

    def metric_names(self, options):
        del options
        # The GLUE metrics of this task are the keys glue_metrics returns for any input.
        glue = classification_metrics.glue_metrics(self.task_name, [0.0, 1.0], [0.0, 1.0],
                                                   is_regression=self.is_regression)
        streaming = ["eval_loss", "loss"] + ([] if self.is_regression else ["eval_accuracy"])
        return sorted([*glue, *streaming])

    def evaluate(self, estimator, input_fn, examples, options, checkpoint_path=None):
        results = runner.evaluate(estimator, input_fn, checkpoint_path=checkpoint_path)
        real = self.collector.column("is_real_example") > 0
        results.update(classification_metrics.glue_metrics(
            self.task_name, self.collector.column("predictions")[real],
            self.collector.column("label_ids")[real], is_regression=self.is_regression))
        return results

    def predict(self, estimator, input_fn, examples, options, checkpoint_path=None):
        key = "predictions" if self.is_regression else "probabilities"
        outputs = [prediction[key] for prediction in
                   estimator.predict(input_fn, checkpoint_path=checkpoint_path)]
        if len(outputs) != len(examples):
            raise BertTfError(f"predicted {len(outputs)} of {len(examples)} test examples; "
                              "delete predict.tf_record in --output_dir and rerun.")
        path = os.path.join(options.run.output_dir, "test_results.tsv")
        fileio.atomic_write_text(path, format_test_results(outputs))
        logging.info("Wrote %s", path)
        return None

    def export_files(self):
        # The order of the probabilities (regression: one predicted value).
        labels = self.label_list or ["prediction"]
        return {"label_list.txt": "".join(f"{label}\n" for label in labels)}

