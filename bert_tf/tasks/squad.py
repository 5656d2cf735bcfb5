"""SQuAD span prediction: the start/end head, its loss, model_fn, input_fn and run_squad.

Head variables follow the original run_squad.py: `cls/squad/output_weights`
[2, H] and `cls/squad/output_bias` [2].
"""

import json
import os
import random

import tensorflow as tf
from absl import logging

from bert_tf import estimator as estimator_lib
from bert_tf import fileio, modeling, precision
from bert_tf import flags as flag_lib
from bert_tf.data import squad as squad_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import squad as squad_metrics
from bert_tf.tasks import finetuning, model_fn_parts, squad_postprocess

tf1 = tf.compat.v1


def squad_logits(sequence_output, initializer_range=0.02):
    """Start and end logits for every token.

    Args:
      sequence_output: float Tensor [B, S, H], the encoder output.
      initializer_range: stddev of the head's initializer.

    Returns:
      (start_logits [B, S], end_logits [B, S]), float32.
    """
    batch_size, seq_length, hidden_size = modeling.get_shape_list(
        sequence_output, expected_rank=3, name="sequence_output")
    output_weights = tf1.get_variable(
        "cls/squad/output_weights", [2, hidden_size], dtype=sequence_output.dtype,
        initializer=modeling.create_initializer(initializer_range))
    output_bias = tf1.get_variable("cls/squad/output_bias", [2],
                                   initializer=tf1.zeros_initializer())
    final_hidden_matrix = tf.reshape(sequence_output, [batch_size * seq_length, hidden_size])
    logits = tf.matmul(final_hidden_matrix, output_weights, transpose_b=True)  # [B*S, 2]
    logits = tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)
    logits = tf.reshape(logits, [batch_size, seq_length, 2])
    start_logits, end_logits = tf.unstack(tf.transpose(logits, [2, 0, 1]), axis=0)
    return start_logits, end_logits


def squad_loss(start_logits, end_logits, start_positions, end_positions):
    """Mean of the start and end cross-entropies.

    Args:
      start_logits, end_logits: float32 Tensors [B, S].
      start_positions, end_positions: int Tensors [B] or [B, 1].

    Returns:
      float32 scalar.
    """
    seq_length = modeling.get_shape_list(start_logits, expected_rank=2)[1]

    def position_loss(logits, positions):
        one_hot = tf.one_hot(tf.reshape(positions, [-1]), depth=seq_length, dtype=tf.float32)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        return -tf.reduce_mean(tf.reduce_sum(one_hot * log_probs, axis=-1))

    return (position_loss(start_logits, start_positions)
            + position_loss(end_logits, end_positions)) / 2.0


def model_fn_builder(bert_config, init_checkpoint=None, learning_rate=5e-5, num_train_steps=1,
                     num_warmup_steps=0, optimizer="adamw", num_accumulation_steps=1,
                     compute_dtype=tf.float32, use_one_hot_embeddings=False):
    """Returns a model_fn for SQuAD: TRAIN (span loss) and PREDICT (unique_ids + logits)."""

    def model_fn(features, labels, mode, params):
        del labels, params
        is_training = mode == estimator_lib.ModeKeys.TRAIN
        model = model_fn_parts.bert_from_features(bert_config, features, is_training,
                                                  use_one_hot_embeddings, compute_dtype)
        with precision.compute_dtype_scope(compute_dtype):
            start_logits, end_logits = squad_logits(model.get_sequence_output(),
                                                    bert_config.initializer_range)
        if init_checkpoint:
            modeling.init_from_checkpoint(init_checkpoint)

        if mode == estimator_lib.ModeKeys.TRAIN:
            loss = squad_loss(start_logits, end_logits, features["start_positions"],
                              features["end_positions"])
            return model_fn_parts.train_spec(
                loss, features["input_ids"], learning_rate, num_train_steps, num_warmup_steps,
                optimizer, num_accumulation_steps, compute_dtype)

        predictions = {"start_logits": start_logits, "end_logits": end_logits}
        if "unique_ids" in features:
            predictions["unique_ids"] = tf.reshape(features["unique_ids"], [-1])
        return estimator_lib.EstimatorSpec(mode=mode, predictions=predictions)

    return model_fn


def feature_spec(seq_length, is_training):
    """The SQuAD TFRecord keys (SPEC section 6), all int64; positions only for training."""
    spec = {"unique_ids": tf.io.FixedLenFeature([1], tf.int64)}
    for key in finetuning.SERVING_INPUT_NAMES:
        spec[key] = tf.io.FixedLenFeature([seq_length], tf.int64)
    if is_training:
        for key in ("start_positions", "end_positions", "is_impossible"):
            spec[key] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def input_fn_builder(input_file, seq_length, is_training, shuffle=True):
    """Returns an input_fn over SQuAD TFRecords written by `squad_data.FeatureWriter` (fixed
    length for training, shuffled with `shuffle`; each predict batch trimmed to its longest
    window)."""
    return finetuning.tfrecord_input_fn_builder(input_file,
                                                feature_spec(seq_length, is_training),
                                                is_training, shuffle=shuffle)


def predict_raw_results(estimator, input_fn):
    """Runs the model over a predict input_fn; returns a `RawResult` per feature, in order."""
    return [squad_postprocess.RawResult(unique_id=int(prediction["unique_ids"]),
                                        start_logits=[float(x) for x in
                                                      prediction["start_logits"]],
                                        end_logits=[float(x) for x in prediction["end_logits"]])
            for prediction in estimator.predict(input_fn)]


def _write_features(examples, tokenizer, options, path, is_training):
    """Windows `examples` into features written to the TFRecord `path` (whole or not at all).

    Returns:
      The features (for postprocessing predictions) when not training, else their number.
    """
    collected = []
    with squad_data.FeatureWriter(path, is_training=is_training) as writer:
        def output_fn(feature):
            writer.process_feature(feature)
            if not is_training:
                collected.append(feature)

        squad_data.convert_examples_to_features(
            examples, tokenizer, options.max_seq_length, options.doc_stride,
            options.max_query_length, is_training=is_training, output_fn=output_fn)
    logging.info("%d examples -> %d features in %s", len(examples), writer.num_features, path)
    return writer.num_features if is_training else collected


def run_squad(options):
    """Fine-tunes on and / or predicts SQuAD v1.1 / v2.0 as `scripts/run_squad.py` configures.

    Writes to --output_dir: train.tf_record / eval.tf_record (windowed features),
    checkpoints, predictions.json ({question id: answer}), nbest_predictions.json,
    null_odds.json (v2.0: null score minus best non-null score per question) and, when the
    predict file has answers, eval_results.json (the official metric, computed as
    `scripts/squad_evaluate.py PREDICT_FILE predictions.json [--version_2
    --na_prob_file null_odds.json]` would); with --export_dir a SavedModel returning
    start_logits and end_logits [batch, seq].

    Args:
      options: an object with the script's flag values as attributes (absl FLAGS).

    Returns:
      The eval results dict when computed, else None.
    """
    finetuning.check_actions(options, ("do_train", "do_predict"))
    finetuning.check_run_options(options)
    flag_lib.check_positive(options, "n_best_size", "max_answer_length")
    if options.do_train and not options.train_file:
        raise BertTfError("--train_file: required with --do_train; pass a SQuAD JSON file "
                          "such as train-v1.1.json.")
    if options.do_predict and not options.predict_file:
        raise BertTfError("--predict_file: required with --do_predict; pass a SQuAD JSON file "
                          "such as dev-v1.1.json.")
    squad_data.check_window_flags(options.max_seq_length, options.doc_stride,
                                  options.max_query_length)
    bert_config, init_checkpoint, tokenizer = finetuning.prepare_run(options)
    version_2 = options.version_2_with_negative

    # Read both files first, so bad data stops the run before any training.
    train_examples = predict_examples = None
    if options.do_train:
        train_examples = squad_data.read_squad_examples(
            options.train_file, is_training=True, version_2_with_negative=version_2,
            flag="train_file")
        # Shuffled once with the original's seed; the input pipeline shuffles records too.
        random.Random(12345).shuffle(train_examples)
    if options.do_predict:
        predict_examples = squad_data.read_squad_examples(
            options.predict_file, is_training=False, version_2_with_negative=version_2,
            flag="predict_file")
        has_answers = squad_metrics.dataset_has_answers(
            squad_data.load_squad_dataset(options.predict_file, flag="predict_file"))

    training = finetuning.training_args(options, train_examples)
    model_fn = model_fn_builder(bert_config, init_checkpoint=init_checkpoint, **training)
    estimator = finetuning.make_estimator(model_fn, options)

    if options.do_train:
        train_file = os.path.join(finetuning.feature_cache_dir(estimator, options),
                                  "train.tf_record")
        num_features = _write_features(train_examples, tokenizer, options, train_file, True)
        logging.info("***** Training: %d examples (%d features), batch %d, %d steps *****",
                     len(train_examples), num_features, options.train_batch_size,
                     training["num_train_steps"])
        estimator.train(input_fn_builder(train_file, options.max_seq_length, True,
                                         shuffle=options.shuffle_train_input),
                        max_steps=training["num_train_steps"])
    if finetuning.stop_unless_chief(estimator, options):
        return None

    results = None
    if options.do_predict:
        eval_file = os.path.join(options.output_dir, "eval.tf_record")
        predict_features = _write_features(predict_examples, tokenizer, options, eval_file,
                                           False)
        logging.info("***** Predicting: %d examples (%d features), batch %d *****",
                     len(predict_examples), len(predict_features), options.predict_batch_size)
        raw_results = predict_raw_results(
            estimator, input_fn_builder(eval_file, options.max_seq_length, False))
        paths = {name: os.path.join(options.output_dir, name) for name in
                 ("predictions.json", "nbest_predictions.json", "null_odds.json")}
        squad_postprocess.write_predictions(
            predict_examples, predict_features, raw_results, options.n_best_size,
            options.max_answer_length, options.do_lower_case, paths["predictions.json"],
            paths["nbest_predictions.json"], paths["null_odds.json"],
            version_2_with_negative=version_2,
            null_score_diff_threshold=options.null_score_diff_threshold,
            verbose_logging=options.verbose_logging)
        if has_answers:
            results = squad_metrics.evaluate_files(
                options.predict_file, paths["predictions.json"], version_2=version_2,
                na_prob_file=paths["null_odds.json"] if version_2 else None)
            path = os.path.join(options.output_dir, "eval_results.json")
            fileio.atomic_write_text(path, json.dumps(results, indent=2, sort_keys=True) + "\n")
            logging.info("***** Eval results (%s): %s", path, json.dumps(results))

    if options.export_dir:
        finetuning.export_saved_model(estimator, options.export_dir)
    return results
