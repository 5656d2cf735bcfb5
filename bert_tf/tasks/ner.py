"""Named-entity recognition: a token classification head, model_fn, input_fn and run_ner.

Head variables: `cls/ner/output_weights` [num_labels, H] and `cls/ner/output_bias`
[num_labels] on every position of the final encoder layer (dropout 0.1 while training). The
loss and the scores only count the first word piece of each word (`label_mask`, see
`bert_tf.data.ner`); entity-level precision / recall / F1 follow conlleval
(`bert_tf.metrics.ner`).
"""

import os

import tensorflow as tf
from absl import logging

from bert_tf import estimator as estimator_lib
from bert_tf import fileio, modeling, precision
from bert_tf.data import ner as ner_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import ner as ner_metrics
from bert_tf.tasks import finetuning, model_fn_parts

tf1 = tf.compat.v1

# Dropout on the encoder output while training, as for the classifier head.
HEAD_DROPOUT_PROB = 0.1
# The [max_seq_length] features of a NER record; eval / predict batches trim them all.
SEQUENCE_KEYS = ("input_ids", "input_mask", "segment_ids", "label_ids", "label_mask")


def token_logits(sequence_output, num_labels, is_training, initializer_range=0.02):
    """The token classification head.

    Args:
      sequence_output: float Tensor [B, S, H], the final encoder layer (compute dtype).
      num_labels: number of tags.
      is_training: apply dropout 0.1 to `sequence_output`.
      initializer_range: stddev of the weights' truncated normal initializer.

    Returns:
      float32 Tensor [B, S, num_labels].
    """
    batch_size, seq_length, hidden_size = modeling.get_shape_list(
        sequence_output, expected_rank=3, name="sequence_output")
    with tf1.variable_scope("cls/ner"):
        output_weights = tf1.get_variable(
            "output_weights", [num_labels, hidden_size], dtype=sequence_output.dtype,
            initializer=modeling.create_initializer(initializer_range))
        output_bias = tf1.get_variable("output_bias", [num_labels],
                                       initializer=tf1.zeros_initializer())
    if is_training:
        sequence_output = modeling.dropout(sequence_output, HEAD_DROPOUT_PROB)
    matrix = tf.reshape(sequence_output, [batch_size * seq_length, hidden_size])
    logits = tf.matmul(matrix, output_weights, transpose_b=True)  # [B*S, num_labels]
    logits = tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)
    return tf.reshape(logits, [batch_size, seq_length, num_labels])


def token_loss(logits, label_ids, label_weights):
    """Cross-entropy averaged over the weighted positions (first word pieces).

    Args:
      logits: float32 [B, S, num_labels].
      label_ids: int [B, S] tag ids.
      label_weights: float [B, S], 1.0 where a tag is scored, 0.0 elsewhere.

    Returns:
      (loss scalar, per_token_loss [B, S]), float32.
    """
    num_labels = modeling.get_shape_list(logits)[-1]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(label_ids, depth=num_labels, dtype=tf.float32)
    per_token_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    # 1e-5 keeps a batch without scored tokens finite.
    loss = tf.reduce_sum(per_token_loss * label_weights) / (tf.reduce_sum(label_weights) + 1e-5)
    return loss, per_token_loss


def model_fn_builder(bert_config, num_labels, init_checkpoint=None, learning_rate=5e-5,
                     num_train_steps=1, num_warmup_steps=0, optimizer="adamw",
                     num_accumulation_steps=1, compute_dtype=tf.float32,
                     use_one_hot_embeddings=False, eval_collector=None):
    """Returns a model_fn(features, labels, mode, params) for token classification.

    Features: input_ids, input_mask, segment_ids [B, S]; label_ids, label_mask [B, S] and
    is_real_example [B, 1] for TRAIN / EVAL. PREDICT returns {"tag_ids": int32 [B, S]} (plus
    the input's "label_mask" when it has one); the export returns {"tag_ids"}.

    Args: as `classification.model_fn_builder`; `eval_collector` receives each eval
      example's "tag_ids" and "label_mask".
    """

    def model_fn(features, labels, mode, params):
        del labels, params
        is_training = mode == estimator_lib.ModeKeys.TRAIN
        model = model_fn_parts.bert_from_features(bert_config, features, is_training,
                                                  use_one_hot_embeddings, compute_dtype)
        with precision.compute_dtype_scope(compute_dtype):
            logits = token_logits(model.get_sequence_output(), num_labels, is_training,
                                  bert_config.initializer_range)
        if init_checkpoint:
            modeling.init_from_checkpoint(init_checkpoint)
        tag_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)

        if mode == estimator_lib.ModeKeys.PREDICT:
            predictions = {"tag_ids": tag_ids}
            if "label_mask" in features:
                predictions["label_mask"] = features["label_mask"]
            return estimator_lib.EstimatorSpec(mode=mode, predictions=predictions)

        is_real_example = tf.cast(tf.reshape(features["is_real_example"], [-1, 1]), tf.float32)
        label_weights = tf.cast(features["label_mask"], tf.float32) * is_real_example
        loss, per_token_loss = token_loss(logits, features["label_ids"], label_weights)
        if is_training:
            return model_fn_parts.train_spec(
                loss, features["input_ids"], learning_rate, num_train_steps, num_warmup_steps,
                optimizer, num_accumulation_steps, compute_dtype)

        metrics = {
            "eval_loss": tf1.metrics.mean(per_token_loss, weights=label_weights),
            # Tag accuracy over scored words (the first piece of each word).
            "eval_accuracy": tf1.metrics.accuracy(labels=features["label_ids"],
                                                  predictions=tag_ids, weights=label_weights),
        }
        hooks = []
        if eval_collector is not None:
            hooks.append(eval_collector.hook({"tag_ids": tag_ids,
                                              "label_mask": features["label_mask"]}))
        return estimator_lib.EstimatorSpec(mode=mode, loss=loss, eval_metric_ops=metrics,
                                           evaluation_hooks=hooks)

    return model_fn


def feature_spec(seq_length):
    """The NER TFRecord keys (see `bert_tf.data.ner`), all int64."""
    spec = {key: tf.io.FixedLenFeature([seq_length], tf.int64) for key in SEQUENCE_KEYS}
    spec["is_real_example"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def input_fn_builder(input_file, seq_length, is_training, shuffle=True):
    """Returns an input_fn over NER TFRecords (fixed length for training, shuffled with
    `shuffle`; each eval / predict batch trimmed to its longest example)."""
    return finetuning.tfrecord_input_fn_builder(input_file, feature_spec(seq_length),
                                                is_training, sequence_keys=SEQUENCE_KEYS,
                                                shuffle=shuffle)


def word_tags(outputs, examples, label_list):
    """Per example, the predicted tag of every word (words cut by truncation get "O").

    Args:
      outputs: per example, a dict with "tag_ids" and "label_mask" (same length).
      examples: the `NerExample`s, in the same order.
      label_list: the tags.
    """
    outputs = list(outputs)
    if len(outputs) != len(examples):
        raise BertTfError(f"NER: {len(outputs)} predicted sentences for {len(examples)} "
                          "examples; delete the cached .tf_record files in --output_dir and "
                          "rerun.")
    return [ner_data.complete_predictions(
        example, ner_data.word_predictions(output["tag_ids"], output["label_mask"], label_list))
        for output, example in zip(outputs, examples, strict=True)]


def run_ner(options):
    """Fine-tunes, evaluates, predicts and exports as `scripts/run_ner.py` configures.

    Reads CoNLL files from --data_dir (train.txt, dev.txt, test.txt; see `bert_tf.data.ner`
    for other accepted names); the tag list is "O" then the train file's other tags. Writes to
    --output_dir: cached features (*.tf_record), checkpoints, label_list.txt (tag of each id),
    eval_results.txt (eval_loss, eval_accuracy, global_step, loss and conlleval's precision,
    recall, f1, accuracy, overall and per entity type), eval_predictions.txt and
    test_predictions.txt ("word gold predicted" a line, a blank line between sentences: the
    conlleval input format); with --export_dir a SavedModel returning tag_ids.

    Returns:
      The eval results dict if do_eval, else None.
    """
    finetuning.check_actions(options, ("do_train", "do_eval", "do_predict"))
    finetuning.check_run_options(options)
    finetuning.require_data_dir(options, "train.txt, dev.txt and test.txt")
    bert_config, init_checkpoint, tokenizer = finetuning.prepare_run(options)
    processor = ner_data.NerProcessor(data_dir=options.data_dir)
    label_list = processor.get_labels()
    train_examples, eval_examples, predict_examples = finetuning.read_splits(processor, options)
    logging.info("NER tags: %s", label_list)

    training = finetuning.training_args(options, train_examples)
    collector = finetuning.ExampleCollector()
    model_fn = model_fn_builder(bert_config, len(label_list), init_checkpoint=init_checkpoint,
                                eval_collector=collector, **training)
    estimator = finetuning.make_estimator(model_fn, options)
    label_file_text = "".join(f"{label}\n" for label in label_list)
    if finetuning.is_chief(estimator, options):
        fileio.atomic_write_text(os.path.join(options.output_dir, "label_list.txt"),
                                 label_file_text)
    cache_dir = finetuning.feature_cache_dir(estimator, options)

    def cached_features(examples, name):
        path = os.path.join(cache_dir, name)
        ner_data.cached_file_based_convert_examples_to_features(
            examples, label_list, options.max_seq_length, tokenizer, path)
        return path

    if options.do_train:
        train_file = cached_features(train_examples, "train.tf_record")
        logging.info("***** Training: %d sentences, batch %d, %d steps *****",
                     len(train_examples), options.train_batch_size, training["num_train_steps"])
        estimator.train(input_fn_builder(train_file, options.max_seq_length, True,
                                         shuffle=options.shuffle_train_input),
                        max_steps=training["num_train_steps"])
    if finetuning.stop_unless_chief(estimator, options):
        return None

    results = None
    if options.do_eval:
        eval_file = cached_features(eval_examples, "eval.tf_record")
        logging.info("***** Evaluating %d sentences *****", len(eval_examples))
        results = finetuning.evaluate(estimator, input_fn_builder(
            eval_file, options.max_seq_length, False))
        predicted = word_tags(collector.examples(), eval_examples, label_list)
        evaluation = ner_metrics.evaluate([e.labels for e in eval_examples], predicted)
        results.update(evaluation.to_dict())
        path = fileio.write_eval_results(options.output_dir, results)
        ner_data.write_conll_predictions(os.path.join(options.output_dir,
                                                      "eval_predictions.txt"),
                                         eval_examples, predicted)
        logging.info("***** Eval results (%s) *****\n%s", path,
                     ner_metrics.format_report(evaluation))

    if options.do_predict:
        predict_file = cached_features(predict_examples, "predict.tf_record")
        logging.info("***** Predicting %d sentences *****", len(predict_examples))
        outputs = estimator.predict(input_fn_builder(predict_file, options.max_seq_length,
                                                     False))
        predicted = word_tags(outputs, predict_examples, label_list)
        path = os.path.join(options.output_dir, "test_predictions.txt")
        ner_data.write_conll_predictions(path, predict_examples, predicted)
        logging.info("Wrote %s", path)

    if options.export_dir:
        finetuning.export_saved_model(estimator, options.export_dir,
                                      extra_files={"label_list.txt": label_file_text})
    return results
