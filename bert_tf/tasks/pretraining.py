"""Pre-training: masked LM + next-sentence prediction heads, model_fn and input_fn.

The heads and their variables follow the Google checkpoint layout
(`cls/predictions/...`, `cls/seq_relationship/...`): the MLM decoder is tied
to the word embeddings, with its own output bias.
"""

import numpy as np
import tensorflow as tf

from bert_tf import distribute, errors, modeling, precision
from bert_tf import estimator as estimator_lib
from bert_tf.data import tfrecords
from bert_tf.errors import BertTfError
from bert_tf.tasks import model_fn_parts

tf1 = tf.compat.v1


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
      input_tensor: float Tensor [B, S, H], the encoder output.
      output_weights: the word embedding table [V, H] (the tied decoder).
      positions: int Tensor [B, P], masked positions.
      label_ids: int Tensor [B, P], original ids at those positions.
      label_weights: float Tensor [B, P], 1.0 for real predictions, 0.0 for padding.

    Returns:
      (loss scalar, per_example_loss [B*P], log_probs [B*P, V]), all float32.
    """
    input_tensor = gather_indexes(input_tensor, positions)  # [B*P, H]
    with tf1.variable_scope("cls/predictions"):
        with tf1.variable_scope("transform"):
            input_tensor = modeling.dense_layer(
                input_tensor, bert_config.hidden_size,
                activation=modeling.get_activation(bert_config.hidden_act),
                kernel_initializer=modeling.create_initializer(bert_config.initializer_range))
            input_tensor = modeling.layer_norm(
                input_tensor, epsilon=getattr(bert_config, "layer_norm_eps", 1e-12))
        output_bias = tf1.get_variable("output_bias", shape=[bert_config.vocab_size],
                                       initializer=tf1.zeros_initializer())
        logits = tf.matmul(input_tensor, output_weights, transpose_b=True)  # [B*P, V]
        # Softmax and loss in float32 whatever the compute dtype.
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)

        label_ids = tf.reshape(label_ids, [-1])
        label_weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
        one_hot_labels = tf.one_hot(label_ids, depth=bert_config.vocab_size, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(log_probs * one_hot_labels, axis=[-1])
        # Padding predictions carry weight 0; 1e-5 keeps an all-padding batch finite.
        numerator = tf.reduce_sum(label_weights * per_example_loss)
        denominator = tf.reduce_sum(label_weights) + 1e-5
        loss = numerator / denominator
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
        output_weights = tf1.get_variable(
            "output_weights", shape=[2, bert_config.hidden_size],
            initializer=modeling.create_initializer(bert_config.initializer_range),
            dtype=input_tensor.dtype)
        output_bias = tf1.get_variable("output_bias", shape=[2],
                                       initializer=tf1.zeros_initializer())
        logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        labels = tf.reshape(labels, [-1])
        one_hot_labels = tf.one_hot(labels, depth=2, dtype=tf.float32)
        per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss)
    return loss, per_example_loss, log_probs


def model_fn_builder(bert_config, init_checkpoint=None, learning_rate=1e-4, num_train_steps=1,
                     num_warmup_steps=0, optimizer="adamw", num_accumulation_steps=1,
                     compute_dtype=tf.float32, use_one_hot_embeddings=False):
    """Returns a model_fn(features, labels, mode, params) for MLM + NSP pre-training.

    Args:
      bert_config: `BertConfig`.
      init_checkpoint: optional checkpoint to initialize same-named variables from.
      learning_rate: peak learning rate.
      num_train_steps: optimizer updates in the whole run (the schedule's length).
      num_warmup_steps: linear warmup updates.
      optimizer: "adamw" or "lamb".
      num_accumulation_steps: micro-batches per update (each session run is one).
      compute_dtype: tf.float32, tf.bfloat16 or tf.float16.
      use_one_hot_embeddings: one-hot embedding lookup (TPUs).
    """

    def model_fn(features, labels, mode, params):
        del labels, params  # Labels travel in `features`, as in the TFRecords.
        is_training = mode == estimator_lib.ModeKeys.TRAIN
        model = model_fn_parts.bert_from_features(bert_config, features, is_training,
                                                  use_one_hot_embeddings, compute_dtype)

        with precision.compute_dtype_scope(compute_dtype):
            mlm_loss, mlm_example_loss, mlm_log_probs = masked_lm_output(
                bert_config, model.get_sequence_output(), model.get_embedding_table(),
                features["masked_lm_positions"], features["masked_lm_ids"],
                features["masked_lm_weights"])
            nsp_loss, nsp_example_loss, nsp_log_probs = next_sentence_output(
                bert_config, model.get_pooled_output(), features["next_sentence_labels"])
        total_loss = mlm_loss + nsp_loss

        if init_checkpoint:
            modeling.init_from_checkpoint(init_checkpoint)

        if mode == estimator_lib.ModeKeys.TRAIN:
            return model_fn_parts.train_spec(
                total_loss, features["input_ids"], learning_rate, num_train_steps,
                num_warmup_steps, optimizer, num_accumulation_steps, compute_dtype)

        if mode == estimator_lib.ModeKeys.EVAL:
            metrics = pretraining_metrics(
                mlm_example_loss, mlm_log_probs, features["masked_lm_ids"],
                features["masked_lm_weights"], nsp_example_loss, nsp_log_probs,
                features["next_sentence_labels"])
            return estimator_lib.EstimatorSpec(mode=mode, loss=total_loss,
                                               eval_metric_ops=metrics)

        raise BertTfError(f"pre-training supports train and eval, not mode '{mode}'.")

    return model_fn


def pretraining_metrics(mlm_example_loss, mlm_log_probs, mlm_ids, mlm_weights, nsp_example_loss,
                        nsp_log_probs, nsp_labels):
    """Streaming eval metrics: masked-LM and next-sentence accuracy and mean loss.

    Args:
      mlm_example_loss: [B*P]; mlm_log_probs: [B*P, V]; mlm_ids, mlm_weights: [B, P].
      nsp_example_loss: [B]; nsp_log_probs: [B, 2]; nsp_labels: [B] or [B, 1].

    Returns:
      dict name -> (value, update_op) from tf.compat.v1.metrics.
    """
    mlm_predictions = tf.argmax(mlm_log_probs, axis=-1, output_type=tf.int32)
    mlm_ids = tf.reshape(mlm_ids, [-1])
    mlm_weights = tf.reshape(tf.cast(mlm_weights, tf.float32), [-1])
    nsp_predictions = tf.argmax(nsp_log_probs, axis=-1, output_type=tf.int32)
    nsp_labels = tf.reshape(nsp_labels, [-1])
    return {
        "masked_lm_accuracy": tf1.metrics.accuracy(labels=mlm_ids, predictions=mlm_predictions,
                                                   weights=mlm_weights),
        "masked_lm_loss": tf1.metrics.mean(values=mlm_example_loss, weights=mlm_weights),
        "next_sentence_accuracy": tf1.metrics.accuracy(labels=nsp_labels,
                                                       predictions=nsp_predictions),
        "next_sentence_loss": tf1.metrics.mean(values=nsp_example_loss),
    }


def expand_input_files(input_file, flag="input_file"):
    """Expands a comma-separated list of files and globs; errors name the flag and pattern."""
    patterns = [p.strip() for p in (input_file or "").split(",") if p.strip()]
    if not patterns:
        raise BertTfError(f"--{flag}: no input files given; pass a file, a glob or a "
                          "comma-separated list.")
    files = []
    for pattern in patterns:
        matched = sorted(tf.io.gfile.glob(pattern))
        if not matched:
            raise BertTfError(f"--{flag}: '{pattern}' matches no file; check the path or glob.")
        files.extend(m for m in matched if not tf.io.gfile.isdir(m))
    return files


def check_pretraining_records(input_files, max_seq_length, max_predictions_per_seq):
    """Checks the first record of each file against the flags before training starts.

    Raises:
      BertTfError: naming the file, the mismatching length and the flag to change,
        or the missing key if the file is not pre-training data.
    """
    expected = {"input_ids": ("max_seq_length", max_seq_length),
                "masked_lm_positions": ("max_predictions_per_seq", max_predictions_per_seq)}
    for path in input_files:
        try:
            record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
        except (tf.errors.OpError, RuntimeError) as e:
            raise BertTfError(f"--input_file: '{path}' is not a readable TFRecord file "
                              f"({errors.short_tf_error(e)}); pass files written by "
                              "create_pretraining_data.py.") from None
        if record is None:
            raise BertTfError(f"--input_file: '{path}' holds no records; regenerate it with "
                              "create_pretraining_data.py.")
        example = tf.train.Example.FromString(record.numpy())
        feature = example.features.feature
        missing = sorted(set(tfrecords.pretraining_feature_spec(1, 1)) - set(feature))
        if missing:
            raise BertTfError(f"--input_file: '{path}' lacks pre-training keys {missing}; pass "
                              "files written by create_pretraining_data.py.")
        for key, (flag, value) in expected.items():
            length = len(feature[key].int64_list.value)
            if length != value:
                raise BertTfError(
                    f"--input_file: records in '{path}' have {key} of length {length} but "
                    f"--{flag}={value}; pass --{flag}={length} or regenerate the data with "
                    f"--{flag}={value}.")


def input_fn_builder(input_files, max_seq_length, max_predictions_per_seq, is_training,
                     num_cpu_threads=4, shuffle=True):
    """Returns an input_fn(params, input_context=None) reading pre-training TFRecords.

    Batches of params["batch_size"] (per replica under a distribution strategy). Training
    repeats and, with `shuffle`, shuffles: files interleaved in parallel, then records.
    Evaluation reads each record once, in order. Under a multi-worker strategy each worker
    reads its own files, or its own records when there are fewer files than workers
    (`distribute.record_dataset`). Int64 features arrive as int32.
    """
    feature_spec = tfrecords.pretraining_feature_spec(max_seq_length, max_predictions_per_seq)

    def parse(serialized):
        features = tf.io.parse_example(serialized, feature_spec)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
                for k, v in features.items()}

    def input_fn(params, input_context=None):
        batch_size = params["batch_size"]
        d = distribute.record_dataset(input_files, is_training, input_context=input_context,
                                      shuffle=shuffle, num_cpu_threads=num_cpu_threads)
        # Batch first so one vectorised parse handles the whole batch.
        d = d.batch(batch_size, drop_remainder=True)
        d = d.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return d.prefetch(tf.data.AUTOTUNE)

    return input_fn



def masked_lm_majority_baseline(train_files, eval_files):
    """The masked-LM accuracy of always predicting the most frequent masked token.

    The token is the most frequent (weighted) `masked_lm_ids` value in
    `train_files`; the accuracy is measured on `eval_files`. A model that has
    learnt anything beyond unigram frequency must beat it.

    Returns:
      (token_id, accuracy).
    """
    spec = {"masked_lm_ids": tf.io.VarLenFeature(tf.int64),
            "masked_lm_weights": tf.io.VarLenFeature(tf.float32)}

    def weighted_ids(files):
        for serialized in tf.data.TFRecordDataset(files).batch(1024):
            parsed = tf.io.parse_example(serialized, spec)
            ids = tf.sparse.to_dense(parsed["masked_lm_ids"]).numpy().reshape(-1)
            weights = tf.sparse.to_dense(parsed["masked_lm_weights"]).numpy().reshape(-1)
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


def run_pretraining(options):
    """Runs pre-training and/or evaluation as `scripts/run_pretraining.py` configures it.

    Args:
      options: an object with the script's flag values as attributes (absl FLAGS).

    Returns:
      The eval results dict if `do_eval`, else None.
    """
    from bert_tf import fileio
    from bert_tf import flags as flag_lib

    if not options.do_train and not options.do_eval:
        raise BertTfError("At least one of --do_train or --do_eval must be True.")
    flag_lib.check_positive(options, "train_batch_size", "eval_batch_size", "max_seq_length",
                            "max_predictions_per_seq", "num_accumulation_steps")
    bert_config = modeling.BertConfig.from_json_file(options.bert_config_file)
    if options.max_seq_length > bert_config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length={options.max_seq_length} is longer than max_position_embeddings "
            f"({bert_config.max_position_embeddings}) in {options.bert_config_file}; lower "
            "--max_seq_length.")
    if options.train_batch_size % options.num_accumulation_steps:
        raise BertTfError(
            f"--train_batch_size={options.train_batch_size} is not divisible by "
            f"--num_accumulation_steps={options.num_accumulation_steps}; the micro-batch is "
            "train_batch_size / num_accumulation_steps, pick values where it divides.")
    input_files = expand_input_files(options.input_file)
    check_pretraining_records(input_files, options.max_seq_length,
                              options.max_predictions_per_seq)
    eval_files = input_files
    if options.do_eval and getattr(options, "eval_input_file", None):
        eval_files = expand_input_files(options.eval_input_file, flag="eval_input_file")
        check_pretraining_records(eval_files, options.max_seq_length,
                                  options.max_predictions_per_seq)
    tf1.logging.info("Input files: %d for training, %d for eval", len(input_files),
                     len(eval_files))
    strategy = distribute.strategy_from_flags(options)
    micro_batch = options.train_batch_size // options.num_accumulation_steps
    if options.do_train:
        per_replica_batch = distribute.per_replica_batch_size(
            options.train_batch_size, strategy,
            num_accumulation_steps=options.num_accumulation_steps)
    fileio.ensure_output_dir(options.output_dir)

    model_fn = model_fn_builder(
        bert_config=bert_config, init_checkpoint=options.init_checkpoint,
        learning_rate=options.learning_rate, num_train_steps=options.num_train_steps,
        num_warmup_steps=options.num_warmup_steps, optimizer=options.optimizer,
        num_accumulation_steps=options.num_accumulation_steps,
        compute_dtype=flag_lib.compute_dtype(options))
    run_config = flag_lib.run_config_from_flags(options, strategy)
    estimator = estimator_lib.Estimator(
        model_fn, options.output_dir, config=run_config, train_batch_size=micro_batch,
        eval_batch_size=options.eval_batch_size)

    if options.do_train:
        tf1.logging.info("Training: batch %d (%d micro-batches of %d), %d steps; %d replicas "
                         "with %d examples each per micro-batch", options.train_batch_size,
                         options.num_accumulation_steps, micro_batch, options.num_train_steps,
                         distribute.num_replicas(strategy), per_replica_batch)
        estimator.train(input_fn_builder(input_files, options.max_seq_length,
                                         options.max_predictions_per_seq, is_training=True,
                                         shuffle=getattr(options, "shuffle_train_input", True)),
                        max_steps=options.num_train_steps)
    if not options.do_eval:
        return None
    if not distribute.is_chief(strategy):
        tf1.logging.info("Not the chief: skipping --do_eval (the chief evaluates).")
        return None
    results = estimator.evaluate(
        input_fn_builder(eval_files, options.max_seq_length, options.max_predictions_per_seq,
                         is_training=False),
        steps=options.max_eval_steps)
    results = {key: (int(value) if key == "global_step" else float(value))
               for key, value in results.items()}
    path = fileio.write_eval_results(options.output_dir, results)
    tf1.logging.info("***** Eval results (%s) *****", path)
    for key in sorted(results):
        tf1.logging.info("  %s = %s", key, results[key])
    if getattr(options, "report_majority_baseline", False):
        token_id, accuracy = masked_lm_majority_baseline(input_files, eval_files)
        tf1.logging.info("  majority baseline: always predicting token id %d gives "
                         "masked_lm_accuracy = %.4f (model: %.4f)", token_id, accuracy,
                         results["masked_lm_accuracy"])
        results["majority_baseline_accuracy"] = accuracy
    return results
