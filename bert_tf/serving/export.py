"""SavedModel export of a fine-tuned task, self-contained for prediction.

`<export_dir>/<timestamp>/` holds a SavedModel (tag "serve") with two signatures over one
graph, both taking `input_ids`, `input_mask`, `segment_ids` of shape [batch, seq] (any batch
size, any seq up to the model's `max_position_embeddings`) and returning the task's outputs:
  - "serving_default": int32 inputs (`tf.constant([[101, ...]])` in TF2 is int32);
  - "serving_int64": int64 inputs (what tf.train.Example / TFRecord pipelines produce).
A signature's inputs are typed, so one signature cannot take both dtypes; numpy arrays and
Python lists of either integer type work with both. The text-in signatures
(`bert_tf.serving.text_signature`) take strings. `assets.extra/` carries the vocab, the BERT
config, the label list and `predict_config.json`, which the Predictor reads, and TF Serving's
`tf_serving_warmup_requests` (`bert_tf.serving.warmup`).
"""

import dataclasses
import json
import os

import tensorflow as tf
from absl import logging

from bert_tf import fileio, tokenization
from bert_tf.data import input_pipeline
from bert_tf.errors import BertTfError
from bert_tf.options import ClassifierOptions, ModelOptions, SquadOptions, TokenizerOptions
from bert_tf.serving import text_signature as serving_text
from bert_tf.serving import warmup
from bert_tf.tasks import registry
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1


# The features the exported signatures take, all [batch, seq].
SERVING_INPUT_NAMES = input_pipeline.SEQUENCE_FEATURES


INT64_SIGNATURE_NAME = "serving_int64"


# What an export carries in assets.extra/ for `Predictor.from_saved_model` (serving.predictor).
PREDICT_CONFIG_FILE = "predict_config.json"


VOCAB_FILE = "vocab.txt"


BERT_CONFIG_FILE = "bert_config.json"


def prediction_assets(task, options, bert_config):
    """{file name: text} that make an export self-contained for prediction: the vocab, the
    BERT config the run built (`bert_config`) and `predict_config.json` (task, casing,
    max_seq_length, label list and the task's `predict_settings`; a task outside bert_tf
    also its module, which the Predictor imports to find it)."""
    module = registry.module_of(type(task))
    return asset_files({"task": task.name, **({"task_module": module} if module else {}),
                        "label_list": list(task.label_list) if task.label_list else None,
                        **task.predict_settings()}, options, bert_config)


def asset_files(settings, options, bert_config):
    """{file name: text}: `predict_config.json` (`settings` with the casing and
    max_seq_length of `options`, which has `tokenizer` and `model` option groups), the vocab
    and the BERT config (the file as given, or `bert_config` as the run built it when
    --max_position_embeddings changed it)."""
    config = {"do_lower_case": options.tokenizer.do_lower_case,
              "max_seq_length": options.model.max_seq_length, **settings}
    files = {PREDICT_CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True) + "\n"}
    for name, path in ((VOCAB_FILE, options.tokenizer.vocab_file),
                       (BERT_CONFIG_FILE, options.model.bert_config_file)):
        with tf.io.gfile.GFile(path) as f:
            files[name] = f.read()
    if options.model.max_position_embeddings:
        # The model was built with more positions than the file says.
        files[BERT_CONFIG_FILE] = bert_config.to_json_string()
    return files


def read_prediction_assets(export_dir):
    """{file name: text} of the export's assets.extra/ files but the warm-up requests: what
    the Predictor reads, carried by the ONNX and TFLite conversions.

    Raises:
      BertTfError: naming the export when it has no predict_config.json or vocab.txt.
    """
    extra = os.path.join(export_dir, "assets.extra")
    names = sorted(name for name in (tf.io.gfile.listdir(extra) if tf.io.gfile.isdir(extra)
                                     else ()) if name != warmup.WARMUP_FILE)
    missing = [name for name in (PREDICT_CONFIG_FILE, VOCAB_FILE) if name not in names]
    if missing:
        raise BertTfError(f"export {export_dir} has no assets.extra/{' or '.join(missing)}, "
                          "which prediction needs; re-export it with this version of bert_tf "
                          "(run_*.py --export_dir, scripts/export_encoder.py).")
    files = {}
    for name in names:
        with tf.io.gfile.GFile(os.path.join(extra, name)) as f:
            files[name] = f.read()
    return files


def text_signature(task, options):
    """The `serving_text.TextSignature` of `task`'s export."""
    squad_settings = task.predict_settings()
    return make_text_signature(task.text_inputs, options,
                               max_query_length=squad_settings.get("max_query_length"),
                               pairs=task.text_pairs,
                               num_choices=getattr(task, "num_choices", None))


def make_text_signature(input_names, options, max_query_length=None, pairs=False,
                        num_choices=None):
    """A `serving_text.TextSignature` over `input_names` with the vocab, casing and
    max_seq_length of `options` (`tokenizer` and `model` groups)."""
    return serving_text.TextSignature(
        input_names=tuple(input_names),
        vocab_file=options.tokenizer.vocab_file,
        do_lower_case=options.tokenizer.do_lower_case,
        max_seq_length=options.model.max_seq_length,
        max_query_length=max_query_length, pairs=pairs, num_choices=num_choices)


def export_saved_model(estimator, export_dir_base, extra_files=None, checkpoint_path=None,
                       text_signature=None, extra_inputs=()):
    """Exports the latest checkpoint with the signatures of the module docstring.

    Args:
      estimator: the task's Estimator (its model_dir holds the checkpoint).
      export_dir_base: the export goes to a new `<timestamp>` directory inside.
      extra_files: {file name: text} written to `<export>/assets.extra/` (the TF Serving
        place for files the model does not read), e.g. the label list.
      checkpoint_path: the checkpoint to export (default: the latest).
      text_signature: a `serving_text.TextSignature`: also add the text-in signatures, which
        return the model's outputs and the packed `input_ids` [batch, seq] they ran on.
      extra_inputs: names of [batch, seq] inputs the id signatures take beside
        `SERVING_INPUT_NAMES` (the task's `export_inputs`); raw text does not give them, so
        an export with any has no text-in signatures.

    Returns:
      The export directory `<export_dir_base>/<timestamp>`.
    """
    if extra_inputs and text_signature is not None:
        logging.info("No text-in signatures: the model also takes %s, which raw text does not "
                     "give.", ", ".join(extra_inputs))
        text_signature = None

    def serving_input_receiver_fn():
        int32_inputs, int64_inputs, alternatives, text_ids = {}, {}, {}, {}
        if text_signature is not None:
            # The id placeholders default to the tokenized strings, so the text signatures
            # (which feed only strings) run the same model.
            alternatives, text_ids = serving_text.receivers(text_signature)
        for name in (*SERVING_INPUT_NAMES, *extra_inputs):
            int64_inputs[name] = (
                tf1.placeholder(tf.int64, [None, None], name=name) if not text_ids else
                tf1.placeholder_with_default(text_ids[name], [None, None], name=name))
            # serving_default feeds the cast directly (any graph tensor can be fed), so it
            # takes int32; serving_int64 feeds the placeholder above it.
            int32_inputs[name] = tf.cast(int64_inputs[name], tf.int32, name=f"{name}_int32")
        outputs = {name: {"input_ids": int64_inputs["input_ids"]} for name in alternatives}
        return estimator_lib.ServingInputReceiver(
            int32_inputs, int32_inputs,
            receiver_tensors_alternatives={INT64_SIGNATURE_NAME: int64_inputs, **alternatives},
            alternative_outputs=outputs)

    export_path = estimator.export_saved_model(export_dir_base, serving_input_receiver_fn,
                                               checkpoint_path=checkpoint_path)
    for name, text in (extra_files or {}).items():
        tf.io.gfile.makedirs(os.path.join(export_path, "assets.extra"))
        fileio.atomic_write_text(os.path.join(export_path, "assets.extra", name), text)
    _write_warmup_requests(export_path, extra_files or {},
                           text_signature.num_choices if text_signature else None)
    logging.info("Exported SavedModel to %s (signatures serving_default: int32 inputs, %s: "
                 "int64 inputs%s)", export_path, INT64_SIGNATURE_NAME,
                 ", serving_text: strings" if text_signature else "")
    return export_path


def _write_warmup_requests(export_path, extra_files, num_choices=None):
    """`warmup.write_warmup_requests` for an export with prediction assets (`num_choices`:
    a multiple-choice export's)."""
    if PREDICT_CONFIG_FILE not in extra_files or VOCAB_FILE not in extra_files:
        logging.info("No %s and %s among the export's files: no TF Serving warm-up requests.",
                     PREDICT_CONFIG_FILE, VOCAB_FILE)
        return
    config = json.loads(extra_files[PREDICT_CONFIG_FILE])
    tokenizer = tokenizer_from_text(extra_files[VOCAB_FILE], config["do_lower_case"])
    warmup.write_warmup_requests(
        export_path, tokenizer, config["max_seq_length"],
        registry.get(config["task"], config.get("task_module")).warmup_query_length(config),
        num_choices)


def tokenizer_from_text(vocab_text, do_lower_case):
    """A FullTokenizer over vocab file contents (written to a temporary file)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8",
                                     delete=False) as f:
        f.write(vocab_text)
    try:
        return tokenization.FullTokenizer(f.name, do_lower_case=do_lower_case)
    finally:
        os.remove(f.name)


# What a Predictor answers: the fine-tuned tasks, and the encoder alone.
TASKS = registry.names(where=lambda task: task.predicts)


@dataclasses.dataclass(frozen=True)
class PredictConfig:
    """What prediction needs besides the weights: an export's `predict_config.json`.

    Attributes:
      task: the name of a registered task that `predicts` (TASKS: the built-in ones).
      task_module: the module that registers a task outside bert_tf (None: built in).
      do_lower_case, max_seq_length: the tokenizer's casing and the packed length limit.
      label_list: classifier / NER labels in id order (a classifier with one: regression).
      is_regression: a regression classifier (None: iff it has one label).
      multi_label, multi_label_threshold: a sigmoid per label; labels above the threshold.
      window_aggregation: a classifier trained with windows (run_classifier.py
        --doc_stride > 0): "mean" or "max" of the windows' logits; None: truncation.
      doc_stride ... null_score_diff_threshold: SQuAD windowing and post-processing (and the
        classifier's windows), as the run_*.py flags of the same names.
      pooling, pooling_layer, normalize: an embedding export's `embedding` output (one of
        `sentence_pooling.POOLINGS`, the layer pooled, L2 normalized; an export that records
        no layer pooled the last, unnormalized); None: the model pools every way
        (`Predictor.from_checkpoint(task="embed")`).
      settings: the config's other keys: the settings of a task's own `predict_settings`.
    """

    # The defaults are the run_*.py flags' (options.py), SQuAD's windowing among them.
    task: str
    task_module: str | None = None
    do_lower_case: bool = TokenizerOptions.do_lower_case
    max_seq_length: int = ModelOptions.max_seq_length
    label_list: tuple | None = None
    is_regression: bool | None = None
    multi_label: bool = ClassifierOptions.multi_label
    multi_label_threshold: float = ClassifierOptions.multi_label_threshold
    window_aggregation: str | None = None
    doc_stride: int = SquadOptions.doc_stride
    max_query_length: int = SquadOptions.max_query_length
    n_best_size: int = SquadOptions.n_best_size
    max_answer_length: int = SquadOptions.max_answer_length
    version_2_with_negative: bool = SquadOptions.version_2_with_negative
    null_score_diff_threshold: float = SquadOptions.null_score_diff_threshold
    pooling: str | None = None
    pooling_layer: int | None = None
    normalize: bool | None = None
    settings: dict = dataclasses.field(default_factory=dict)

    @property
    def task_class(self):
        """The registered class of `task` (`registry.get`)."""
        return registry.get(self.task, self.task_module)

    @property
    def regression(self):
        if self.is_regression is not None:
            return self.is_regression
        return self.task_class.one_label_regresses and len(self.label_list or ()) == 1

    @property
    def windowed(self):
        # Only a classifier trained with windows records an aggregation.
        return self.window_aggregation is not None

    @classmethod
    def from_dict(cls, values, source):
        """The config from a parsed `predict_config.json` (keys that are not fields go to
        `settings`)."""
        task = values.get("task") if isinstance(values, dict) else None
        if not isinstance(task, str) or (not registry.known(task)
                                         and not values.get("task_module")):
            raise BertTfError(f"{source}: needs a \"task\", one of {', '.join(TASKS)}; "
                              "re-export the model with this version of bert_tf.")
        try:
            predicting_task(task, values.get("task_module"))
        except BertTfError as e:
            raise BertTfError(f"{source}: {e}") from None
        names = {field.name for field in dataclasses.fields(cls)}
        settings = {key: value for key, value in values.items() if key not in names}
        values = {key: value for key, value in values.items() if key in names}
        if values.get("label_list") is not None:
            values["label_list"] = tuple(values["label_list"])
        return cls(**values, settings=settings)

    def check(self):
        """Raises BertTfError unless the task has what it needs (labels, sizes)."""
        predicting_task(self.task, self.task_module).check_predict_config(self)


def predicting_task(name, module=None):
    """The registered task `name` if a Predictor answers it; else BertTfError in one line."""
    try:
        task = registry.get(name, module)
    except BertTfError:
        raise BertTfError(f"--task={name!r}: use one of {', '.join(TASKS)}.") from None
    if not task.predicts:
        raise BertTfError(f"task {name}: the Predictor does not answer it; it answers "
                          f"{', '.join(TASKS)}.")
    return task


def newest_export(path):
    """The export `path` names: `path` itself when it holds a saved_model.pb, else its
    newest `<timestamp>/` export (the `--export_dir` a run was given), else `path`."""
    if not path or tf.io.gfile.exists(os.path.join(path, "saved_model.pb")) or \
            not tf.io.gfile.isdir(path):
        return path
    stamps = [name.strip("/") for name in tf.io.gfile.listdir(path)]
    stamps = sorted((int(name) for name in stamps if name.isdigit() and tf.io.gfile.exists(
        os.path.join(path, name, "saved_model.pb"))), reverse=True)
    if not stamps:
        return path
    logging.info("Using the newest export in %s: %d/", path, stamps[0])
    return os.path.join(path, str(stamps[0]))


def check_conversion_flags(export_dir, output_file, quantize, quantize_modes, model_suffix):
    """Stops with one line naming the flag unless `--quantize` is one of `quantize_modes`,
    `--export_dir` holds a SavedModel and `--output_file` (the `model_suffix` file, e.g.
    ".onnx") is given: what every converter of an export checks before any work."""
    if quantize not in quantize_modes:
        raise BertTfError(f"--quantize={quantize}: use one of {', '.join(quantize_modes)}.")
    fileio.require_file(os.path.join(export_dir or "", "saved_model.pb"), flag="export_dir",
                        what="SavedModel (saved_model.pb)")
    if not output_file:
        raise BertTfError(f"--output_file: required; where to write the {model_suffix} model.")
