"""Multiple choice (SWAG, or your own jsonl): one score per choice, softmax over the choices.

Each choice is its own sequence `[CLS] context [SEP] ending [SEP]`; the encoder runs on all
B * num_choices sequences, the pooled [CLS] output of each goes through a one-output projection
(variables `cls/multiple_choice/output_weights` [1, H] and `cls/multiple_choice/output_bias`
[1]; Hugging Face's `BertForMultipleChoice` names them `classifier.weight` / `classifier.bias`,
see `bert_tf.tools.conversion`), and the num_choices scores of a question are its logits. The
loss is the softmax cross-entropy over the choices; the metric is accuracy.

Export: the signatures take input_ids, input_mask, segment_ids [batch, num_choices * seq]
(each choice's sequence of length seq one after another, as in the TFRecords) and return
{"probabilities": [batch, num_choices]}.
"""

import functools
import os

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.data import input_pipeline
from bert_tf.data import multiple_choice as mc_data
from bert_tf.errors import BertTfError
from bert_tf.tasks import base, classification, heads, registry
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import runner
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1

# The head's variable scope (see the module docstring).
HEAD_SCOPE = "cls/multiple_choice"


def choice_logits(pooled_output, num_choices, is_training, initializer_range=0.02):
    """One score per choice: [B * num_choices, H] pooled outputs -> float32 [B, num_choices]."""
    with tf1.variable_scope(HEAD_SCOPE):
        scores = heads.output_projection(
            pooled_output, 1, initializer_range,
            dropout_prob=heads.HEAD_DROPOUT_PROB if is_training else 0.0)
    return tf.reshape(scores, [-1, num_choices])


def flatten_choices(features, num_choices):
    """The [B, num_choices * S] sequence features as [B * num_choices, S]."""
    out = dict(features)
    for key in input_pipeline.SEQUENCE_FEATURES:
        value = features[key]
        seq = tf.shape(value)[1] // num_choices
        out[key] = tf.reshape(value, [-1, seq])
    return out


def model_fn_builder(encoder, num_choices, training=None):
    """Returns a model_fn(features, labels, mode, params) for multiple choice.

    Features: input_ids, input_mask, segment_ids [B, num_choices * S]; label_ids [B, 1] and
    is_real_example [B, 1] (TRAIN / EVAL). PREDICT and the export return {"probabilities":
    [B, num_choices]}; EVAL computes eval_loss and eval_accuracy.

    Args: as `classification.model_fn_builder`; `num_choices`: choices per question.
    """
    training = training or TrainingStep()
    initializer_range = encoder.bert_config.initializer_range

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params
        logits = encoder.build(
            flatten_choices(features, num_choices), purpose,
            lambda model, is_training: choice_logits(model.get_pooled_output(), num_choices,
                                                     is_training, initializer_range),
            pooled_only=True)
        if mode == estimator_lib.ModeKeys.PREDICT:
            return estimator_lib.EstimatorSpec(
                mode=mode, predictions={"probabilities": tf.nn.softmax(logits, axis=-1),
                                        **base.record_index(features)})
        label_ids = tf.reshape(features["label_ids"], [-1])
        loss, per_example_loss, outputs = classification.classifier_loss(logits, label_ids,
                                                                         False)
        if mode == estimator_lib.ModeKeys.TRAIN:
            return training.spec(loss, features["input_ids"])
        return classification.eval_spec(loss, per_example_loss, outputs, label_ids,
                                        features["is_real_example"], False)

    return model_fn


@registry.register
class MultipleChoiceTask(base.FinetuningTask):
    """SWAG-style multiple choice.

    Writes to --output_dir: cached features (*.tf_record), checkpoints, eval_results.txt
    (eval_loss, eval_accuracy, global_step, loss), test_results.tsv (one probability per
    choice a line); with --export_dir a SavedModel (see the module docstring).
    """

    name = "multiple_choice"
    # serving_text: a context [B] and its choices' endings [B, num_choices].
    text_inputs = ("context", "endings")
    hf_heads = {"multiple_choice": heads.HfHead("BertForMultipleChoice", "cls/multiple_choice",
                                                "classifier", True, has_labels=False)}

    # The [B, num_choices * S] features hold one sequence per choice, each cut alike.
    @property
    def sequences_per_example(self):
        return self.num_choices

    def __init__(self, task_options, options):
        """`task_options`: `bert_tf.options.MultipleChoiceOptions`; `options`:
        `bert_tf.options.FinetuneOptions`."""
        super().__init__(task_options, options)
        self.processor = mc_data.MultipleChoiceProcessor(task_options.task_name)

    @functools.cached_property
    def splits(self):
        """(train, dev, test) examples of the run's actions, read once from the data files."""
        return base.read_splits(self.processor, self.task_options.data_dir, self.options)

    @functools.cached_property
    def num_choices(self):
        """The choices of every question of the run's data files."""
        return mc_data.num_choices_of(*self.splits)

    def check(self):
        files = ", ".join(mc_data.SPLIT_FILES[self.task_options.task_name].values())
        base.require_data_dir(self.task_options.data_dir, files)

    def read_examples(self):
        logging.info("Multiple choice (%s): %d choices per question",
                     self.task_options.task_name, self.num_choices)
        return self.splits

    def model_fn(self, encoder, training):
        return model_fn_builder(encoder, self.num_choices, training)

    def write_features(self, examples, path, tokenizer, is_training):
        del is_training
        mc_data.write_features(examples, self.num_choices, self.options.model.max_seq_length,
                               tokenizer, path)

    def feature_spec(self, seq_length, is_training):
        del is_training
        width = self.num_choices * seq_length
        spec = {key: tf.io.FixedLenFeature([width], tf.int64)
                for key in input_pipeline.SEQUENCE_FEATURES}
        spec["label_ids"] = tf.io.FixedLenFeature([1], tf.int64)
        spec["is_real_example"] = tf.io.FixedLenFeature([1], tf.int64)
        return spec

    def metric_names(self):
        return ["eval_accuracy", "eval_loss", "loss"]

    def evaluate(self, estimator, input_fn, examples, checkpoint_path=None):
        return runner.evaluate(estimator, input_fn, checkpoint_path=checkpoint_path)

    def predict(self, estimator, input_fn, examples, checkpoint_path=None):
        rows = [prediction["probabilities"] for prediction in base.in_input_order(
            estimator.predict(input_fn, checkpoint_path=checkpoint_path))]
        if len(rows) != len(examples):
            raise BertTfError(f"predicted {len(rows)} of {len(examples)} test questions; "
                              "delete predict.tf_record in --output_dir and rerun.")
        path = os.path.join(self.options.run.output_dir, "test_results.tsv")
        fileio.atomic_write_text(path, classification.format_test_results(rows))
        logging.info("Wrote %s", path)
        return None

    def export_files(self):
        return {"inputs.txt": f"input_ids, input_mask, segment_ids: [batch, {self.num_choices} * "
                              "seq], each choice's packed sequence of length seq one after "
                              "another; outputs: probabilities [batch, "
                              f"{self.num_choices}]. serving_text: context [batch] and endings "
                              f"[batch, {self.num_choices}] strings.\n"}
