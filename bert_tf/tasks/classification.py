"""Sentence (pair) classification and regression: the head, model_fn, input_fn, run_classifier.

The head follows the original run_classifier.py: top-level variables `output_weights`
[num_labels, H] and `output_bias` [num_labels] on the pooled [CLS] output, with dropout 0.1
while training. Regression tasks (STS-B, or a csv/tsv task with --regression) use one output
and a mean squared error loss; --multi_label uses one sigmoid per label and a binary
cross-entropy; --class_weights weights the softmax cross-entropy by the gold class.

Long texts (--doc_stride > 0): an example becomes several windows (`bert_tf.data.
classification.convert_example_to_windows`), each record carrying `example_index`. The model
scores windows; the example's logits are the mean (or per-class max, --window_aggregation) of
its windows' logits, and the metrics, test_results.tsv and predictions use those.
"""

import functools
import os

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.data import classification_features as classification_data
from bert_tf.data import input_pipeline, processors, record_integrity, row_packing
from bert_tf.errors import BertTfError
from bert_tf.metrics import classification_scores as classification_metrics
from bert_tf.tasks import base, heads, registry
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import runner
from bert_tf.training.training_step import TrainingStep

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


def classifier_loss(logits, labels, is_regression, multi_label=False, class_weights=None,
                    example_weights=None):
    """Per-example and mean loss, and the outputs.

    Args:
      logits: float32 [B, num_labels] ([B, 1] for regression).
      labels: [B] class ids (int) or target values (float, regression); multi-label: [B,
        num_labels] multi-hot.
      is_regression: mean squared error on logits[:, 0] instead of softmax cross-entropy.
      multi_label: binary cross-entropy per label (`heads.sigmoid_cross_entropy`).
      class_weights: None, or a weight per class: the loss is sum(w[y] * loss) / sum(w[y])
        (PyTorch's CrossEntropyLoss(weight=...)).
      example_weights: None, or float32 [B]: 0 leaves an example out of the loss (the empty
        slots of packed rows), 1 keeps it.

    Returns:
      (loss scalar, per_example_loss [B], outputs): outputs is a dict with "probabilities"
      [B, num_labels] (softmax, or sigmoid for multi-label), "predictions" [B] (the argmax
      id; regression: the predicted value) and with class weights "loss_weights" [B].
    """
    if is_regression:
        predictions = logits[:, 0]
        per_example_loss = tf.square(predictions - tf.cast(labels, tf.float32))
        loss = (tf.reduce_mean(per_example_loss) if example_weights is None else
                tf.reduce_sum(example_weights * per_example_loss) /
                tf.maximum(tf.reduce_sum(example_weights), 1.0))
        return loss, per_example_loss, {"predictions": predictions}
    if multi_label:
        loss, per_example_loss, probabilities = heads.sigmoid_cross_entropy(logits, labels)
        return loss, per_example_loss, {"probabilities": probabilities}
    weights = example_weights
    if class_weights is not None:
        weights = tf.gather(tf.constant(class_weights, tf.float32), labels)
        if example_weights is not None:
            weights *= example_weights
    loss, per_example_loss, log_probs = heads.softmax_cross_entropy(logits, labels, weights)
    outputs = {"probabilities": tf.exp(log_probs),
               "predictions": tf.argmax(logits, axis=-1, output_type=tf.int32)}
    if weights is not None:
        outputs["loss_weights"] = weights
    return loss, per_example_loss, outputs


def model_fn_builder(encoder, num_labels, training=None, is_regression=False,
                     eval_collector=None, multi_label=False, class_weights=None, windowed=False):
    """Returns a model_fn(features, labels, mode, params) for classification / regression.

    Features: input_ids, input_mask, segment_ids [B, S]; label_ids [B, 1] ([B, num_labels]
    multi-hot for multi-label) and is_real_example (TRAIN / EVAL); example_index [B, 1] for
    windows. Packed training records (`data.row_packing`) hold K examples a row:
    position_ids [B, S], cls_positions, label_ids and label_weights [B, K]. PREDICT and the
    export return {"probabilities": [B, num_labels]} (softmax; multi-label: sigmoid per
    label; regression: {"predictions": [B]}); `windowed` adds "logits" [B, num_labels] (to
    aggregate over windows) and PREDICT "example_index".

    Args:
      encoder: a `model_fn_parts.Encoder`: the BERT config, the checkpoint that initializes
        it, the compute dtype.
      num_labels: classes (1 for regression).
      training: a `TrainingStep`: the optimizer, its schedule, accumulation, frozen layers
        (None: its defaults, for a model_fn that evaluates, predicts or exports).
      is_regression: regression head (MSE) instead of classification.
      eval_collector: a `base.ExampleCollector` that receives each eval record's
        "logits", "label_ids", "is_real_example" (and "example_index").
      multi_label, class_weights: see `classifier_loss`.
      windowed: records are windows of longer examples (--doc_stride).
    """
    training = training or TrainingStep()
    initializer_range = encoder.bert_config.initializer_range

    def head(model, is_training):
        return classifier_logits(model.get_pooled_output(), num_labels, is_training,
                                 initializer_range)

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params  # Labels travel in `features`, as in the TFRecords.
        logits = encoder.build(features, purpose, head, pooled_only=True)

        if mode == estimator_lib.ModeKeys.PREDICT:
            return predict_spec(logits, features, is_regression, multi_label, windowed)

        label_ids = features["label_ids"]
        label_ids = label_ids if multi_label else tf.reshape(label_ids, [-1])
        example_weights = None
        if "label_weights" in features:
            example_weights = tf.reshape(features["label_weights"], [-1])
        loss, per_example_loss, outputs = classifier_loss(logits, label_ids, is_regression,
                                                          multi_label, class_weights,
                                                          example_weights)
        if mode == estimator_lib.ModeKeys.TRAIN:
            return training.spec(loss, features["input_ids"])

        collected = {"logits": logits, "label_ids": label_ids, **base.record_index(features)}
        if "example_index" in features:
            collected["example_index"] = tf.reshape(features["example_index"], [-1])
        return eval_spec(loss, per_example_loss, outputs, label_ids,
                         features["is_real_example"], is_regression or multi_label,
                         eval_collector, collected)

    return model_fn


def prediction_outputs(logits, is_regression, multi_label):
    """What PREDICT and the export return: {"probabilities": [B, C]} (softmax, or sigmoid per
    label for multi-label), or {"predictions": [B]} for regression."""
    if is_regression:
        return {"predictions": logits[:, 0]}
    probabilities = tf.sigmoid(logits) if multi_label else tf.nn.softmax(logits, axis=-1)
    return {"probabilities": probabilities}


def predict_spec(logits, features, is_regression, multi_label, windowed):
    """The PREDICT-mode EstimatorSpec: `prediction_outputs`, plus the logits of windowed
    records and each record's example_index when the features have one."""
    predictions = prediction_outputs(logits, is_regression, multi_label)
    if windowed:
        predictions["logits"] = logits
    if "example_index" in features:
        predictions["example_index"] = tf.reshape(features["example_index"], [-1])
    predictions.update(base.record_index(features))
    return estimator_lib.EstimatorSpec(mode=estimator_lib.ModeKeys.PREDICT,
                                       predictions=predictions)


def eval_spec(loss, per_example_loss, outputs, label_ids, is_real_example, no_accuracy,
              eval_collector=None, collected=None):
    """The EVAL-mode EstimatorSpec: eval_loss (and eval_accuracy) over the real examples.

    Args:
      loss: float32 scalar; per_example_loss: [B]; outputs: see `classifier_loss` (with
        "loss_weights", eval_loss is weighted by them as the training loss is).
      label_ids: [B] gold labels; is_real_example: [B] or [B, 1], 0 for padding examples.
      no_accuracy: no eval_accuracy (regression, multi-label).
      eval_collector: a `base.ExampleCollector` receiving `collected` (dict name ->
        [B, ...]) and "is_real_example" of each record.
      collected: see `eval_collector` (default: {"predictions", "label_ids"}).
    """
    is_real_example = tf.cast(tf.reshape(is_real_example, [-1]), tf.float32)
    loss_weights = is_real_example * outputs.get("loss_weights", 1.0)
    metrics = {"eval_loss": tf1.metrics.mean(per_example_loss, weights=loss_weights)}
    if not no_accuracy:
        metrics["eval_accuracy"] = tf1.metrics.accuracy(
            labels=label_ids, predictions=outputs["predictions"], weights=is_real_example)
    hooks = []
    if eval_collector is not None:
        if collected is None:
            collected = {"predictions": outputs["predictions"], "label_ids": label_ids}
        hooks.append(eval_collector.hook({**collected, "is_real_example": is_real_example}))
    return estimator_lib.EstimatorSpec(mode=estimator_lib.ModeKeys.EVAL, loss=loss,
                                       eval_metric_ops=metrics, evaluation_hooks=hooks)


def feature_spec(seq_length, is_regression=False, num_label_ids=1, windowed=False):
    """The classification TFRecord keys (docs/compatibility.md §3); label_ids is float for
    regression, [num_label_ids] multi-hot for multi-label; `windowed` adds example_index [1]."""
    spec = {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([num_label_ids],
                                           tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([1], tf.int64),
    }
    if windowed:
        spec["example_index"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def aggregate_windows(values, example_index, method="mean"):
    """Per-example rows from per-window rows: the mean (or element-wise max) of each example's
    windows.

    Args:
      values: float [num_windows, C] (e.g. logits).
      example_index: int [num_windows], the example of each window; examples 0..N-1 each
        have at least one window.
      method: "mean" or "max".

    Returns:
      float64 [N, C], row i from the windows of example i.
    """
    values = np.asarray(values, dtype=np.float64)
    example_index = np.asarray(example_index).reshape(-1)
    num_examples = int(example_index.max()) + 1 if example_index.size else 0
    counts = np.bincount(example_index, minlength=num_examples)
    if not np.all(counts):
        raise BertTfError(f"window aggregation: example {int(np.argmin(counts))} has no window; "
                          "delete the cached .tf_record files in --output_dir and rerun.")
    if method == "max":
        out = np.full((num_examples,) + values.shape[1:], -np.inf)
        np.maximum.at(out, example_index, values)
        return out
    out = np.zeros((num_examples,) + values.shape[1:])
    np.add.at(out, example_index, values)
    return out / counts.reshape((-1,) + (1,) * (values.ndim - 1))


def probabilities_from_logits(logits, is_regression, multi_label):
    """Per-example outputs from logits [N, C]: the value (regression, [N]), a sigmoid per
    label (multi-label) or the softmax ([N, C]), in numpy."""
    if is_regression:
        return logits[:, 0]
    if multi_label:
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def format_test_results(outputs):
    """test_results.tsv: per example, the class probabilities tab separated (regression: the
    predicted value), one line each, as the original."""
    return "".join("\t".join(str(float(value)) for value in np.atleast_1d(row)) + "\n"
                   for row in outputs)


def parse_class_weights(value, label_list, train_examples):
    """The --class_weights of a single-label task: one positive weight per label.

    Args:
      value: "w0,w1,..." in label order, or "balanced": n / (n_classes * n_c) from the
        training labels (sklearn's rule).
      label_list: the labels.
      train_examples: the training `InputExample`s (None without --do_train).

    Returns:
      A list of floats [len(label_list)].
    """
    if value.strip().lower() == "balanced":
        if not train_examples:
            raise BertTfError("--class_weights=balanced: computed from the training labels, "
                              "but there are none (no --do_train); pass the weights "
                              "explicitly as w0,w1,...")
        counts = [sum(example.label == label for example in train_examples)
                  for label in label_list]
        if not all(counts):
            missing = label_list[counts.index(0)]
            raise BertTfError(f"--class_weights=balanced: label '{missing}' has no training "
                              "example; pass the weights explicitly or drop the label.")
        return [len(train_examples) / (len(label_list) * count) for count in counts]
    parts = [part.strip() for part in value.split(",")]
    if len(parts) != len(label_list):
        raise BertTfError(f"--class_weights: {len(parts)} weights for {len(label_list)} labels "
                          f"({', '.join(label_list)}); give one weight per label, in that "
                          "order, or 'balanced'.")
    try:
        weights = [float(part) for part in parts]
    except ValueError:
        raise BertTfError(f"--class_weights: '{value}' is not a list of numbers; pass "
                          "w0,w1,... or 'balanced'.") from None
    if not all(weight > 0 for weight in weights):
        raise BertTfError(f"--class_weights: '{value}' has a weight <= 0; every weight must "
                          "be positive.")
    return weights


@registry.register
class ClassificationTask(base.FinetuningTask):
    """GLUE, XNLI and csv/tsv sentence (pair) classification, multi-label and regression.

    Writes to --output_dir: train.tf_record / eval.tf_record / predict.tf_record (cached
    features, reused while the data and settings are unchanged), checkpoints, label_list.txt
    (classification: the label of each output), eval_results.txt (eval_loss, eval_accuracy,
    global_step, loss and the task's GLUE metrics; multi-label: micro_f1, macro_f1,
    exact_match, f1_<label>; with --class_weights a `# class_weights` header and recall_<label>)
    and test_results.tsv (one probability per label a line); with --export_dir a SavedModel
    (see `finetuning`). Without --do_train, a label_list.txt beside the checkpoint it runs
    (`base.checkpoint_label_list`) names the head's outputs: the csv/tsv task takes its
    labels from it (unless --labels), and any other label list must equal it.
    """

    cached_features = staticmethod(
        classification_data.cached_file_based_convert_examples_to_features)
    name = "classifier"
    sequence_keys = input_pipeline.SEQUENCE_FEATURES + row_packing.SEQUENCE_FEATURES
    needs_labels = True
    text_pairs = True
    one_label_regresses = True
    predict_fields = (("text",), ("text_b",))
    predicts = True
    hf_heads = {
        "classifier": heads.HfHead("BertForSequenceClassification", "", "classifier", True,
                                   "single_label_classification"),
        "multi_label": heads.HfHead("BertForSequenceClassification", "", "classifier", True,
                                    "multi_label_classification"),
        "regression": heads.HfHead("BertForSequenceClassification", "", "classifier", True,
                                   "regression", has_labels=False),
    }
    benchmarks = 2

    @classmethod
    def predict_model_fn(cls, encoder, config):
        return model_fn_builder(encoder, len(config.label_list),
                                is_regression=config.regression,
                                multi_label=config.multi_label, windowed=config.windowed)

    @classmethod
    def answer(cls, predictor, records, options):
        del options
        return predictor.predict_pairs([(r["text"], r.get("text_b")) for r in records])

    @classmethod
    def step_model_fn(cls, encoder, training, num_labels):
        return model_fn_builder(encoder, num_labels, training)

    @classmethod
    def step_features(cls, seq_length, max_predictions_per_seq, num_labels, vocab_size):
        del seq_length, max_predictions_per_seq, vocab_size
        return [("label_ids", None, tf.int32, num_labels),
                ("is_real_example", None, tf.int32, None)]

    @classmethod
    def head_rows(cls, mode, seq_length, max_predictions_per_seq):
        # Training reads the [CLS] row only; prediction keeps every row (its outputs).
        return 1 if mode == "train" else seq_length

    @classmethod
    def head_flops(cls, bert_config, seq_length, max_predictions_per_seq, num_labels):
        hidden = bert_config.hidden_size
        return 2 * hidden * hidden + 2 * hidden * num_labels  # The pooler and the classifier.

    def __init__(self, task_options, options):
        """`task_options`: `bert_tf.options.ClassifierOptions`; `options`:
        `bert_tf.options.FinetuneOptions`."""
        super().__init__(task_options, options)
        t = task_options
        self.task_name = processors.normalize_task_name(t.task_name)
        # Without training, the head's labels in its output order (a converted Hugging Face
        # model's need not be sorted as a train file's).
        self.head_labels = base.checkpoint_label_list(options)
        labels = t.labels
        if labels is None and self.task_name in ("csv", "tsv"):
            labels = self.head_labels
        self.processor = processors.get_processor(
            t.task_name, text_a_column=t.text_a_column, text_b_column=t.text_b_column,
            label_column=t.label_column, labels=labels, header=t.has_header,
            regression=t.regression, language=t.language, multi_label=t.multi_label or None,
            label_separator=t.label_separator if t.multi_label else None)
        # None without --class_weights; "balanced" weights come from the training labels.
        self.class_weights = None
        self.collector = base.ExampleCollector()
        self.examples_per_row = None  # Of the packed training records, once written.

    @functools.cached_property
    def label_list(self):
        """The labels in id order (None for regression); a csv/tsv task without --labels
        reads them from its train file."""
        return None if self.is_regression else self.processor.get_labels()

    @property
    def is_regression(self):
        return self.processor.is_regression

    @property
    def multi_label(self):
        return self.processor.multi_label

    @property
    def windowed(self):
        return self.task_options.doc_stride > 0

    def packs(self, is_training):
        """Whether the records of this split are packed (--pack_sequences: training only)."""
        return bool(is_training and self.task_options.pack_sequences)

    def check(self):
        t = self.task_options
        base.require_data_dir(t.data_dir, f"the {self.task_name} files")
        classification_data.check_doc_stride(t.doc_stride, self.options.model.max_seq_length)
        if t.class_weights and (self.is_regression or self.multi_label):
            raise BertTfError("--class_weights: only for single-label classification, not "
                              f"{'--regression' if self.is_regression else '--multi_label'}; "
                              "drop the flag.")
        if t.pack_sequences and (t.multi_label or t.doc_stride):
            raise BertTfError("--pack_sequences: packs whole single-label examples; not with "
                              f"{'--multi_label' if t.multi_label else '--doc_stride'}. Drop "
                              "one of the two flags.")
        if t.multi_label and not 0.0 < t.multi_label_threshold < 1.0:
            raise BertTfError(f"--multi_label_threshold={t.multi_label_threshold} must be "
                              "between 0 and 1 (exclusive).")

    def read_examples(self):
        splits = base.read_splits(self.processor, self.task_options.data_dir, self.options)
        if self.label_list and self.head_labels and self.label_list != self.head_labels:
            raise BertTfError(
                f"--init_checkpoint: the head this run predicts with has the outputs "
                f"{', '.join(self.head_labels)}, in that order (the label_list.txt beside its "
                f"checkpoint), but this run's labels are {', '.join(self.label_list)}; pass "
                f"--labels={','.join(self.head_labels)} (csv/tsv task) or the checkpoint "
                "fine-tuned with these labels.")
        logging.info("Task %s: %s", self.task_name,
                     "regression" if self.is_regression else
                     f"{'multi-label ' if self.multi_label else ''}labels {self.label_list}")
        if self.task_options.class_weights:
            self.class_weights = parse_class_weights(self.task_options.class_weights,
                                                     self.label_list, splits[0])
            logging.info("Class weights: %s", self._class_weights_text())
        return splits

    def model_fn(self, encoder, training):
        num_labels = 1 if self.is_regression else len(self.label_list)
        return model_fn_builder(encoder, num_labels, training, is_regression=self.is_regression,
                                eval_collector=self.collector, multi_label=self.multi_label,
                                class_weights=self.class_weights, windowed=self.windowed)

    def write_features(self, examples, path, tokenizer, is_training):
        self.cached_features(examples, self.label_list, self.options.model.max_seq_length,
                             tokenizer, path, doc_stride=self.task_options.doc_stride,
                             multi_label=self.multi_label, pack_sequences=self.packs(is_training))
        if self.packs(is_training):
            records = record_integrity.scan_records(path).num_records
            self.examples_per_row = len(examples) / max(records, 1)

    def feature_spec(self, seq_length, is_training):
        if self.packs(is_training):
            return row_packing.packed_feature_spec(seq_length, self.is_regression)
        return feature_spec(seq_length, self.is_regression,
                            len(self.label_list) if self.multi_label else 1, self.windowed)

    def input_fn(self, path, is_training):
        """`base.FinetuningTask.input_fn`; packed training batches hold about
        --train_batch_size examples (`row_packing.batches_of_examples`)."""
        input_fn = super().input_fn(path, is_training)
        if not self.packs(is_training):
            return input_fn
        options = self.options
        logging.info("--pack_sequences: %.2f examples a sequence of %d on average; a batch "
                     "of --train_batch_size=%d examples is about %d sequences.",
                     self.examples_per_row, options.model.max_seq_length,
                     options.train.train_batch_size,
                     row_packing.rows_per_batch(options.train.train_batch_size,
                                                self.examples_per_row))
        return row_packing.batches_of_examples(input_fn, self.examples_per_row)

    def example_outputs(self, logits, example_index, num_examples):
        """Per-example logits [N, C] from the records' logits (windows aggregated)."""
        logits = np.asarray(logits, dtype=np.float64)
        if self.windowed:
            logits = aggregate_windows(logits, example_index,
                                       self.task_options.window_aggregation)
        if len(logits) != num_examples:
            raise BertTfError(f"got outputs for {len(logits)} of {num_examples} examples; "
                              "delete the cached .tf_record files in --output_dir and rerun.")
        return logits

    def metric_names(self):
        if self.multi_label:
            return sorted(["eval_loss", "loss", *classification_metrics.multi_label_metrics(
                [[0.0] * len(self.label_list)], [[0] * len(self.label_list)],
                self.label_list)])
        # The GLUE metrics of this task are the keys glue_metrics returns for any input.
        names = ["eval_loss", "loss", *classification_metrics.glue_metrics(
            self.task_name, [0.0, 1.0], [0.0, 1.0], is_regression=self.is_regression)]
        if not self.is_regression:
            names.append("eval_accuracy")
        if self.class_weights:
            names += [f"recall_{label}" for label in self.label_list]
        return sorted(names)

    def evaluate(self, estimator, input_fn, examples, checkpoint_path=None):
        results = runner.evaluate(estimator, input_fn, checkpoint_path=checkpoint_path)
        column = self.collector.column
        real = column("is_real_example") > 0
        index = column("example_index")[real] if self.windowed else None
        logits = self.example_outputs(column("logits")[real], index, len(examples))
        labels = column("label_ids")[real]
        if self.windowed:  # One label per example: its first window's.
            labels = labels[np.unique(index, return_index=True)[1]]
        results.update(self.example_metrics(logits, labels))
        return results

    def example_metrics(self, logits, labels):
        """The task's metrics from per-example logits [N, C] and gold labels."""
        t = self.task_options
        if self.multi_label:
            return classification_metrics.multi_label_metrics(
                1.0 / (1.0 + np.exp(-logits)), labels, self.label_list, t.multi_label_threshold)
        predictions = logits[:, 0] if self.is_regression else np.argmax(logits, axis=-1)
        results = classification_metrics.glue_metrics(self.task_name, predictions, labels,
                                                      is_regression=self.is_regression)
        if self.windowed and not self.is_regression:
            # The streaming eval_accuracy counts windows; this one counts examples.
            results["eval_accuracy"] = classification_metrics.accuracy(predictions, labels)
        if self.class_weights:
            results.update(classification_metrics.per_class_recall(predictions, labels,
                                                                   self.label_list))
        return results

    def predict(self, estimator, input_fn, examples, checkpoint_path=None):
        outputs = base.in_input_order(estimator.predict(input_fn, checkpoint_path=checkpoint_path))
        if self.windowed:
            logits = self.example_outputs([o["logits"] for o in outputs],
                                          [o["example_index"] for o in outputs], len(examples))
            rows = self.probabilities(logits)
        else:
            key = "predictions" if self.is_regression else "probabilities"
            rows = [prediction[key] for prediction in outputs]
        if len(rows) != len(examples):
            raise BertTfError(f"predicted {len(rows)} of {len(examples)} test examples; "
                              "delete predict.tf_record in --output_dir and rerun.")
        path = os.path.join(self.options.run.output_dir, "test_results.tsv")
        fileio.atomic_write_text(path, format_test_results(rows))
        logging.info("Wrote %s", path)
        return None

    def probabilities(self, logits):
        """What test_results.tsv holds per example, from its logits [N, C]."""
        return probabilities_from_logits(logits, self.is_regression, self.multi_label)

    def run_files(self):
        return {} if self.is_regression else {base.LABEL_LIST_FILE: self._label_file_text()}

    def export_files(self):
        files = {base.LABEL_LIST_FILE: self._label_file_text()}
        t = self.task_options
        if self.windowed:
            files["windows.txt"] = (
                "The model scores one window of at most max_seq_length word pieces and "
                "returns its probabilities and logits. Trained with --doc_stride="
                f"{t.doc_stride}: cut a longer text_a into windows starting every "
                f"{t.doc_stride} word pieces (text_b repeated in each), take the "
                f"{t.window_aggregation} of the windows' logits as the example's logits, and "
                f"{'a sigmoid per label' if self.multi_label else 'a softmax'} of those as "
                "its probabilities.\n")
        return files

    def _label_file_text(self):
        # The order of the probabilities (regression: one predicted value).
        labels = self.label_list or ["prediction"]
        return "".join(f"{label}\n" for label in labels)

    def _class_weights_text(self):
        return ", ".join(f"{label}={weight:.6g}"
                         for label, weight in zip(self.label_list, self.class_weights,
                                                  strict=True))

    def results_header(self):
        header = []
        if self.class_weights:
            header.append(f"class_weights: {self._class_weights_text()}")
        if self.windowed:
            header.append(f"windows: doc_stride={self.task_options.doc_stride}, "
                          f"aggregation={self.task_options.window_aggregation}")
        return header

    def predict_settings(self):
        t = self.task_options
        settings = {"task_name": self.task_name, "is_regression": self.is_regression,
                    "multi_label": self.multi_label,
                    "multi_label_threshold": t.multi_label_threshold}
        if self.windowed:
            settings.update(doc_stride=t.doc_stride, window_aggregation=t.window_aggregation)
        return settings

