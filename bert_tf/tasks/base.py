"""What every task supplies, and what the tasks share.

A `Task` answers what serving, the Predictor, scripts/predict.py, the benchmarks and the
checkpoint converter ask of it: its name (found in `registry`), its export's inputs and
predict settings, its PREDICT outputs and answer records, its step's features and FLOPs, its
head's Hugging Face layout. A fine-tuning task (classification, NER, SQuAD, multiple choice)
is a `FinetuningTask`, pre-training a `PretrainingTask`; both are `TrainableTask`s, which add
only what differs between tasks in a run: their own checks, reading their data, the model_fn,
the input_fn (a fine-tuning task writes features first), computing metrics and writing
predictions, and the files an export carries. `bert_tf.runs.driver.run_task` runs any of
them the same way. See docs/architecture.md.
"""

import os

import numpy as np
import tensorflow as tf

from bert_tf import fileio
from bert_tf.data import input_pipeline
from bert_tf.errors import BertTfError
from bert_tf.tasks import model_fn_parts
from bert_tf.training import checkpoints, runner
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1


class Task:
    """What a task answers outside training, asked of its class (a model loaded from an export
    has no options to make a task with). Subclasses set the attributes and override the hooks
    that apply to them; `registry.register` makes a subclass findable by its `name`.

    Attributes:
      name: the task's name in an export's `predict_config.json` and in the registry.
      predicts: whether a `Predictor` answers the task's models (`answer`).
      needs_labels: a Predictor of the task needs the label list.
      text_inputs: the string inputs of the export's `serving_text` signature.
      text_pairs: whether its `serving_text` signature packs a second text (text_b).
      predict_fields: (required, optional) fields of a scripts/predict.py input line.
      predict_flags: the scripts/predict.py flags a checkpoint's Predictor takes as settings.
      one_label_regresses: a head with one label is a regression (is_regression unset).
      extra_inputs: int32 inputs a checkpoint's PREDICT graph takes beside the [B, S]
        sequence features (e.g. fill_mask's masked_lm_positions [B, P]).
      hf_heads: {converter --task: `heads.HfHead`}: the head's layout in each Hugging Face
        class it converts to ({}: no counterpart).
      benchmarks: whether scripts/benchmark.py and export_step.py build its step.
    """

    name = None
    predicts = False
    needs_labels = False
    text_inputs = ("text",)
    text_pairs = False
    predict_fields = (("text",), ())
    predict_flags = ()
    one_label_regresses = False
    extra_inputs = ()
    hf_heads = {}
    benchmarks = False

    # ------------------------------------------------------------------- prediction

    @classmethod
    def check_predict_config(cls, config):
        """Raises BertTfError unless `config` (`export.PredictConfig`) has what the task's
        prediction needs."""
        if cls.needs_labels and not config.label_list:
            raise BertTfError(f"task {cls.name}: no label list; pass --labels (label_list=) "
                              "in the order the model was trained with, or the output dir "
                              "whose label_list.txt has them.")

    @classmethod
    def checkpoint_settings(cls, checkpoint):
        """Settings a checkpoint's Predictor reads from the checkpoint itself (a prefix)
        where the caller gives none of that name, e.g. whether the head has a CRF."""
        del checkpoint
        return {}

    @classmethod
    def predict_inputs(cls, config):
        """The int32 inputs a checkpoint's PREDICT graph takes beside the [B, S] sequence
        features, for the model `config` (`export.PredictConfig`) describes (by default
        `extra_inputs`)."""
        del config
        return cls.extra_inputs

    @classmethod
    def predict_model_fn(cls, encoder, config):
        """The model_fn whose PREDICT spec a checkpoint's Predictor runs (`config`: the
        `export.PredictConfig`)."""
        raise BertTfError(f"task {cls.name}: no model_fn to predict with from a checkpoint; "
                          "export the model and load the export.")

    @classmethod
    def predict_outputs(cls, encoder, config, bert_config):
        """build_fn(features) -> {name: tensor}: the PREDICT outputs a checkpoint's Predictor
        runs over int32 features (by default `predict_model_fn`'s predictions)."""
        del bert_config
        model_fn = cls.predict_model_fn(encoder, config)
        return lambda features: model_fn(features, None, estimator_lib.ModeKeys.PREDICT,
                                         {}).predictions

    @classmethod
    def answer(cls, predictor, records, options):
        """The JSON-ready answers of `predictor` (a `Predictor` of this task) to the
        scripts/predict.py `records` (dicts of `predict_fields`); `options`:
        `PredictOptions`."""
        raise BertTfError(f"task {cls.name}: the Predictor does not answer this task.")

    @classmethod
    def warmup_query_length(cls, settings):
        """The longest question of the export's TF Serving warm-up requests (None: the task
        packs no question); `settings`: its predict_config.json."""
        del settings
        return None

    # --------------------------------------------------------------------- benchmarks

    @classmethod
    def step_model_fn(cls, encoder, training, num_labels):
        """The model_fn a benchmark or exported step trains (as the run_*.py scripts
        build it)."""
        raise BertTfError(f"--task={cls.name}: it has no benchmark step.")

    @classmethod
    def step_features(cls, seq_length, max_predictions_per_seq, num_labels, vocab_size):
        """[(name, width, dtype, maxval)] of the step's features beyond the [B, S] sequences:
        width None for [B], maxval the exclusive bound of random values (None: all ones)."""
        raise BertTfError(f"--task={cls.name}: it has no benchmark step.")

    @classmethod
    def check_step_sizes(cls, seq_length, max_predictions_per_seq):
        """Raises BertTfError naming the flag when the step's sizes do not fit together."""
        del seq_length, max_predictions_per_seq

    @classmethod
    def forward_features(cls, batch_size):
        """{name: tensor} a forward-only step adds to the random features (e.g. ids that
        PREDICT returns)."""
        del batch_size
        return {}

    @classmethod
    def head_rows(cls, mode, seq_length, max_predictions_per_seq):
        """Rows of the last layer the head reads (absolute positions; `mode` "train" or
        "infer"); the encoder computes only those there."""
        del mode, max_predictions_per_seq
        return seq_length

    @classmethod
    def head_flops(cls, bert_config, seq_length, max_predictions_per_seq, num_labels):
        """Model FLOPs of the head on one sequence (a multiply-add is 2 FLOPs)."""
        raise BertTfError(f"--task={cls.name}: it has no benchmark step.")

    # The Estimator mode of a benchmark's forward-only step: PREDICT ("infer"), or EVAL
    # ("eval") for a task without a PREDICT head.
    infer_mode = estimator_lib.ModeKeys.PREDICT


class TrainableTask(Task):
    """What `bert_tf.runs.driver.run_task` asks of a task it runs: pre-training and every
    fine-tuning task. Made once per run with its options, complete after construction; the
    hooks read `self.options`. Subclasses override the hooks that differ.

    Attributes:
      actions: the action flags the task's script offers (one must be set, or --export_dir
        where the script has it).
      eval_split, eval_flags: the split `evaluate` runs on during training, and the flags
        that provide it.
      writes_features: whether `split_input_fn` writes feature files (into --output_dir on the
        chief, a private temporary directory on the other workers).
    """

    actions = ("do_train", "do_eval")
    # The split evaluated during training (--eval_every_n_steps) and the flag that gives it.
    eval_split = "eval"
    eval_flags = "--do_eval"
    writes_features = False

    def __init__(self, task_options, options):
        """Made once per run, with everything the hooks read: `task_options` (the task's own
        options, e.g. `bert_tf.options.ClassifierOptions`; None for a task without any) and
        `options` (the run's: `bert_tf.options.FinetuneOptions` or `PretrainOptions`). A
        subclass sets every field its hooks need here (or computes it on first use from the
        data files: a cached property)."""
        self.task_options = task_options
        self.options = options

    @property
    def requested(self):
        """{action flag: whether the run asks for it}: each of `actions`, and export_dir
        where the task's script has it."""
        options = self.options
        return {"do_train": options.train.do_train, "do_eval": options.evaluation.do_eval}

    @property
    def tokenizer_options(self):
        """`options.TokenizerOptions` of a task that tokenizes text (None: its inputs are
        token ids already)."""
        return None

    @property
    def eval_batch_size(self):
        evaluation = self.options.evaluation
        return evaluation and evaluation.eval_batch_size

    @property
    def predict_batch_size(self):
        return None

    def check_options(self):
        """Raises BertTfError for bad run flags; the first thing a run does."""
        requested = self.requested
        if not any(requested[action] for action in self.actions) and not requested.get(
                "export_dir"):
            listed = ", ".join(f"--{action}" for action in self.actions)
            also = " or --export_dir" if "export_dir" in requested else ""
            raise BertTfError(f"nothing to do: pass at least one of {listed}{also}.")
        runner.check_train_options(self.options.train, self.options.model.max_seq_length)
        self.check_batch_sizes()
        self.check()

    def check_batch_sizes(self):
        """Raises BertTfError for a batch size flag (or a like count) that is not positive."""
        if self.options.evaluation is not None:
            runner.check_positive(self.options.evaluation, "eval_batch_size")

    def check(self):
        """Raises BertTfError for bad task flags; runs after the shared checks, before any
        other work."""

    def padding_free(self):
        """Whether the encoder runs on the real tokens of a batch only (`model_fn_parts`)."""
        return False

    def read_examples(self):
        """(train, dev, test) data for --do_train / --do_eval / --do_predict (None where not
        asked for), all read and checked before any work so bad data stops the run early."""
        raise NotImplementedError

    def training_schedule(self, train_examples):
        """(num_train_steps, num_warmup_steps) in optimizer updates."""
        raise NotImplementedError

    def model_fn(self, encoder, training):
        """The model_fn over `encoder` (a `model_fn_parts.Encoder`) that trains with `training`
        (a `training_step.TrainingStep`, from `TrainingStep.from_options`)."""
        raise NotImplementedError

    def split_input_fn(self, split, examples, feature_dir, tokenizer, is_training):
        """The input_fn of one split ("train", "eval" or "predict"): `examples` as
        `read_examples` gave them; `feature_dir` (with `writes_features`) where its feature
        files go; `tokenizer` a `FullTokenizer` (None without `tokenizer_options`)."""
        raise NotImplementedError

    def describe(self, examples):
        """The training log's words for the train split, e.g. "120 examples"."""
        return f"{len(examples)} examples"

    def run_files(self):
        """{file name: text} the chief writes to --output_dir before training."""
        return {}

    def can_evaluate(self, splits):
        """Whether `evaluate` has data: {split: examples or None} of `read_examples`."""
        return splits[self.eval_split] is not None

    def metric_names(self):
        """The names of the metrics `evaluate` returns (None: not known before it runs)."""
        return None

    def evaluate(self, estimator, input_fn, examples, checkpoint_path=None):
        """Evaluates `checkpoint_path` (default: the latest) on the `eval_split` examples;
        returns the metrics (dict), writing nothing."""
        raise NotImplementedError

    def evaluation_checkpoint(self, estimator, checkpoint):
        """What evaluation and export restore after training: `checkpoint` (None: the latest
        of --output_dir)."""
        del estimator
        return checkpoint

    def write_eval_files(self, examples, results):
        """After the final `evaluate`: writes the task's files about it (e.g. NER's
        predictions) and adds to `results` (a dict) what it computes beside the metrics."""

    def results_header(self):
        """Lines for the top of eval_results.txt (written `# line`): settings that shaped the
        results, e.g. class weights."""
        return []

    def predict(self, estimator, input_fn, examples, checkpoint_path=None):
        """Predicts the test examples with `checkpoint_path` (default: the latest) and writes
        the predictions; returns eval results when the task computes them from its
        predictions (SQuAD), else None."""
        raise NotImplementedError

    def export_files(self):
        """{file name: text} written to the export's assets.extra/ (e.g. the label list)."""
        return {}

    def predict_settings(self):
        """The task's settings a Predictor needs beyond the shared ones (see
        `prediction_assets`), e.g. SQuAD's windowing; JSON-serializable."""
        return {}


class FinetuningTask(TrainableTask):
    """A fine-tuning task: examples read from text, written as TFRecord features, trained,
    evaluated, predicted and exported. Subclasses override the hooks.

    Attributes:
      feature_files: the cached feature file of each split in the output directory.
      sequence_keys: the [B, S] features cut to each eval / predict batch's longest example
        and to each training batch's length bucket (`input_pipeline.record_input_fn`).
      sequences_per_example: sequences packed one after another in each `sequence_keys`
        feature ([k * S]; multiple choice: one per choice).
      length_buckets: whether --bucket_by_length applies: the task's loss ignores padding,
        so a batch cut to its bucket trains exactly as at max_seq_length.
      label_list: the task's labels, in id order (None: it has none).
      export_inputs: [batch, seq] inputs the export's id signatures take beside input_ids,
        input_mask and segment_ids (NER with --use_crf: label_mask).
      cached_features: `bert_tf.data.<task>.cached_file_based_convert_examples_to_features`
        for the default `write_features`.
    """

    actions = ("do_train", "do_eval", "do_predict")
    writes_features = True
    feature_files = {"train": "train.tf_record", "eval": "eval.tf_record",
                     "predict": "predict.tf_record"}
    sequence_keys = input_pipeline.SEQUENCE_FEATURES
    sequences_per_example = 1
    length_buckets = True
    label_list = None
    cached_features = None
    export_inputs = ()

    @property
    def requested(self):
        options = self.options
        return {"do_train": options.train.do_train, "do_eval": options.do_eval,
                "do_predict": options.do_predict, "export_dir": bool(options.export_dir)}

    @property
    def tokenizer_options(self):
        return self.options.tokenizer

    @property
    def predict_batch_size(self):
        return self.options.predict_batch_size

    def check_batch_sizes(self):
        runner.check_positive(self.options, "predict_batch_size")
        super().check_batch_sizes()

    def padding_free(self):
        return model_fn_parts.run_padding_free(self.options.padding_free, self.options.run)

    def training_schedule(self, train_examples):
        return runner.finetuning_schedule(self.options, train_examples)

    def split_input_fn(self, split, examples, feature_dir, tokenizer, is_training):
        path = os.path.join(feature_dir, self.feature_files[split])
        self.write_features(examples, path, tokenizer, is_training)
        return self.input_fn(path, is_training)

    def evaluation_checkpoint(self, estimator, checkpoint):
        # Without training: the latest of --output_dir, else --init_checkpoint itself, so a
        # trained run re-exports from a new --output_dir.
        return checkpoint or runner.untrained_run_checkpoint(estimator, self.options)

    def write_features(self, examples, path, tokenizer, is_training):
        """Writes `examples` as TFRecord features to `path` (whole or not at all). By default
        through `cached_features(examples, label_list, max_seq_length, tokenizer, path)`,
        which reuses the file while the data and settings are unchanged."""
        del is_training
        self.cached_features(examples, self.label_list, self.options.model.max_seq_length,
                             tokenizer, path)

    def feature_spec(self, seq_length, is_training):
        """dict name -> `tf.io.FixedLenFeature` of the task's TFRecords."""
        raise NotImplementedError

    def input_fn(self, path, is_training):
        """The input_fn over the features at `path` (`input_pipeline.record_input_fn`): training
        batches are shuffled unless --shuffle_train_input=false and, with
        --bucket_by_length, drawn from length buckets (else they keep max_seq_length); with
        --bucket_by_length, evaluation and prediction read their records in order of length
        within windows (`evaluate` and `predict` give their outputs in input order), else
        each batch is cut to its longest example."""
        options = self.options
        max_seq_length = options.model.max_seq_length
        buckets = None
        if self.length_buckets:
            buckets = input_pipeline.run_length_buckets(
                options.bucket_by_length, max_seq_length, options.run.distribution, is_training)
        return input_pipeline.record_input_fn(
            [path], self.feature_spec(max_seq_length, is_training), is_training,
            shuffle=options.run.shuffle_train_input, trim_keys=self.sequence_keys,
            skip_corrupt_records=options.run.skip_corrupt_records, bucket_boundaries=buckets,
            sequences_per_example=self.sequences_per_example)


LABEL_LIST_FILE = "label_list.txt"


def labels_next_to(checkpoint):
    """The labels of the head of `checkpoint` (a prefix), in output order: the label_list.txt
    of its directory (a run's --output_dir, or convert_checkpoint.py --task's output), or
    None."""
    path = os.path.join(os.path.dirname(checkpoint), LABEL_LIST_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def run_checkpoint(options):
    """For a run that evaluates, predicts or exports without training: the checkpoint it runs
    (the latest of --output_dir, else --init_checkpoint, as the Estimator picks them); else
    None (also when --init_checkpoint cannot be read: `prepare_run` reports that)."""
    if options.train.do_train:
        return None
    output_dir = options.run.output_dir
    checkpoint = (tf.train.latest_checkpoint(output_dir)
                  if output_dir and tf.io.gfile.isdir(output_dir) else None)
    if checkpoint is None and options.model.init_checkpoint:
        try:
            checkpoint = checkpoints.resolve_checkpoint(options.model.init_checkpoint)
        except BertTfError:
            return None
    return checkpoint


def checkpoint_label_list(options):
    """For a run that evaluates or predicts without training: the labels of the head it runs
    (`labels_next_to` the latest checkpoint of --output_dir, else --init_checkpoint, as the
    Estimator picks them), which name the head's outputs in that order whatever the data
    holds; else None (a training run takes its labels from the data)."""
    checkpoint = run_checkpoint(options)
    return labels_next_to(checkpoint) if checkpoint else None


def require_data_dir(data_dir, what):
    """Raises `BertTfError` unless `--data_dir` is a directory; `what` says what it holds."""
    if not data_dir or not fileio.is_dir(data_dir):
        raise BertTfError(f"--data_dir: '{data_dir}' is not a directory; pass the "
                          f"directory that holds {what}.")


def read_splits(processor, data_dir, options):
    """(train, dev, test) examples of a processor with get_train/dev/test_examples(data_dir)
    for --do_train / --do_eval / --do_predict (None if not asked for)."""
    return (processor.get_train_examples(data_dir) if options.train.do_train else None,
            processor.get_dev_examples(data_dir) if options.do_eval else None,
            processor.get_test_examples(data_dir) if options.do_predict else None)


class ExampleCollector:
    """Gathers per-example model outputs while `Estimator.evaluate` runs.

    The streaming metrics (loss, accuracy) come from the Estimator; metrics that need every
    prediction at once (F1, MCC, correlations, conlleval) are computed in numpy on what this
    collects, in the same pass over the data. A model_fn adds `collector.hook(tensors)` to its
    EVAL spec's `evaluation_hooks`. Records read in order of length carry their input position
    (`input_pipeline.RECORD_INDEX`, added to `tensors` by `record_index`); `column` and
    `examples` then return them in input order.
    """

    def __init__(self):
        self.batches = []

    def hook(self, tensors):
        """A SessionRunHook that fetches `tensors` (dict name -> [B, ...]) at every eval step."""
        return _CollectHook(self, tensors)

    def _input_order(self):
        """Row indices that put the concatenated batches in input order (None: they are)."""
        if not self.batches or input_pipeline.RECORD_INDEX not in self.batches[0]:
            return None
        positions = np.concatenate([batch[input_pipeline.RECORD_INDEX]
                                    for batch in self.batches])
        return np.argsort(positions, kind="stable")

    def column(self, key):
        """The values of `key` for every example, concatenated over batches ([N, ...]), in
        input order."""
        values = np.concatenate([batch[key] for batch in self.batches], axis=0)
        order = self._input_order()
        return values if order is None else values[order]

    def examples(self):
        """One dict name -> value per example, in input order."""
        rows = [(batch, i) for batch in self.batches
                for i in range(len(next(iter(batch.values()))))]
        order = self._input_order()
        for batch, i in (rows if order is None else (rows[row] for row in order)):
            yield {key: value[i] for key, value in batch.items()
                   if key != input_pipeline.RECORD_INDEX}


def record_index(features):
    """{input_pipeline.RECORD_INDEX: [B]} when `features` come in order of length (add it to
    what an `ExampleCollector` collects and to PREDICT's predictions), else {}."""
    if input_pipeline.RECORD_INDEX not in features:
        return {}
    return {input_pipeline.RECORD_INDEX: features[input_pipeline.RECORD_INDEX]}


def in_input_order(predictions):
    """`Estimator.predict`'s per-record dicts as a list in input order, without
    `input_pipeline.RECORD_INDEX` (records read in order of length carry it; others come in
    input order already)."""
    predictions = list(predictions)
    if not predictions or input_pipeline.RECORD_INDEX not in predictions[0]:
        return predictions
    predictions.sort(key=lambda prediction: int(prediction[input_pipeline.RECORD_INDEX]))
    return [{key: value for key, value in prediction.items()
             if key != input_pipeline.RECORD_INDEX} for prediction in predictions]


class _CollectHook(tf1.train.SessionRunHook):

    def __init__(self, collector, tensors):
        self._collector = collector
        self._tensors = tensors

    def begin(self):
        self._collector.batches = []

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs(self._tensors)

    def after_run(self, run_context, run_values):
        self._collector.batches.append(run_values.results)
