"""Pre-training: masked LM + next-sentence prediction heads, model_fn and input_fn.

The heads and their variables follow the Google checkpoint layout
(`cls/predictions/...`, `cls/seq_relationship/...`): the MLM decoder is tied
to the word embeddings, with its own output bias.

`--next_sentence_objective` says what the records were written for: `nsp` (next sentence)
and `sop` (sentence order, ALBERT) train the same `cls/seq_relationship` head on
next_sentence_labels; `none` builds no sentence head (MLM only). The records do not name
their objective: nsp and sop look alike, so the flag must match create_pretraining_data's;
`check_pretraining_records` catches the mix-up it can see, `none` records (one segment)
read as nsp / sop or the reverse.

Records written with `--masking=dynamic` (no masked_lm_* features) are recognised from their
keys and masked in the input pipeline (`bert_tf.data.dynamic_masking`), afresh every epoch.
"""


import dataclasses
import functools

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import errors, fileio, modeling
from bert_tf.data import dynamic_masking, input_pipeline, record_integrity, record_writing
from bert_tf.errors import BertTfError
from bert_tf.tasks import base, heads, registry
from bert_tf.training import estimator as estimator_lib
from bert_tf.training import runner
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1

RECORDS = "TFRecord files written by create_pretraining_data.py (comma-separated, globs allowed)"


def gather_indexes(sequence_tensor, positions):
    """Gathers the vectors at the given positions.

    Args:
      sequence_tensor: float Tensor [B, S, H].
      positions: int Tensor [B, P], positions within each sequence.

    Returns:
      float Tensor [B*P, H].
    """
    batch_size, seq_length, width = modeling.get_shape_list(sequence_tensor, expected_rank=3,
                                                            name="sequence_tensor")
    flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
    flat_positions = tf.reshape(tf.cast(positions, tf.int32) + flat_offsets, [-1])
    flat_sequence_tensor = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
    return tf.gather(flat_sequence_tensor, flat_positions)


def masked_lm_output(bert_config, input_tensor, output_weights, positions, label_ids,
                     label_weights):
    """The masked-LM head and loss, computed only at the masked positions.

    Args:
      bert_config: `BertConfig`.
      input_tensor: float Tensor [B, S, H], the encoder output; or, with `positions` None,
        [B, P, H], the encoder output at the masked positions.
      output_weights: the word embedding table [V, E] (the tied decoder; E = H except for
        ALBERT, whose transform `cls/predictions/transform/dense` is [H, E]).
      positions: int Tensor [B, P], masked positions, or None.
      label_ids: int Tensor [B, P], original ids at those positions.
      label_weights: float Tensor [B, P], 1.0 for real predictions, 0.0 for padding.

    Returns:
      (loss scalar, per_example_loss [B*P], log_probs [B*P, V]), all float32.
    """
    if positions is None:
        input_tensor = tf.reshape(input_tensor, [-1, bert_config.hidden_size])  # [B*P, H]
    else:
        input_tensor = gather_indexes(input_tensor, positions)  # [B*P, H]
    with tf1.variable_scope("cls/predictions"):
        with tf1.variable_scope("transform"):
            # ALBERT's transform maps H to E, the width of the tied word embeddings.
            input_tensor = modeling.dense_layer(
                input_tensor, bert_config.embedding_width,
                activation=modeling.get_activation(bert_config.hidden_act),
                kernel_initializer=modeling.create_initializer(bert_config.initializer_range))
            input_tensor = modeling.layer_norm(
                input_tensor, epsilon=bert_config.layer_norm_eps)
        logits = heads.output_projection(input_tensor, bert_config.vocab_size,
                                         output_weights=output_weights)  # [B*P, V]
        # Padding predictions carry weight 0.
        loss, per_example_loss, log_probs = heads.softmax_cross_entropy(
            logits, tf.reshape(label_ids, [-1]), weights=tf.reshape(label_weights, [-1]))
    return loss, per_example_loss, log_probs


def next_sentence_output(bert_config, input_tensor, labels):
    """The next-sentence head and loss on the pooled output.

    Args:
      bert_config: `BertConfig`.
      input_tensor: float Tensor [B, H], the pooled [CLS] output.
      labels: int Tensor [B] or [B, 1]; 0 = B follows A, 1 = B is random.

    Returns:
      (loss scalar, per_example_loss [B], log_probs [B, 2]), all float32.
    """
    with tf1.variable_scope("cls/seq_relationship"):
        logits = heads.output_projection(input_tensor, 2, bert_config.initializer_range)
        loss, per_example_loss, log_probs = heads.softmax_cross_entropy(
            logits, tf.reshape(labels, [-1]))
    return loss, per_example_loss, log_probs


def model_fn_builder(encoder, training=None, next_sentence_objective="nsp"):
    """Returns a model_fn(features, labels, mode, params) for MLM + NSP / SOP pre-training.

    Args:
      encoder: a `model_fn_parts.Encoder`: the BERT config, the checkpoint that initializes
        it, the compute dtype.
      training: a `TrainingStep`: the optimizer, its schedule, accumulation, frozen layers
        (None: its defaults).
      next_sentence_objective: "nsp", "sop" or "none" (MLM only: no sentence head at all).
    """
    training = training or TrainingStep()
    bert_config = encoder.bert_config
    has_sentence_head = next_sentence_objective != "none"

    @estimator_lib.purpose_from_mode
    def model_fn(features, labels, mode, params, purpose):
        del labels, params  # Labels travel in `features`, as in the TFRecords.

        def heads_fn(model, is_training):
            del is_training  # The pre-training heads have no dropout of their own.
            # The sequence output is the final layer at the masked positions already.
            mlm = masked_lm_output(bert_config, model.get_sequence_output(),
                                   model.get_embedding_table(), None,
                                   features["masked_lm_ids"], features["masked_lm_weights"])
            return mlm, next_sentence_output(
                bert_config, model.get_pooled_output(),
                features["next_sentence_labels"]) if has_sentence_head else None

        (mlm_loss, mlm_example_loss, mlm_log_probs), sentence = encoder.build(
            features, purpose, heads_fn, sequence_positions=features["masked_lm_positions"])
        total_loss = mlm_loss if sentence is None else mlm_loss + sentence[0]

        if mode == estimator_lib.ModeKeys.TRAIN:
            metrics = training_metrics(
                mlm_example_loss, mlm_log_probs, features["masked_lm_ids"],
                features["masked_lm_weights"], *(sentence[1:] if sentence else (None, None)),
                features["next_sentence_labels"], next_sentence_objective)
            return training.spec(total_loss, features["input_ids"], metrics)

        if mode == estimator_lib.ModeKeys.EVAL:
            metrics = pretraining_metrics(
                mlm_example_loss, mlm_log_probs, features["masked_lm_ids"],
                features["masked_lm_weights"], *(sentence[1:] if sentence else (None, None)),
                features["next_sentence_labels"], next_sentence_objective)
            return estimator_lib.EstimatorSpec(mode=mode, loss=total_loss,
                                               eval_metric_ops=metrics)

        raise BertTfError(f"pre-training supports train and eval, not mode '{mode}'.")

    return model_fn


@dataclasses.dataclass(frozen=True)
class RecordSplit:
    """The pre-training records of one split, checked (`PretrainingTask.read_examples`).

    Attributes:
      files: the TFRecord files.
      dynamic: whether they are dynamic-masking records (masked in the input pipeline).
      flag: the flag that named them, for messages.
      record_limits: {path: whole records} of damaged files read only partly
        (`record_integrity.check_record_files`, --skip_corrupt_records).
    """

    files: list
    dynamic: bool
    flag: str
    record_limits: dict


@registry.register
class PretrainingTask(base.TrainableTask):
    """Masked LM + next sentence (or sentence order) pre-training, as scripts/run_pretraining.py
    runs it (`bert_tf.runs.driver.run_task`) and the benchmarks and exported steps build it.

    Made with `PretrainingTask(None, options)`, `options` a `bert_tf.options.PretrainOptions`:
    it reads checked record files (no tokenizer: the records hold token ids), trains for
    --num_train_steps and evaluates --max_eval_steps batches of the held-out records.
    """

    name = "pretraining"
    benchmarks = 3
    infer_mode = estimator_lib.ModeKeys.EVAL  # Its forward with losses; no PREDICT head.

    def check_batch_sizes(self):
        runner.check_positive(self.options, "max_predictions_per_seq")
        super().check_batch_sizes()

    def read_examples(self):
        """(train, eval, None) `RecordSplit`s: every record file checked first (its features'
        lengths and its objective), then the damaged ones measured."""
        options = self.options
        check = functools.partial(check_pretraining_records,
                                  max_seq_length=options.model.max_seq_length,
                                  max_predictions_per_seq=options.max_predictions_per_seq,
                                  next_sentence_objective=options.next_sentence_objective)
        skip = options.run.skip_corrupt_records
        input_files = self.train_files
        record_limits = record_integrity.check_record_files(input_files, "input_file", skip)
        train = evaluation = RecordSplit(input_files, check(input_files), "input_file",
                                         record_limits)
        if options.eval_input_file:
            eval_files = fileio.expand_input_files(options.eval_input_file,
                                                   flag="eval_input_file", what=RECORDS)
            record_limits.update(
                record_integrity.check_record_files(eval_files, "eval_input_file", skip))
            evaluation = RecordSplit(eval_files, check(eval_files, flag="eval_input_file"),
                                     "eval_input_file", record_limits)
        logging.info("Input files: %d for training (%s masking), %d for eval", len(input_files),
                     "dynamic" if train.dynamic else "static", len(evaluation.files))
        return train, evaluation, None

    @functools.cached_property
    def train_files(self):
        """The --input_file record files, expanded once (the majority baseline reads them
        again after evaluation)."""
        return fileio.expand_input_files(self.options.input_file, what=RECORDS)

    def metric_names(self):
        return metric_names(self.options.next_sentence_objective)

    def training_schedule(self, train_examples):
        del train_examples  # The schedule is in steps.
        return self.options.train.num_train_steps, self.options.num_warmup_steps

    def model_fn(self, encoder, training):
        return model_fn_builder(encoder, training,
                                next_sentence_objective=self.options.next_sentence_objective)

    def split_input_fn(self, split, examples, feature_dir, tokenizer, is_training):
        del split, feature_dir, tokenizer  # Records of token ids, read where they are.
        options = self.options
        return input_fn_builder(
            examples.files, options.model.max_seq_length, options.max_predictions_per_seq,
            is_training, shuffle=options.run.shuffle_train_input,
            record_limits=examples.record_limits,
            skip_corrupt_records=options.run.skip_corrupt_records, flag=examples.flag,
            dynamic=examples.dynamic, vocab_size=self.vocab_size,
            random_seed=options.run.random_seed)

    @functools.cached_property
    def vocab_size(self):
        """The config's vocab_size: the range of dynamic masking's random replacement ids."""
        return runner.load_bert_config(self.options.model).vocab_size

    def describe(self, examples):
        return f"{len(examples.files)} record files"

    def evaluate(self, estimator, input_fn, examples, checkpoint_path=None):
        del examples  # Held in `input_fn`.
        return runner.evaluate(estimator, input_fn, steps=self.options.max_eval_steps,
                               checkpoint_path=checkpoint_path)

    def write_eval_files(self, examples, results):
        """With --report_majority_baseline: logs the masked-LM accuracy of always predicting
        the training data's most frequent masked token, and adds it to `results`."""
        if not self.options.report_majority_baseline:
            return
        token_id, accuracy = masked_lm_majority_baseline(self.train_files, examples.files)
        logging.info("  majority baseline: always predicting token id %d gives "
                     "masked_lm_accuracy = %.4f (model: %.4f)", token_id, accuracy,
                     results["masked_lm_accuracy"])
        results["majority_baseline_accuracy"] = accuracy

    @classmethod
    def step_model_fn(cls, encoder, training, num_labels):
        del num_labels
        return model_fn_builder(encoder, training)

    @classmethod
    def step_features(cls, seq_length, max_predictions_per_seq, num_labels, vocab_size):
        del num_labels
        return [("masked_lm_positions", max_predictions_per_seq, tf.int32, seq_length),
                ("masked_lm_ids", max_predictions_per_seq, tf.int32, vocab_size),
                ("masked_lm_weights", max_predictions_per_seq, tf.float32, None),
                ("next_sentence_labels", None, tf.int32, 2)]

    @classmethod
    def check_step_sizes(cls, seq_length, max_predictions_per_seq):
        if max_predictions_per_seq > seq_length:
            raise BertTfError(f"--max_predictions_per_seq ({max_predictions_per_seq}) must "
                              f"not exceed --max_seq_length ({seq_length}).")

    @classmethod
    def head_rows(cls, mode, seq_length, max_predictions_per_seq):
        del mode, seq_length
        return 1 + max_predictions_per_seq  # [CLS] and the masked positions.

    @classmethod
    def head_flops(cls, bert_config, seq_length, max_predictions_per_seq, num_labels):
        del seq_length, num_labels
        hidden, predictions = bert_config.hidden_size, max_predictions_per_seq
        # The pooler and next-sentence head; the MLM transform and the tied decoder at the
        # P gathered positions.
        return (2 * hidden * hidden + 2 * hidden * 2 + 2 * predictions * hidden * hidden
                + 2 * predictions * hidden * bert_config.vocab_size)


# The eval result names of the sentence head: the original's for nsp, ALBERT's for sop.
SENTENCE_METRICS = {"nsp": "next_sentence", "sop": "sentence_order"}


def metric_names(next_sentence_objective="nsp"):
    """The keys of the eval results of a run with this objective."""
    names = ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss"]
    if next_sentence_objective in SENTENCE_METRICS:
        prefix = SENTENCE_METRICS[next_sentence_objective]
        names += [f"{prefix}_accuracy", f"{prefix}_loss"]
    return tuple(names)


def training_metrics(mlm_example_loss, mlm_log_probs, mlm_ids, mlm_weights, nsp_example_loss,
                     nsp_log_probs, nsp_labels, next_sentence_objective="nsp"):
    """The eval metrics of `pretraining_metrics` on one training batch, as float32 scalars
    (logged every --log_every_n_steps and written to TensorBoard while training).

    Args: as `pretraining_metrics`.
    """
    mlm_ids = tf.reshape(mlm_ids, [-1])
    mlm_weights = tf.reshape(tf.cast(mlm_weights, tf.float32), [-1])
    mlm_hits = tf.cast(tf.equal(tf.argmax(mlm_log_probs, axis=-1, output_type=tf.int32),
                                mlm_ids), tf.float32)
    total_weight = tf.reduce_sum(mlm_weights) + 1e-5
    metrics = {
        "masked_lm_loss": tf.reduce_sum(mlm_example_loss * mlm_weights) / total_weight,
        "masked_lm_accuracy": tf.reduce_sum(mlm_hits * mlm_weights) / total_weight,
    }
    if next_sentence_objective in SENTENCE_METRICS:
        prefix = SENTENCE_METRICS[next_sentence_objective]
        nsp_labels = tf.reshape(nsp_labels, [-1])
        nsp_hits = tf.cast(tf.equal(tf.argmax(nsp_log_probs, axis=-1, output_type=tf.int32),
                                    nsp_labels), tf.float32)
        metrics[f"{prefix}_loss"] = tf.reduce_mean(nsp_example_loss)
        metrics[f"{prefix}_accuracy"] = tf.reduce_mean(nsp_hits)
    return metrics


def pretraining_metrics(mlm_example_loss, mlm_log_probs, mlm_ids, mlm_weights, nsp_example_loss,
                        nsp_log_probs, nsp_labels, next_sentence_objective="nsp"):
    """Streaming eval metrics: masked-LM and next-sentence accuracy and mean loss.

    Args:
      mlm_example_loss: [B*P]; mlm_log_probs: [B*P, V]; mlm_ids, mlm_weights: [B, P].
      nsp_example_loss: [B]; nsp_log_probs: [B, 2]; nsp_labels: [B] or [B, 1] (unused for
        the objective "none").
      next_sentence_objective: "nsp" (next_sentence_accuracy / _loss), "sop"
        (sentence_order_accuracy / _loss) or "none" (masked-LM metrics only).

    Returns:
      dict name -> (value, update_op) from tf.compat.v1.metrics.
    """
    mlm_predictions = tf.argmax(mlm_log_probs, axis=-1, output_type=tf.int32)
    mlm_ids = tf.reshape(mlm_ids, [-1])
    mlm_weights = tf.reshape(tf.cast(mlm_weights, tf.float32), [-1])
    metrics = {
        "masked_lm_accuracy": tf1.metrics.accuracy(labels=mlm_ids, predictions=mlm_predictions,
                                                   weights=mlm_weights),
        "masked_lm_loss": tf1.metrics.mean(values=mlm_example_loss, weights=mlm_weights),
    }
    if next_sentence_objective in SENTENCE_METRICS:
        name = SENTENCE_METRICS[next_sentence_objective]
        nsp_predictions = tf.argmax(nsp_log_probs, axis=-1, output_type=tf.int32)
        metrics[f"{name}_accuracy"] = tf1.metrics.accuracy(labels=tf.reshape(nsp_labels, [-1]),
                                                           predictions=nsp_predictions)
        metrics[f"{name}_loss"] = tf1.metrics.mean(values=nsp_example_loss)
    return metrics


def _first_example_features(path, flag):
    """The feature map of the first record of `path`; BertTfError if there is none."""
    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except (tf.errors.OpError, RuntimeError) as e:
        raise BertTfError(f"--{flag}: '{path}' is not a readable TFRecord file "
                          f"({errors.short_tf_error(e)}); pass files written by "
                          "create_pretraining_data.py.") from None
    if record is None:
        raise BertTfError(f"--{flag}: '{path}' holds no records; regenerate it with "
                          "create_pretraining_data.py.")
    return tf.train.Example.FromString(record.numpy()).features.feature


def _check_objective(feature, path, flag, next_sentence_objective):
    """nsp / sop records always have a segment B; records for "none" never have one."""
    two_segments = 1 in feature["segment_ids"].int64_list.value
    if two_segments == (next_sentence_objective != "none"):
        return
    written = "nsp or sop (two segments)" if two_segments else "none (one segment)"
    raise BertTfError(
        f"--{flag}: records in '{path}' were written with --next_sentence_objective={written} "
        f"but --next_sentence_objective={next_sentence_objective}; pass the objective the "
        "records were written with (create_pretraining_data.py's flag).")


def check_pretraining_records(input_files, max_seq_length, max_predictions_per_seq,
                              flag="input_file", next_sentence_objective=None):
    """Checks the first record of each file against the flags before training starts.

    Returns:
      True if the files hold records for dynamic masking (no masks), False for static ones.

    Raises:
      BertTfError: naming the file, the mismatching length and the flag to change, the
        missing key if the file is not pre-training data, files of both kinds, or records
        of another `next_sentence_objective` (when given).
    """
    dynamic_keys = {name for name, _, _ in record_writing.DYNAMIC_FEATURES}
    static_keys = set(record_writing.pretraining_feature_spec(1, 1))
    kinds = {}
    for path in input_files:
        feature = _first_example_features(path, flag)
        dynamic = not static_keys <= set(feature) and dynamic_keys <= set(feature)
        missing = sorted((dynamic_keys if dynamic else static_keys) - set(feature))
        if missing:
            raise BertTfError(f"--{flag}: '{path}' lacks pre-training keys {missing}; pass "
                              "files written by create_pretraining_data.py.")
        kinds.setdefault(dynamic, path)
        if len(kinds) > 1:
            raise BertTfError(
                f"--{flag}: '{kinds[True]}' holds records for dynamic masking but "
                f"'{kinds[False]}' static ones; pass files written with the same --masking.")
        expected = {"input_ids": ("max_seq_length", max_seq_length)}
        if not dynamic:
            expected["masked_lm_positions"] = ("max_predictions_per_seq",
                                               max_predictions_per_seq)
        for key, (name, value) in expected.items():
            length = len(feature[key].int64_list.value)
            if length != value:
                raise BertTfError(
                    f"--{name}: records in '{path}' have {key} of length {length} but "
                    f"--{name}={value}; pass --{name}={length} or regenerate the data with "
                    f"--{name}={value}.")
        if next_sentence_objective:
            _check_objective(feature, path, flag, next_sentence_objective)
    return bool(kinds) and next(iter(kinds))


def input_fn_builder(input_files, max_seq_length, max_predictions_per_seq, is_training,
                     num_cpu_threads=4, shuffle=True, record_limits=None,
                     skip_corrupt_records=False, flag=None, dynamic=False, vocab_size=None,
                     random_seed=None):
    """Returns an input_fn(params, input_context=None) reading pre-training TFRecords.

    Batches of params["batch_size"] (per replica under a distribution strategy), always full
    (eval too, as the original). Training repeats and, with `shuffle`, shuffles: files
    interleaved in parallel, then records. Evaluation reads each record once, in order. Under
    a multi-worker strategy each worker reads its own files, or its own records when there
    are fewer files than workers (`input_pipeline.record_dataset`). Int64 features arrive as
    int32. `record_limits`, `skip_corrupt_records` and `flag`: see `input_pipeline.record_input_fn`.

    With `dynamic` the records are dynamic-masking ones: each batch is masked by
    `dynamic_masking.mask_batch` (random ids below `vocab_size`), seeded by (`random_seed`,
    batch index, input pipeline): new masks every epoch, the same masks on every evaluation.
    """
    map_batch = None
    if dynamic:
        def map_batch(features, batch_index, pipeline_id):
            seed = dynamic_masking.batch_seed(random_seed or 0, batch_index, pipeline_id)
            return dynamic_masking.mask_batch(features, seed, max_predictions_per_seq,
                                              vocab_size)
    return input_pipeline.record_input_fn(
        input_files,
        record_writing.pretraining_feature_spec(max_seq_length, max_predictions_per_seq,
                                                dynamic=dynamic),
        is_training, shuffle=shuffle, drop_remainder=True, num_cpu_threads=num_cpu_threads,
        record_limits=record_limits, skip_corrupt_records=skip_corrupt_records, flag=flag,
        map_batch=map_batch)


def masked_lm_majority_baseline(train_files, eval_files):
    """The masked-LM accuracy of always predicting the most frequent masked token.

    The token is the most frequent (weighted) `masked_lm_ids` value in
    `train_files`; the accuracy is measured on `eval_files`. A model that has
    learnt anything beyond unigram frequency must beat it. Records for dynamic masking have
    no masks yet: there every maskable token (word id > 0) counts, which is what uniform
    masking draws from.

    Returns:
      (token_id, accuracy).
    """
    def weighted_ids(files):
        dynamic = "word_ids" in _first_example_features(files[0], "input_file")
        keys = ("input_ids", "word_ids") if dynamic else ("masked_lm_ids", "masked_lm_weights")
        spec = {keys[0]: tf.io.VarLenFeature(tf.int64),
                keys[1]: tf.io.VarLenFeature(tf.float32 if not dynamic else tf.int64)}
        for serialized in tf.data.TFRecordDataset(files).batch(1024):
            parsed = tf.io.parse_example(serialized, spec)
            ids = tf.sparse.to_dense(parsed[keys[0]]).numpy().reshape(-1)
            weights = tf.sparse.to_dense(parsed[keys[1]]).numpy().reshape(-1)
            yield ids[weights > 0]

    counts = {}
    for ids in weighted_ids(train_files):
        values, freq = np.unique(ids, return_counts=True)
        for value, n in zip(values.tolist(), freq.tolist(), strict=True):
            counts[value] = counts.get(value, 0) + n
    token_id = max(counts, key=counts.get)
    hits = total = 0
    for ids in weighted_ids(eval_files):
        hits += int((ids == token_id).sum())
        total += ids.size
    return token_id, hits / max(total, 1)


