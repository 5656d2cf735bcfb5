"""Named-entity recognition: a token classification head, model_fn, input_fn and run_ner.

Head variables: `cls/ner/output_weights` [num_labels, H] and `cls/ner/output_bias`
[num_labels] on every position of the final encoder layer (dropout 0.1 while training). The
loss and the scores only count the first word piece of each word (`label_mask`, see
`bert_tf.data.ner`); entity-level precision / recall / F1 follow conlleval
(`bert_tf.metrics.ner`).

With --use_crf a linear-chain CRF (`bert_tf.crf`) runs over the token logits at the first
pieces (`label_mask`): its variables `cls/ner/crf/transitions` [num_labels, num_labels],
`cls/ner/crf/start_transitions` and `cls/ner/crf/end_transitions` [num_labels], the loss the
negative log-likelihood of each sentence's tags (summed over sentences, divided by the scored
words: with zero transitions it is the plain head's cross-entropy), and tag_ids the Viterbi
tags. The chain goes from one first piece straight to the next: [CLS], [SEP], continuation
pieces and padding are not in it (`crf.compact`), so a prediction needs `label_mask` as an
input, and the export's id signatures take it.

Long sentences (--doc_stride > 0): each record is a window (`bert_tf.data.ner.
convert_example_to_windows`) carrying `example_index` and `word_index`; each word is scored in
the window where it has the most context, and `ner_data.merge_window_tags` puts the tags back
in word order, so every word gets a prediction.
"""

import functools
import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import crf
from bert_tf.data import classification_features as classification_data
from bert_tf.data import ner as ner_data
from bert_tf.errors import BertTfError
from bert_tf.metrics import ner as ner_metrics
from bert_tf.tasks import base, heads, registry
from bert_tf.training import checkpoints, runner
from bert_tf.training import estimator as estimator_lib
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1

# The [max_seq_length] features of a NER record; eval / predict batches trim them all.
SEQUENCE_KEYS = ("input_ids", "input_mask", "segment_ids", "label_ids", "label_mask")
# What a prediction / eval output passes through from the features, where they have it.
PASSED_THROUGH = ("label_mask", "word_index", "example_index")
# The CRF's variable scope (its variables: `crf.variable_shapes`).
CRF_SCOPE = "cls/ner/crf"
# What a CRF model's prediction takes beside input_ids, input_mask and segment_ids.
CRF_INPUTS = ("label_mask",)


def token_logits(sequence_output, num_labels, is_training, initializer_range=0.02):
    """The token classification head: `cls/ner/output_weights` and `cls/ner/output_bias`.

    Args:
      sequence_output: float Tensor [B, S, H], the final encoder layer (compute dtype).
      num_labels: number of tags.
      is_training: apply dropout 0.1 to `sequence_output`.
      initializer_range: stddev of the weights' truncated normal initializer.

    Returns:
      float32 Tensor [B, S, num_labels].
    """
    with tf1.variable_scope("cls/ner"):
        return heads.output_projection(
            sequence_output, num_labels, initializer_range,
            dropout_prob=heads.HEAD_DROPOUT_PROB if is_training else 0.0)


def token_loss(logits, label_ids, label_weights):
    """Cross-entropy averaged over the weighted positions (first word pieces).

    Args:
      logits: float32 [B, S, num_labels].
      label_ids: int [B, S] tag ids.
      label_weights: float [B, S], 1.0 where a tag is scored, 0.0 elsewhere.

    Returns:
      (loss scalar, per_token_loss [B, S]), float32.
    """
    loss, per_token_loss, _ = heads.softmax_cross_entropy(logits, label_ids, label_weights)
    return loss, per_token_loss


def crf_parameters(num_labels):
    """The CRF's (transitions [L, L], start_transitions [L], end_transitions [L]) under
    `CRF_SCOPE`, float32."""
    with tf1.variable_scope(CRF_SCOPE):
        return crf.crf_variables(num_labels)


def crf_loss(logits, label_ids, label_mask, sentence_weights, parameters):
    """The CRF's negative log-likelihood per scored word.

    Args:
      logits: float32 [B, S, num_labels].
      label_ids: int [B, S] tag ids.
      label_mask: int [B, S], 1 on the first piece of each word (the chain's positions).
      sentence_weights: float32 [B], 1.0 for a real example, 0.0 for padding.
      parameters: `crf_parameters`.

    Returns:
      (loss scalar: the weighted sentences' negative log-likelihoods summed and divided by
      their scored words (+ 1e-5); per_word_loss [B]: each sentence's per scored word;
      word_weights [B]: its scored words times its weight), float32.
    """
    likelihood = crf.log_likelihood(logits, label_ids, label_mask, *parameters)
    words = tf.reduce_sum(tf.cast(label_mask, tf.float32), axis=1)
    word_weights = words * sentence_weights
    loss = -tf.reduce_sum(likelihood * sentence_weights) / (tf.reduce_sum(word_weights) + 1e-5)
    return loss, -likelihood / tf.maximum(words, 1.0), word_weights


def _tagging(logits, features, parameters):
    """(tag_ids int32 [B, S], loss_fn(label_weights) -> (loss, per-item loss, its weights))
    of the plain head (`parameters` None: the argmax and the token cross-entropy) or the CRF
    (Viterbi tags, 0 off the first pieces, and `crf_loss`)."""
    if parameters is None:
        def token_loss_fn(label_weights):
            loss, per_token_loss = token_loss(logits, features["label_ids"], label_weights)
            return loss, per_token_loss, label_weights
        return tf.argmax(logits, axis=-1, output_type=tf.int32), token_loss_fn
    label_mask = features["label_mask"]
    tag_ids, _ = crf.viterbi_decode(logits, label_mask, *parameters)

    def crf_loss_fn(label_weights):
        del label_weights
        weights = tf.cast(tf.reshape(features["is_real_example"], [-1]), tf.float32)
        return crf_loss(logits, features["label_ids"], label_mask, weights, parameters)
    return tag_ids, crf_loss_fn


def model_fn_builder(encoder, num_labels, training=None, eval_collector=None, use_crf=False):
    """Returns a model_fn(features, labels, mode, params) for token classification.

    Features: input_ids, input_mask, segment_ids [B, S]; label_ids, label_mask [B, S] and
    is_real_example [B, 1] for TRAIN / EVAL; windows add word_index [B, S] and example_index
    [B, 1]. PREDICT returns {"tag_ids": int32 [B, S]} plus those of label_mask, word_index and
    example_index the input has (`PASSED_THROUGH`); the export returns {"tag_ids"}.

    With `use_crf`, tag_ids are the CRF's Viterbi tags (0 where label_mask is 0), PREDICT
    and the export also take label_mask [B, S], and the loss is `crf_loss`.

    Args: as `classification.model_fn_builder`; `eval_collector` receives each eval
      record's "tag_ids" and its `PASSED_THROUGH` features; `use_crf`: the CRF head.
    """
    training = training or TrainingStep()
    initializer_range = encoder.bert_config.initializer_range

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params

        def head_fn(model, is_training):
            logits = token_logits(model.get_sequence_output(), num_labels, is_training,
                                  initializer_range)
            # Made here, so --init_checkpoint initializes them too.
            return logits, crf_parameters(num_labels) if use_crf else None

        logits, parameters = encoder.build(features, purpose, head_fn)
        tag_ids, loss_fn = _tagging(logits, features, parameters)

        outputs = {"tag_ids": tag_ids, **base.record_index(features),
                   **{key: features[key] for key in PASSED_THROUGH
                      if key in features and not purpose.is_export}}
        if mode == estimator_lib.ModeKeys.PREDICT:
            return estimator_lib.EstimatorSpec(mode=mode, predictions=outputs)

        is_real_example = tf.cast(tf.reshape(features["is_real_example"], [-1, 1]), tf.float32)
        label_weights = tf.cast(features["label_mask"], tf.float32) * is_real_example
        loss, per_item_loss, loss_weights = loss_fn(label_weights)
        if mode == estimator_lib.ModeKeys.TRAIN:
            return training.spec(loss, features["input_ids"])

        metrics = {
            # Per scored word (the CRF's: each sentence's per word, weighted by its words).
            "eval_loss": tf1.metrics.mean(per_item_loss, weights=loss_weights),
            # Tag accuracy over scored words (the first piece of each word).
            "eval_accuracy": tf1.metrics.accuracy(labels=features["label_ids"],
                                                  predictions=tag_ids, weights=label_weights),
        }
        hooks = []
        if eval_collector is not None:
            hooks.append(eval_collector.hook(outputs))
        return estimator_lib.EstimatorSpec(mode=mode, loss=loss, eval_metric_ops=metrics,
                                           evaluation_hooks=hooks)

    return model_fn


def uses_crf(config):
    """Whether the model of `config` (`export.PredictConfig`) has the CRF head (its
    predict_config.json says "use_crf")."""
    return bool(config.settings.get("use_crf"))


def prediction_inputs(config, features):
    """What `Predictor._run` adds to each batch of `features` (`NerFeatures`) for the model
    of `config`: None for the plain head; for the CRF, indices -> {"label_mask": int32 [B, W]},
    W the batch's longest input."""
    if not uses_crf(config):
        return None

    def label_mask(indices):
        width = max(int(sum(features[i].input_mask)) for i in indices)
        return {"label_mask": np.asarray([features[i].label_mask[:width] for i in indices],
                                         np.int32)}
    return label_mask


def _checkpoint_shapes(checkpoint):
    """{name: shape} of a checkpoint (a prefix or a directory); {} when it cannot be read
    (what reads it next reports that)."""
    try:
        return dict(tf.train.list_variables(checkpoints.resolve_checkpoint(checkpoint)))
    except (BertTfError, tf.errors.OpError, ValueError):
        return {}


def has_crf(checkpoint):
    """Whether `checkpoint` (a prefix or a directory) holds a CRF head's transitions."""
    return f"{CRF_SCOPE}/{crf.TRANSITIONS}" in _checkpoint_shapes(checkpoint)


def check_crf_checkpoint(init_checkpoint, label_list):
    """Raises BertTfError when `init_checkpoint` has CRF transitions for another number of
    tags than `label_list()` (called only then: it may read the train file)."""
    shape = _checkpoint_shapes(init_checkpoint).get(f"{CRF_SCOPE}/{crf.TRANSITIONS}")
    if shape is None:
        return
    num_labels = len(label_list())
    if list(shape) != [num_labels, num_labels]:
        raise BertTfError(
            f"--use_crf: --init_checkpoint={init_checkpoint} has CRF transitions for "
            f"{shape[0]} tags ({CRF_SCOPE}/{crf.TRANSITIONS} {list(shape)}) but the data has "
            f"{num_labels}; pass a checkpoint trained with these tags, or the pre-trained "
            "encoder checkpoint to train a new CRF.")


def feature_spec(seq_length, windowed=False):
    """The NER TFRecord keys (see `bert_tf.data.ner`), all int64; `windowed` adds
    word_index [seq_length] and example_index [1]."""
    keys = SEQUENCE_KEYS + (("word_index",) if windowed else ())
    spec = {key: tf.io.FixedLenFeature([seq_length], tf.int64) for key in keys}
    spec["is_real_example"] = tf.io.FixedLenFeature([1], tf.int64)
    if windowed:
        spec["example_index"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def word_tags(outputs, examples, label_list, windowed=False):
    """Per example, the predicted tag of every word (words cut by truncation get "O").

    Args:
      outputs: per record, a dict with "tag_ids" and "label_mask" (same length), and with
        `windowed` "word_index" and "example_index".
      examples: the `NerExample`s, in the same order.
      label_list: the tags.
      windowed: records are windows (--doc_stride): merged by `ner_data.merge_window_tags`.
    """
    if windowed:
        return ner_data.merge_window_tags(outputs, examples, label_list)
    outputs = list(outputs)
    if len(outputs) != len(examples):
        raise BertTfError(f"NER: {len(outputs)} predicted sentences for {len(examples)} "
                          "examples; delete the cached .tf_record files in --output_dir and "
                          "rerun.")
    return [ner_data.complete_predictions(
        example, ner_data.word_predictions(output["tag_ids"], output["label_mask"], label_list))
        for output, example in zip(outputs, examples, strict=True)]


@registry.register
class NerTask(base.FinetuningTask):
    """CoNLL-style named-entity recognition.

    Reads CoNLL files from --data_dir (train.txt, dev.txt, test.txt; see `bert_tf.data.ner`
    for other accepted names); the tag list is "O" then the train file's other tags (without
    --do_train: the label_list.txt beside the checkpoint it runs, when it has one; see
    `base.checkpoint_label_list`). Writes to
    --output_dir: cached features (*.tf_record), checkpoints, label_list.txt (tag of each id),
    eval_results.txt (eval_loss, eval_accuracy, global_step, loss and conlleval's precision,
    recall, f1, accuracy, overall and per entity type), eval_predictions.txt and
    test_predictions.txt ("word gold predicted" a line, a blank line between sentences: the
    conlleval input format); with --export_dir a SavedModel returning tag_ids.
    """

    sequence_keys = SEQUENCE_KEYS
    name = "ner"
    needs_labels = True
    predicts = True
    hf_heads = {"ner": heads.HfHead("BertForTokenClassification", "cls/ner", "classifier",
                                    False)}

    @classmethod
    def predict_model_fn(cls, encoder, config):
        return model_fn_builder(encoder, len(config.label_list), use_crf=uses_crf(config))

    @classmethod
    def predict_inputs(cls, config):
        return CRF_INPUTS if uses_crf(config) else ()

    @classmethod
    def checkpoint_settings(cls, checkpoint):
        return {"use_crf": True} if has_crf(checkpoint) else {}

    @classmethod
    def answer(cls, predictor, records, options):
        del options
        return predictor.tag([record["text"] for record in records])
    cached_features = staticmethod(ner_data.cached_file_based_convert_examples_to_features)

    def __init__(self, task_options, options):
        """`task_options`: `bert_tf.options.NerOptions`; `options`:
        `bert_tf.options.FinetuneOptions`."""
        super().__init__(task_options, options)
        self.data_dir = task_options.data_dir
        self.doc_stride = task_options.doc_stride
        self.use_crf = task_options.use_crf
        if self.use_crf:
            self.export_inputs = CRF_INPUTS
        if self.windowed:
            self.sequence_keys = SEQUENCE_KEYS + ("word_index",)
        self.collector = base.ExampleCollector()
        # Without training, the head's own tag order (a converted Hugging Face model's need
        # not be the train file's), and no train file needed.
        self.processor = ner_data.NerProcessor(data_dir=self.data_dir,
                                               labels=base.checkpoint_label_list(options))

    @functools.cached_property
    def label_list(self):
        """The tags in id order: "O" then the train file's other tags (or the head's)."""
        return self.processor.get_labels()

    @property
    def windowed(self):
        return self.doc_stride > 0

    def check(self):
        classification_data.check_doc_stride(self.doc_stride,
                                             self.options.model.max_seq_length)
        base.require_data_dir(self.data_dir, "train.txt, dev.txt and test.txt")
        if self.use_crf and self.options.model.init_checkpoint:
            check_crf_checkpoint(self.options.model.init_checkpoint, lambda: self.label_list)
        checkpoint = base.run_checkpoint(self.options)
        if not self.use_crf and checkpoint and has_crf(checkpoint):
            raise BertTfError(
                f"--use_crf: checkpoint {checkpoint} has a CRF head ({CRF_SCOPE}/); pass "
                "--use_crf to evaluate, predict or export with it.")

    def read_examples(self):
        logging.info("NER tags: %s", self.label_list)
        return base.read_splits(self.processor, self.data_dir, self.options)

    def model_fn(self, encoder, training):
        return model_fn_builder(encoder, len(self.label_list), training,
                                eval_collector=self.collector, use_crf=self.use_crf)

    def write_features(self, examples, path, tokenizer, is_training):
        del is_training
        self.cached_features(examples, self.label_list, self.options.model.max_seq_length,
                             tokenizer, path, doc_stride=self.doc_stride)

    def feature_spec(self, seq_length, is_training):
        del is_training
        return feature_spec(seq_length, self.windowed)

    def run_files(self):
        return {base.LABEL_LIST_FILE: self._label_file_text()}

    def metric_names(self):
        # conlleval's overall scores and those of each entity type of the tags.
        types = sorted({ner_metrics.split_tag(tag)[1] for tag in self.label_list} - {""})
        return ["accuracy", "eval_accuracy", "eval_loss", "f1", "loss", "precision", "recall",
                *(f"{score}_{t}" for t in types for score in ("precision", "recall", "f1"))]

    def evaluate(self, estimator, input_fn, examples, checkpoint_path=None):
        results = runner.evaluate(estimator, input_fn, checkpoint_path=checkpoint_path)
        self._eval_predicted = word_tags(self.collector.examples(), examples, self.label_list,
                                         self.windowed)
        self._evaluation = ner_metrics.evaluate([example.labels for example in examples],
                                                self._eval_predicted)
        results.update(self._evaluation.to_dict())
        return results

    def write_eval_files(self, examples, results):
        del results  # Entity F1 and the rest are in it already.
        ner_data.write_conll_predictions(
            os.path.join(self.options.run.output_dir, "eval_predictions.txt"), examples,
            self._eval_predicted)
        logging.info("conlleval:\n%s", ner_metrics.format_report(self._evaluation))

    def predict(self, estimator, input_fn, examples, checkpoint_path=None):
        predicted = word_tags(
            base.in_input_order(estimator.predict(input_fn, checkpoint_path=checkpoint_path)),
            examples, self.label_list, self.windowed)
        path = os.path.join(self.options.run.output_dir, "test_predictions.txt")
        ner_data.write_conll_predictions(path, examples, predicted)
        logging.info("Wrote %s", path)
        return None

    def export_files(self):
        return {base.LABEL_LIST_FILE: self._label_file_text()}

    def predict_settings(self):
        return {"use_crf": True} if self.use_crf else {}

    def _label_file_text(self):
        return "".join(f"{label}\n" for label in self.label_list)

