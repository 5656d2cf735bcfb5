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
from bert_tf import fileio, modeling, precision
from bert_tf.data import classification as classification_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import classification as classification_metrics
from bert_tf.tasks import finetuning, model_fn_parts

tf1 = tf.compat.v1

# Dropout on the pooled output while training (the original's keep_prob=0.9).
HEAD_DROPOUT_PROB = 0.1


def classifier_logits(pooled_output, num_labels, is_training, initializer_range=0.02):
    """The classification head.

    Args:
      pooled_output: float Tensor [B, H], the pooled [CLS] output (compute dtype).
      num_labels: number of classes (1 for regression).
      is_training: apply dropout 0.1 to `pooled_output`.
      initializer_range: stddev of the weights' truncated normal initializer.

    Returns:
      float32 Tensor [B, num_labels].
    """
    hidden_size = modeling.get_shape_list(pooled_output, expected_rank=2)[1]
    output_weights = tf1.get_variable(
        "output_weights", [num_labels, hidden_size], dtype=pooled_output.dtype,
        initializer=modeling.create_initializer(initializer_range))
    output_bias = tf1.get_variable("output_bias", [num_labels],
                                   initializer=tf1.zeros_initializer())
    if is_training:
        pooled_output = modeling.dropout(pooled_output, HEAD_DROPOUT_PROB)
    logits = tf.matmul(pooled_output, output_weights, transpose_b=True)
    # Softmax and loss in float32 whatever the compute dtype.
    return tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)


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
    num_labels = modeling.get_shape_list(logits)[-1]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    outputs = {"probabilities": tf.exp(log_probs),
               "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32)}
    return tf.reduce_mean(per_example_loss), per_example_loss, outputs


def model_fn_builder(bert_config, num_labels, is_regression=False, init_checkpoint=None,
                     learning_rate=5e-5, num_train_steps=1, num_warmup_steps=0,
                     optimizer="adamw", num_accumulation_steps=1, compute_dtype=tf.float32,
                     use_one_hot_embeddings=False, eval_collector=None):
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
    """

    def model_fn(features, labels, mode, params):
        del labels, params  # Labels travel in `features`, as in the TFRecords.
        is_training = mode == estimator_lib.ModeKeys.TRAIN
        model = model_fn_parts.bert_from_features(bert_config, features, is_training,
                                                  use_one_hot_embeddings, compute_dtype)
        with precision.compute_dtype_scope(compute_dtype):
            logits = classifier_logits(model.get_pooled_output(), num_labels, is_training,
                                       bert_config.initializer_range)
        if init_checkpoint:
            modeling.init_from_checkpoint(init_checkpoint)

        if mode == estimator_lib.ModeKeys.PREDICT:
            if is_regression:
                predictions = {"predictions": logits[:, 0]}
            else:
                predictions = {"probabilities": tf.nn.softmax(logits, axis=-1)}
            return estimator_lib.EstimatorSpec(mode=mode, predictions=predictions)

        label_ids = tf.reshape(features["label_ids"], [-1])
        loss, per_example_loss, outputs = classifier_loss(logits, label_ids, is_regression)
        if is_training:
            return model_fn_parts.train_spec(
                loss, features["input_ids"], learning_rate, num_train_steps, num_warmup_steps,
                optimizer, num_accumulation_steps, compute_dtype)

        is_real_example = tf.cast(tf.reshape(features["is_real_example"], [-1]), tf.float32)
        metrics = {"eval_loss": tf1.metrics.mean(per_example_loss, weights=is_real_example)}
        if not is_regression:
            metrics["eval_accuracy"] = tf1.metrics.accuracy(
                labels=label_ids, predictions=outputs["predictions"], weights=is_real_example)
        hooks = []
        if eval_collector is not None:
            hooks.append(eval_collector.hook({"predictions": outputs["predictions"],
                                              "label_ids": label_ids,
                                              "is_real_example": is_real_example}))
        return estimator_lib.EstimatorSpec(mode=mode, loss=loss, eval_metric_ops=metrics,
                                           evaluation_hooks=hooks)

    return model_fn


def feature_spec(seq_length, is_regression=False):
    """The classification TFRecord keys (SPEC section 6); label_ids is float for regression."""
    return {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([1], tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([1], tf.int64),
    }


def input_fn_builder(input_file, seq_length, is_training, is_regression=False, shuffle=True):
    """Returns an input_fn over classification TFRecords (see
    `finetuning.tfrecord_input_fn_builder`: fixed length for training, shuffled with
    `shuffle`; each eval / predict batch trimmed to its longest example)."""
    return finetuning.tfrecord_input_fn_builder(
        input_file, feature_spec(seq_length, is_regression), is_training, shuffle=shuffle)


def task_options(options):
    """The processor options from the script's flags (None: not given, the task's default)."""
    return {
        "text_a_column": options.text_a_column,
        "text_b_column": options.text_b_column,
        "label_column": options.label_column,
        "labels": options.labels,
        "header": options.has_header,
        "regression": options.regression,
        "language": options.language,
    }


def format_test_results(outputs):
    """test_results.tsv: per example, the class probabilities tab separated (regression: the
    predicted value), one line each, as the original."""
    return "".join("\t".join(str(float(value)) for value in np.atleast_1d(row)) + "\n"
                   for row in outputs)


def run_classifier(options):
    """Fine-tunes, evaluates, predicts and exports as `scripts/run_classifier.py` configures.

    Writes to --output_dir: train.tf_record / eval.tf_record / predict.tf_record (cached
    features, reused while the data and settings are unchanged), checkpoints,
    eval_results.txt (eval_loss, eval_accuracy, global_step, loss and the task's GLUE metrics)
    and test_results.tsv; with --export_dir a SavedModel (see `finetuning`).

    Args:
      options: an object with the script's flag values as attributes (absl FLAGS).

    Returns:
      The eval results dict if do_eval, else None.
    """
    finetuning.check_actions(options, ("do_train", "do_eval", "do_predict"))
    finetuning.check_run_options(options)
    processor = classification_data.get_processor(options.task_name, **task_options(options))
    task_name = options.task_name.strip().lower().replace("_", "-")
    finetuning.require_data_dir(options, f"the {task_name} files")
    bert_config, init_checkpoint, tokenizer = finetuning.prepare_run(options)
    train_examples, eval_examples, predict_examples = finetuning.read_splits(processor, options)
    is_regression = processor.is_regression
    label_list = None if is_regression else processor.get_labels()
    num_labels = 1 if is_regression else len(label_list)
    logging.info("Task %s: %s", task_name,
                 "regression" if is_regression else f"labels {label_list}")

    training = finetuning.training_args(options, train_examples)
    collector = finetuning.ExampleCollector()
    model_fn = model_fn_builder(bert_config, num_labels, is_regression=is_regression,
                                init_checkpoint=init_checkpoint, eval_collector=collector,
                                **training)
    estimator = finetuning.make_estimator(model_fn, options)
    cache_dir = finetuning.feature_cache_dir(estimator, options)

    def cached_features(examples, name):
        path = os.path.join(cache_dir, name)
        classification_data.cached_file_based_convert_examples_to_features(
            examples, label_list, options.max_seq_length, tokenizer, path)
        return path

    if options.do_train:
        train_file = cached_features(train_examples, "train.tf_record")
        logging.info("***** Training: %d examples, batch %d, %d steps *****",
                     len(train_examples), options.train_batch_size, training["num_train_steps"])
        estimator.train(input_fn_builder(train_file, options.max_seq_length, True,
                                         is_regression, shuffle=options.shuffle_train_input),
                        max_steps=training["num_train_steps"])
    if finetuning.stop_unless_chief(estimator, options):
        return None

    results = None
    if options.do_eval:
        eval_file = cached_features(eval_examples, "eval.tf_record")
        logging.info("***** Evaluating %d examples *****", len(eval_examples))
        results = finetuning.evaluate(estimator, input_fn_builder(
            eval_file, options.max_seq_length, False, is_regression))
        real = collector.column("is_real_example") > 0
        results.update(classification_metrics.glue_metrics(
            task_name, collector.column("predictions")[real],
            collector.column("label_ids")[real], is_regression=is_regression))
        path = fileio.write_eval_results(options.output_dir, results)
        logging.info("***** Eval results (%s) *****", path)
        for key in sorted(results):
            logging.info("  %s = %s", key, results[key])

    if options.do_predict:
        predict_file = cached_features(predict_examples, "predict.tf_record")
        logging.info("***** Predicting %d examples *****", len(predict_examples))
        key = "predictions" if is_regression else "probabilities"
        outputs = [prediction[key] for prediction in estimator.predict(
            input_fn_builder(predict_file, options.max_seq_length, False, is_regression))]
        if len(outputs) != len(predict_examples):
            raise BertTfError(f"predicted {len(outputs)} of {len(predict_examples)} test "
                              "examples; delete predict.tf_record in --output_dir and rerun.")
        path = os.path.join(options.output_dir, "test_results.tsv")
        fileio.atomic_write_text(path, format_test_results(outputs))
        logging.info("Wrote %s", path)

    if options.export_dir:
        # The order of the probabilities (regression: one predicted value).
        labels_text = "".join(f"{label}\n" for label in (label_list or ["prediction"]))
        finetuning.export_saved_model(estimator, options.export_dir,
                                      extra_files={"label_list.txt": labels_text})
    return results
