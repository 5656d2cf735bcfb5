"""SQuAD span prediction: the start/end head, its loss, model_fn, input_fn and run_squad.

Head variables follow the original run_squad.py: `cls/squad/output_weights`
[2, H] and `cls/squad/output_bias` [2].
"""

import dataclasses
import functools
import json
import os
import random

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.data import input_pipeline
from bert_tf.data import squad as squad_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import squad as squad_metrics
from bert_tf.tasks import base, heads, registry, squad_postprocess
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import runner
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1


def squad_logits(sequence_output, initializer_range=0.02):
    """Start and end logits for every token.

    Args:
      sequence_output: float Tensor [B, S, H], the encoder output.
      initializer_range: stddev of the head's initializer.

    Returns:
      (start_logits [B, S], end_logits [B, S]), float32.
    """
    with tf1.variable_scope("cls/squad"):
        logits = heads.output_projection(sequence_output, 2, initializer_range)  # [B, S, 2]
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
    start_loss = heads.softmax_cross_entropy(start_logits, tf.reshape(start_positions, [-1]))[0]
    end_loss = heads.softmax_cross_entropy(end_logits, tf.reshape(end_positions, [-1]))[0]
    return (start_loss + end_loss) / 2.0


def model_fn_builder(encoder, training=None):
    """Returns a model_fn for SQuAD: TRAIN (span loss) and PREDICT (unique_ids + logits).

    Args: as `classification.model_fn_builder`.
    """
    training = training or TrainingStep()
    initializer_range = encoder.bert_config.initializer_range
    # The span softmax runs over every position, padding included, as in Google's run_squad.
    encoder = dataclasses.replace(encoder, padding_free=False)

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params
        start_logits, end_logits = encoder.build(
            features, purpose, lambda model, _: squad_logits(model.get_sequence_output(),
                                                             initializer_range))

        if mode == estimator_lib.ModeKeys.TRAIN:
            loss = squad_loss(start_logits, end_logits, features["start_positions"],
                              features["end_positions"])
            return training.spec(loss, features["input_ids"])

        predictions = {"start_logits": start_logits, "end_logits": end_logits}
        if "unique_ids" in features:
            predictions["unique_ids"] = tf.reshape(features["unique_ids"], [-1])
        return estimator_lib.EstimatorSpec(mode=mode, predictions=predictions)

    return model_fn


def feature_spec(seq_length, is_training):
    """The SQuAD TFRecord keys (docs/compatibility.md §3), all int64; positions only for
    training."""
    spec = {"unique_ids": tf.io.FixedLenFeature([1], tf.int64)}
    for key in input_pipeline.SEQUENCE_FEATURES:
        spec[key] = tf.io.FixedLenFeature([seq_length], tf.int64)
    if is_training:
        for key in ("start_positions", "end_positions", "is_impossible"):
            spec[key] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def predict_raw_results(estimator, input_fn, checkpoint_path=None):
    """Runs the model (`checkpoint_path`, default the latest) over a predict input_fn;
    returns a `RawResult` per feature, in order."""
    return [squad_postprocess.RawResult(unique_id=int(prediction["unique_ids"]),
                                        start_logits=[float(x) for x in
                                                      prediction["start_logits"]],
                                        end_logits=[float(x) for x in prediction["end_logits"]])
            for prediction in estimator.predict(input_fn, checkpoint_path=checkpoint_path)]


@registry.register
class SquadTask(base.FinetuningTask):
    """SQuAD v1.1 / v2.0 span prediction.

    Writes to --output_dir: train.tf_record / eval.tf_record (windowed features),
    checkpoints, predictions.json ({question id: answer}), nbest_predictions.json,
    null_odds.json (v2.0: null score minus best non-null score per question) and, when the
    predict file has answers, eval_results.json (the official metric, computed as
    `scripts/squad_evaluate.py PREDICT_FILE predictions.json [--version_2
    --na_prob_file null_odds.json]` would, so Chinese data gets the CMRC 2018 metric); with
    --export_dir a SavedModel returning start_logits and end_logits [batch, seq].
    """

    actions = ("do_train", "do_predict")
    eval_split = "predict"  # Evaluated on the answers of --predict_file.
    eval_flags = "--do_predict and a --predict_file with answers"
    feature_files = {"train": "train.tf_record", "predict": "eval.tf_record"}
    name = "squad"
    text_inputs = ("question", "context")
    predict_fields = (("question", "context"), ())
    predicts = True
    hf_heads = {"squad": heads.HfHead("BertForQuestionAnswering", "cls/squad", "qa_outputs",
                                      False, has_labels=False)}
    benchmarks = 1
    # The span softmax runs over all max_seq_length positions, padding included (as the
    # original), so a batch cut to a length bucket would train on another loss; and SQuAD's
    # doc_stride windows are mostly full length anyway.
    length_buckets = False
    # The windowing and post-processing flags a Predictor of the export uses.
    predict_flags = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                     "version_2_with_negative", "null_score_diff_threshold")

    @classmethod
    def check_predict_config(cls, config):
        squad_data.check_window_flags(config.max_seq_length, config.doc_stride,
                                      config.max_query_length)

    @classmethod
    def predict_model_fn(cls, encoder, config):
        del config
        return model_fn_builder(encoder)

    @classmethod
    def answer(cls, predictor, records, options):
        del options
        return predictor.answer([r["question"] for r in records],
                                [r["context"] for r in records])

    @classmethod
    def warmup_query_length(cls, settings):
        return settings.get("max_query_length")

    @classmethod
    def step_model_fn(cls, encoder, training, num_labels):
        del num_labels
        return model_fn_builder(encoder, training)

    @classmethod
    def step_features(cls, seq_length, max_predictions_per_seq, num_labels, vocab_size):
        del max_predictions_per_seq, num_labels, vocab_size
        return [("start_positions", None, tf.int32, seq_length),
                ("end_positions", None, tf.int32, seq_length)]

    @classmethod
    def forward_features(cls, batch_size):
        # PREDICT returns each window's unique id with its logits.
        return {"unique_ids": tf.range(batch_size, dtype=tf.int32)}

    @classmethod
    def head_flops(cls, bert_config, seq_length, max_predictions_per_seq, num_labels):
        del max_predictions_per_seq, num_labels
        return 2 * seq_length * bert_config.hidden_size * 2  # Start and end logits.

    def __init__(self, task_options, options):
        """`task_options`: `bert_tf.options.SquadOptions`; `options`:
        `bert_tf.options.FinetuneOptions`."""
        super().__init__(task_options, options)
        self.predict_features = None  # Of the predict split, once `write_features` wrote it.

    @functools.cached_property
    def has_answers(self):
        """Whether the run predicts (--do_predict) a --predict_file whose questions have
        answers: then it computes the official metric."""
        t = self.task_options
        return bool(self.options.do_predict and t.predict_file and
                    squad_metrics.dataset_has_answers(
                        squad_data.load_squad_dataset(t.predict_file, flag="predict_file")))

    def check(self):
        t = self.task_options
        options = self.options
        runner.check_positive(t, "n_best_size", "max_answer_length")
        if options.train.do_train and not t.train_file:
            raise BertTfError("--train_file: required with --do_train; pass a SQuAD JSON file "
                              "such as train-v1.1.json.")
        if options.do_predict and not t.predict_file:
            raise BertTfError("--predict_file: required with --do_predict; pass a SQuAD JSON "
                              "file such as dev-v1.1.json.")
        squad_data.check_window_flags(options.model.max_seq_length, t.doc_stride,
                                      t.max_query_length)

    def read_examples(self):
        t, options = self.task_options, self.options
        version_2 = t.version_2_with_negative
        train_examples = predict_examples = None
        if options.train.do_train:
            train_examples = squad_data.read_squad_examples(
                t.train_file, is_training=True, version_2_with_negative=version_2,
                flag="train_file")
            # Shuffled once with the original's seed; the input pipeline shuffles records too.
            random.Random(12345).shuffle(train_examples)
        if options.do_predict:
            predict_examples = squad_data.read_squad_examples(
                t.predict_file, is_training=False, version_2_with_negative=version_2,
                flag="predict_file")
        return train_examples, None, predict_examples

    def can_evaluate(self, splits):
        return splits["predict"] is not None and self.has_answers

    def model_fn(self, encoder, training):
        return model_fn_builder(encoder, training)

    def write_features(self, examples, path, tokenizer, is_training):
        """Windows `examples` into features at `path`; keeps the predict features for
        post-processing."""
        t = self.task_options
        collected = []
        with squad_data.FeatureWriter(path, is_training=is_training) as writer:
            def output_fn(feature):
                writer.process_feature(feature)
                if not is_training:
                    collected.append(feature)

            squad_data.convert_examples_to_features(
                examples, tokenizer, self.options.model.max_seq_length, t.doc_stride,
                t.max_query_length, is_training=is_training, output_fn=output_fn)
        logging.info("%d examples -> %d features in %s", len(examples), writer.num_features,
                     path)
        if not is_training:
            self.predict_features = collected

    def feature_spec(self, seq_length, is_training):
        return feature_spec(seq_length, is_training)

    def predict_settings(self):
        return {name: getattr(self.task_options, name) for name in self.predict_flags}

    def metric_names(self):
        if self.task_options.version_2_with_negative:
            return None  # The v2.0 metric's keys depend on the questions (HasAns_*, ...).
        return ["exact_match", "f1"]

    def evaluate(self, estimator, input_fn, examples, checkpoint_path=None):
        """The official metric of the predictions on --predict_file (no files written)."""
        t = self.task_options
        raw_results = predict_raw_results(estimator, input_fn, checkpoint_path)
        predictions, _, null_odds = squad_postprocess.compute_predictions(
            examples, self.predict_features, raw_results, t.n_best_size, t.max_answer_length,
            self.options.tokenizer.do_lower_case,
            version_2_with_negative=t.version_2_with_negative,
            null_score_diff_threshold=t.null_score_diff_threshold)
        dataset = squad_data.load_squad_dataset(t.predict_file, flag="predict_file")
        return squad_metrics.evaluate(dataset, predictions,
                                      version_2=t.version_2_with_negative, na_probs=null_odds,
                                      language="auto")

    def predict(self, estimator, input_fn, examples, checkpoint_path=None):
        t, options = self.task_options, self.options
        raw_results = predict_raw_results(estimator, input_fn, checkpoint_path)
        paths = {name: os.path.join(options.run.output_dir, name) for name in
                 ("predictions.json", "nbest_predictions.json", "null_odds.json")}
        squad_postprocess.write_predictions(
            examples, self.predict_features, raw_results, t.n_best_size, t.max_answer_length,
            options.tokenizer.do_lower_case, paths["predictions.json"],
            paths["nbest_predictions.json"], paths["null_odds.json"],
            version_2_with_negative=t.version_2_with_negative,
            null_score_diff_threshold=t.null_score_diff_threshold,
            verbose_logging=t.verbose_logging)
        if not self.has_answers:
            return None
        results = squad_metrics.evaluate_files(
            t.predict_file, paths["predictions.json"], version_2=t.version_2_with_negative,
            na_prob_file=paths["null_odds.json"] if t.version_2_with_negative else None,
            language="auto")
        path = os.path.join(options.run.output_dir, "eval_results.json")
        fileio.atomic_write_text(path, json.dumps(results, indent=2, sort_keys=True) + "\n")
        logging.info("***** Eval results (%s): %s", path, json.dumps(results))
        return results

