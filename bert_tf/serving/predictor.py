"""From text to answers: `Predictor` loads a fine-tuned model once and answers raw text.

    predictor = Predictor.from_saved_model("export/1700000000")
    predictor.predict(["a fine match"])            # classifier: label + probabilities
    predictor.answer(["Who?"], ["Ada wrote it."])  # SQuAD: text, score, char offsets, n-best
    predictor.tag(["Ada lives in Paris"])          # NER: words, tags, char spans

Three backends run the same model: an export (`from_saved_model`, which reads what it needs
from the export's assets.extra/), a checkpoint (`from_checkpoint`: a run's --output_dir or a
prefix, plus the config, vocab and task) and an ONNX file (`from_onnx`, made by
scripts/export_onnx.py, which stores the same assets in the model's metadata).

Pre- and post-processing are the library's own, so the answers are those of
`run_*.py --do_predict` on the same checkpoint: `classification.convert_single_example`,
`squad.convert_examples_to_features` + `squad_postprocess.compute_predictions`,
`ner.convert_single_example` + `tasks.ner.word_tags`. Examples are batched by length (sorted,
each batch padded to its longest), and results come back in input order.
"""

import dataclasses
import json
import os
import re
import time

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import errors, fileio, modeling, precision, tokenization
from bert_tf.data import classification as classification_data
from bert_tf.data import ner as ner_data
from bert_tf.data import packing
from bert_tf.data import squad as squad_data
from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.serving import text_signature as serving_text
from bert_tf.tasks import (
    base,
    classification,
    model_fn_parts,
    ner,
    pretraining,
    squad,
    squad_postprocess,
)
from bert_tf.training import estimator as estimator_lib

tf1 = tf.compat.v1

TASKS = ("classifier", "squad", "ner", "fill_mask", "embed")
POOLINGS = ("cls", "mean")
MASK_TOKEN = "[MASK]"
_SEQUENCE_FEATURES = export.SERVING_INPUT_NAMES
_LOG_EVERY_SECS = 10.0
# ONNX metadata keys holding the export's assets.extra/ files (scripts/export_onnx.py).
ONNX_ASSET_PREFIX = "bert_tf/"


@dataclasses.dataclass(frozen=True)
class PredictConfig:
    """What prediction needs besides the weights: an export's `predict_config.json`.

    Attributes:
      task: one of TASKS.
      do_lower_case, max_seq_length: the tokenizer's casing and the packed length limit.
      label_list: classifier / NER labels in id order (a classifier with one: regression).
      is_regression: a regression classifier (None: iff it has one label).
      multi_label, multi_label_threshold: a sigmoid per label; labels above the threshold.
      window_aggregation: a classifier trained with windows (run_classifier.py
        --doc_stride > 0): "mean" or "max" of the windows' logits; None: truncation.
      doc_stride ... null_score_diff_threshold: SQuAD windowing and post-processing (and the
        classifier's windows), as the run_*.py flags of the same names.
    """

    task: str
    do_lower_case: bool = True
    max_seq_length: int = 128
    label_list: tuple | None = None
    is_regression: bool | None = None
    multi_label: bool = False
    multi_label_threshold: float = 0.5
    window_aggregation: str | None = None
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0

    @property
    def regression(self):
        if self.is_regression is not None:
            return self.is_regression
        return self.task == "classifier" and len(self.label_list or ()) == 1

    @property
    def windowed(self):
        return self.task == "classifier" and self.window_aggregation is not None

    @classmethod
    def from_dict(cls, values, source):
        """The config from a parsed `predict_config.json` (unknown keys are ignored)."""
        if not isinstance(values, dict) or values.get("task") not in TASKS:
            raise BertTfError(f"{source}: needs a \"task\", one of {', '.join(TASKS)}; "
                              "re-export the model with this version of bert_tf.")
        names = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in values.items() if key in names}
        if values.get("label_list") is not None:
            values["label_list"] = tuple(values["label_list"])
        return cls(**values)

    def check(self):
        """Raises BertTfError unless the task has what it needs (labels, sizes)."""
        if self.task not in TASKS:
            raise BertTfError(f"--task={self.task!r}: use one of {', '.join(TASKS)}.")
        if self.task in ("classifier", "ner") and not self.label_list:
            raise BertTfError(f"task {self.task}: no label list; pass --labels (label_list=) "
                              "in the order the model was trained with, or the output dir "
                              "whose label_list.txt has them.")
        if self.task == "squad":
            squad_data.check_window_flags(self.max_seq_length, self.doc_stride,
                                          self.max_query_length)


# ------------------------------------------------------------------------------- backends


def load_serving_session(path):
    """The export at `path` loaded into a TF1 session of its own graph.

    Loaded as the TF1 SavedModel it is: `tf.saved_model.load` would wrap each signature (the
    text ones too) in a function first, ~10 s for a MiniLM export against ~1 s here.

    Returns:
      (tf.compat.v1.Session, the `serving_default` SignatureDef).
    Raises:
      BertTfError: the export cannot be loaded.
    """
    from tensorflow.python.saved_model import loader_impl  # no deprecation notice

    serving_text.available()  # Registers tf-text's ops, which `serving_text` uses.
    graph = tf.Graph()
    session = tf1.Session(graph=graph)
    try:
        with graph.as_default():
            meta_graph = loader_impl.SavedModelLoader(path).load(session, ["serve"])
    except (tf.errors.NotFoundError, OSError, ValueError, KeyError) as e:
        hint = (" (it has a serving_text signature: pip install bert_tf[serving] for "
                "tensorflow-text)" if "not registered" in str(e) else "")
        raise BertTfError(f"SavedModel {path} cannot be loaded{hint}: "
                          f"{errors.short_tf_error(e)}") from None
    return session, meta_graph.signature_def["serving_default"]


class _SavedModelBackend:
    """The export's `serving_default` signature, run in a session (`load_serving_session`)."""

    def __init__(self, path):
        self._session, signature = load_serving_session(path)
        self._inputs = {name: info.name for name, info in signature.inputs.items()}
        self._outputs = {name: info.name for name, info in signature.outputs.items()}

    def __call__(self, inputs):
        return self._session.run(self._outputs, {self._inputs[name]: np.asarray(value, np.int32)
                                                 for name, value in inputs.items()})


class _GraphBackend:
    """A graph built by `build_fn(features) -> {name: tensor}` over int32 [B, S] placeholders,
    with its variables restored from a checkpoint."""

    def __init__(self, build_fn, checkpoint, extra_inputs=()):
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._inputs = {name: tf1.placeholder(tf.int32, [None, None], name=name)
                            for name in (*_SEQUENCE_FEATURES, *extra_inputs)}
            self._outputs = build_fn(self._inputs)
            saver = tf1.train.Saver()
            self._session = tf1.Session(graph=self._graph)
            try:
                saver.restore(self._session, checkpoint)
            except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
                raise BertTfError(
                    f"checkpoint {checkpoint} does not fit this task's model "
                    f"({errors.short_tf_error(e)}); pass the checkpoint the task was "
                    "fine-tuned into, with its --task, labels and bert_config.json.") from None

    def __call__(self, inputs):
        return self._session.run(self._outputs, {self._inputs[name]: value
                                                 for name, value in inputs.items()})


class _OnnxBackend:
    """An ONNX model of the export's serving_default signature, run by onnxruntime."""

    def __init__(self, path, session):
        self.path = path
        self._session = session
        self._input_names = [node.name for node in session.get_inputs()]
        self._output_names = [node.name for node in session.get_outputs()]

    def __call__(self, inputs):
        values = self._session.run(None, {name.split(":")[0]: inputs[name.split(":")[0]]
                                          for name in self._input_names})
        return {name.split(":")[0]: value for name, value in zip(self._output_names, values,
                                                                  strict=True)}


# --------------------------------------------------------------------------- checkpoints


def _task_outputs(config, bert_config, compute_dtype):
    """build_fn for `_GraphBackend`: the task's PREDICT-mode outputs over the features."""
    predict_mode = estimator_lib.ModeKeys.PREDICT
    if config.task in ("classifier", "squad", "ner"):
        if config.task == "classifier":
            model_fn = classification.model_fn_builder(
                bert_config, len(config.label_list), is_regression=config.regression,
                multi_label=config.multi_label, windowed=config.windowed,
                compute_dtype=compute_dtype)
        elif config.task == "squad":
            model_fn = squad.model_fn_builder(bert_config, compute_dtype=compute_dtype)
        else:
            model_fn = ner.model_fn_builder(bert_config, len(config.label_list),
                                            compute_dtype=compute_dtype)
        return lambda features: model_fn(features, None, predict_mode, {}).predictions
    encoder = model_fn_parts.Encoder(bert_config, compute_dtype=compute_dtype)

    def fill_mask(features):
        positions = features["masked_lm_positions"]
        zeros = tf.zeros_like(positions)

        def head(model, _):
            return pretraining.masked_lm_output(
                bert_config, model.get_sequence_output(), model.get_embedding_table(),
                positions, zeros, tf.cast(zeros, tf.float32))[2]  # log_probs [B*P, V]

        log_probs = encoder.build(features, predict_mode, head)
        return {"log_probs": tf.reshape(log_probs, [tf.shape(positions)[0], -1,
                                                    bert_config.vocab_size])}

    def embed(features):
        def head(model, _):
            sequence = tf.cast(model.get_sequence_output(), tf.float32)  # [B, S, H]
            mask = tf.cast(features["input_mask"], tf.float32)[:, :, None]
            return {"cls": sequence[:, 0],
                    "mean": tf.reduce_sum(sequence * mask, 1) / tf.reduce_sum(mask, 1)}

        return encoder.build(features, predict_mode, head)

    return fill_mask if config.task == "fill_mask" else embed


def _read_assets(read, source):
    """(PredictConfig, vocab file text) from `read(name) -> text or None`."""
    files = {name: read(name) for name in (export.PREDICT_CONFIG_FILE,
                                           export.VOCAB_FILE)}
    missing = [name for name, text in files.items() if text is None]
    if missing:
        raise BertTfError(
            f"{source} has no {' or '.join(missing)}: it was exported before bert_tf wrote "
            "prediction assets. Re-export it (run_*.py --export_dir, no training needed: "
            "--init_checkpoint=OUTPUT_DIR) or use Predictor.from_checkpoint / "
            "scripts/predict.py --init_checkpoint.")
    try:
        values = json.loads(files[export.PREDICT_CONFIG_FILE])
    except json.JSONDecodeError as e:
        raise BertTfError(f"{source}: {export.PREDICT_CONFIG_FILE} is not JSON ({e}).") \
            from None
    return PredictConfig.from_dict(values, source), files[export.VOCAB_FILE]


def _tokenizer_from_text(vocab_text, do_lower_case):
    """A FullTokenizer over vocab file contents (written to a temporary file)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8",
                                     delete=False) as f:
        f.write(vocab_text)
    try:
        return tokenization.FullTokenizer(f.name, do_lower_case=do_lower_case)
    finally:
        os.remove(f.name)


# -------------------------------------------------------------------------------- predictor


class Predictor:
    """A fine-tuned BERT that answers text; build it with `from_saved_model`,
    `from_checkpoint` or `from_onnx`.

    Attributes:
      config: the `PredictConfig`.
      batch_size: examples (SQuAD: windows) per model call.
    """

    def __init__(self, backend, config, tokenizer, batch_size=32):
        config.check()
        self.config = config
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self._backend = backend
        self._num_seen = 0  # The first few examples a Predictor packs are logged.

    # ---------------------------------------------------------------------- constructors

    @classmethod
    def from_saved_model(cls, path, batch_size=32):
        """Loads a `run_*.py --export_dir` export: `<export_dir>/<timestamp>`, or
        `<export_dir>` itself for its newest export."""
        path = newest_export(path)
        if not tf.io.gfile.isdir(path):
            raise BertTfError(f"SavedModel '{path}' is not a directory; pass "
                              "<export_dir>/<timestamp>.")
        extra = os.path.join(path, "assets.extra")

        def read(name):
            file_path = os.path.join(extra, name)
            if not tf.io.gfile.exists(file_path):
                return None
            with tf.io.gfile.GFile(file_path) as f:
                return f.read()

        config, vocab_text = _read_assets(read, f"export {path} (assets.extra/)")
        tokenizer = _tokenizer_from_text(vocab_text, config.do_lower_case)
        return cls(_SavedModelBackend(path), config, tokenizer, batch_size)

    @classmethod
    def from_onnx(cls, path, batch_size=32, intra_op_num_threads=0):
        """Loads an ONNX model written by scripts/export_onnx.py (fp32 or INT8)."""
        try:
            import onnxruntime
        except ImportError:
            raise BertTfError("Predictor.from_onnx needs onnxruntime: pip install "
                              "bert_tf[onnx].") from None
        errors.require_file(path, what="ONNX model")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = intra_op_num_threads
        session = onnxruntime.InferenceSession(path, options,
                                               providers=["CPUExecutionProvider"])
        metadata = session.get_modelmeta().custom_metadata_map
        config, vocab_text = _read_assets(
            lambda name: metadata.get(ONNX_ASSET_PREFIX + name),
            f"ONNX model {path} (metadata)")
        tokenizer = _tokenizer_from_text(vocab_text, config.do_lower_case)
        return cls(_OnnxBackend(path, session), config, tokenizer, batch_size)

    @classmethod
    def from_checkpoint(cls, output_dir_or_prefix, bert_config_file, vocab_file, task,
                        do_lower_case=True, max_seq_length=128, label_list=None,
                        batch_size=32, precision_name="fp32", **settings):
        """Builds the task's model once and restores a checkpoint into it.

        Args:
          output_dir_or_prefix: a run's --output_dir (its latest checkpoint) or a prefix.
          bert_config_file, vocab_file, do_lower_case, max_seq_length: as the run's flags.
          task: one of TASKS ("fill_mask" needs a pre-training checkpoint, "embed" any).
          label_list: classifier / NER labels in id order; default: the run directory's
            label_list.txt.
          batch_size: examples (SQuAD: windows) per model call.
          precision_name: "fp32", "bf16" or "fp16" compute.
          **settings: SQuAD's doc_stride, max_query_length, n_best_size, max_answer_length,
            version_2_with_negative, null_score_diff_threshold.
        """
        checkpoint = modeling.resolve_checkpoint(output_dir_or_prefix)
        errors.require_file(bert_config_file, flag="bert_config_file", what="BERT config file")
        errors.require_file(vocab_file, flag="vocab_file", what="vocab file")
        if label_list is None and task in ("classifier", "ner"):
            label_list = base.labels_next_to(checkpoint)
        config = PredictConfig(task=task, do_lower_case=do_lower_case,
                               max_seq_length=max_seq_length,
                               label_list=tuple(label_list) if label_list else None,
                               **settings)
        config.check()
        bert_config = modeling.BertConfig.from_json_file(bert_config_file)
        if max_seq_length > bert_config.max_position_embeddings:
            raise BertTfError(f"--max_seq_length={max_seq_length} is longer than "
                              f"max_position_embeddings ({bert_config.max_position_embeddings}) "
                              f"in {bert_config_file}; lower --max_seq_length.")
        backend = _GraphBackend(
            _task_outputs(config, bert_config, precision.compute_dtype_from_name(
                precision_name)), checkpoint,
            extra_inputs=("masked_lm_positions",) if task == "fill_mask" else ())
        tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        return cls(backend, config, tokenizer, batch_size)

    # --------------------------------------------------------------------------- batching

    def _run(self, features, extra_inputs=None):
        """Runs the model over `features` (objects with input_ids, input_mask, segment_ids
        [max_seq_length]) in batches of similar length; returns per feature a dict of its
        outputs, in input order ([S] outputs cut to the feature's batch length S).

        `extra_inputs(indices) -> {name: array [B, ...]}` adds inputs for a batch.
        """
        lengths = [int(sum(feature.input_mask)) for feature in features]
        order = sorted(range(len(features)), key=lengths.__getitem__)
        results = [None] * len(features)
        last_log = start = time.time()
        for begin in range(0, len(order), self.batch_size):
            indices = order[begin:begin + self.batch_size]
            width = max(lengths[i] for i in indices)
            inputs = {name: np.asarray([getattr(features[i], name)[:width] for i in indices],
                                       np.int32) for name in _SEQUENCE_FEATURES}
            if extra_inputs is not None:
                inputs.update(extra_inputs(indices))
            outputs = self._backend(inputs)
            for row, index in enumerate(indices):
                results[index] = {name: value[row] for name, value in outputs.items()}
            if time.time() - last_log > _LOG_EVERY_SECS:
                last_log = time.time()
                done = begin + len(indices)
                logging.info("predicted %d of %d sequences (%.1f/s)", done, len(features),
                             done / (last_log - start))
        return results

    def _require(self, *tasks):
        if self.config.task not in tasks:
            raise BertTfError(f"this model is a {self.config.task} model; "
                              f"{' / '.join(tasks)} models answer this call.")

    def _next_index(self):
        self._num_seen += 1
        return self._num_seen - 1

    # ---------------------------------------------------------------------- classification

    def predict(self, texts):
        """Classifies single texts; see `predict_pairs`."""
        return self.predict_pairs([(text, None) for text in texts])

    def predict_pairs(self, pairs):
        """Classifies (text, text_b) pairs (text_b None or "" for a single text).

        Returns:
          Per pair, {"label": the most probable label, "probabilities": {label: p}};
          multi-label: {"labels": those above the threshold, "probabilities"}; regression:
          {"prediction": value}.
        """
        self._require("classifier")
        rows = self._classifier_rows(pairs)
        c, labels = self.config, self.config.label_list
        if c.regression:
            return [{"prediction": float(np.atleast_1d(row)[0])} for row in rows]
        results = [{"probabilities": {label: float(p) for label, p in
                                      zip(labels, row, strict=True)}} for row in rows]
        for result, row in zip(results, rows, strict=True):
            if c.multi_label:
                result["labels"] = [label for label, p in zip(labels, row, strict=True)
                                    if p > c.multi_label_threshold]
            else:
                result["label"] = labels[int(np.argmax(row))]
        return results

    def _classifier_rows(self, pairs):
        """Per pair, what run_classifier.py writes to test_results.tsv (probabilities, or the
        regression value), windows aggregated as the model was trained."""
        c = self.config
        labels = None if c.regression else c.label_list
        # A placeholder gold label: the features carry one, prediction ignores it.
        gold = "0" if c.regression else (labels[:1] if c.multi_label else labels[0])
        examples = [classification_data.InputExample(f"predict-{i}", text, text_b or None, gold)
                    for i, (text, text_b) in enumerate(pairs)]
        if not c.windowed:
            features = [classification_data.convert_single_example(
                self._next_index(), example, labels, c.max_seq_length, self.tokenizer,
                multi_label=c.multi_label) for example in examples]
            key = "predictions" if c.regression else "probabilities"
            return [output[key] for output in self._run(features)]
        features = [window for i, example in enumerate(examples)
                    for window in classification_data.convert_example_to_windows(
                        i, example, labels, c.max_seq_length, self.tokenizer, c.doc_stride,
                        multi_label=c.multi_label)]
        outputs = self._run(features)
        logits = classification.aggregate_windows(
            [o["logits"] for o in outputs], [f.example_index for f in features],
            c.window_aggregation)
        return classification.probabilities_from_logits(logits, c.regression, c.multi_label)

    # ------------------------------------------------------------------------------ SQuAD

    def answer(self, questions, contexts):
        """Answers each question from its context, as run_squad.py --do_predict would.

        Returns:
          Per question {"answer": text ("" for no answer, v2.0), "start", "end": character
          offsets of the answer in the context (None for ""), "score": its n-best
          probability, "nbest": the n-best list of nbest_predictions.json} and for v2.0
          "null_odds" (null score minus best non-null score).
        """
        self._require("squad")
        if len(questions) != len(contexts):
            raise BertTfError(f"{len(questions)} questions for {len(contexts)} contexts; "
                              "pass one context per question.")
        c = self.config
        examples, word_starts = [], []
        for i, (question, context) in enumerate(zip(questions, contexts, strict=True)):
            doc_tokens, char_to_word = squad_data.split_context(context)
            examples.append(squad_data.SquadExample(qas_id=str(i), question_text=question,
                                                    doc_tokens=doc_tokens))
            word_starts.append(_word_starts(char_to_word, len(doc_tokens)))
        features = squad_data.convert_examples_to_features(
            examples, self.tokenizer, c.max_seq_length, c.doc_stride, c.max_query_length,
            is_training=False)
        results = [squad_postprocess.RawResult(feature.unique_id, list(output["start_logits"]),
                                               list(output["end_logits"]))
                   for feature, output in zip(features, self._run(features), strict=True)]
        spans = {}
        answers, nbest, null_odds = squad_postprocess.compute_predictions(
            examples, features, results, c.n_best_size, c.max_answer_length, c.do_lower_case,
            version_2_with_negative=c.version_2_with_negative,
            null_score_diff_threshold=c.null_score_diff_threshold, spans=spans)
        return [_answer_record(example, answers, nbest, null_odds, spans, starts)
                for example, starts in zip(examples, word_starts, strict=True)]

    # -------------------------------------------------------------------------------- NER

    def tag(self, texts):
        """Tags the whitespace-separated words of each text, as run_ner.py --do_predict.

        Returns:
          Per text {"words": [...], "tags": [...], "spans": [[start, end], ...]}: character
          offsets of each word in the text; words past max_seq_length word pieces get "O".
        """
        self._require("ner")
        labels = self.config.label_list
        examples, spans = [], []
        for i, text in enumerate(texts):
            matches = list(re.finditer(r"\S+", text))  # str.split()'s words, with offsets
            words = [match.group() for match in matches]
            spans.append([[match.start(), match.end()] for match in matches])
            examples.append(ner_data.NerExample(guid=f"predict-{i}", words=words,
                                                labels=[ner_data.OUTSIDE_TAG] * len(words)))
        features = [ner_data.convert_single_example(self._next_index(), example, labels,
                                                     self.config.max_seq_length, self.tokenizer)
                    for example in examples]
        outputs = [{"tag_ids": output["tag_ids"],
                    "label_mask": feature.label_mask[:len(output["tag_ids"])]}
                   for feature, output in zip(features, self._run(features), strict=True)]
        tags = ner.word_tags(outputs, examples, labels)
        return [{"words": example.words, "tags": word_tags, "spans": word_spans}
                for example, word_tags, word_spans in zip(examples, tags, spans, strict=True)]

    # --------------------------------------------------------------- fill_mask and embed

    def fill_mask(self, texts, top_k=5):
        """The `top_k` most probable tokens for each "[MASK]" of each text (a pre-training
        checkpoint's masked-LM head).

        Returns:
          Per text, per [MASK] that fits in max_seq_length: [{"token", "probability"}, ...].
        """
        self._require("fill_mask")
        packed, positions = [], []
        for text in texts:
            pieces = []
            for k, part in enumerate(text.split(MASK_TOKEN)):
                pieces += ([MASK_TOKEN] if k else []) + self.tokenizer.tokenize(part)
            packed.append(packing.pack_and_pad(pieces, None, self.tokenizer,
                                               self.config.max_seq_length))
            positions.append([i for i, token in enumerate(packed[-1].tokens)
                              if token == MASK_TOKEN] or [0])
        most = max((len(p) for p in positions), default=1)

        def mask_positions(indices):
            return {"masked_lm_positions": np.asarray(
                [packing.pad(positions[i], most) for i in indices], np.int32)}

        results = []
        for features, output in zip(packed, self._run(packed, mask_positions), strict=True):
            probs = np.exp(output["log_probs"])
            results.append([[{"token": self.tokenizer.convert_ids_to_tokens([int(i)])[0],
                              "probability": float(probs[m][i])}
                             for i in np.argsort(-probs[m], kind="stable")[:top_k]]
                            for m in range(features.tokens.count(MASK_TOKEN))])
        return results

    def embed(self, texts, pooling="cls"):
        """Sentence vectors: the final layer at [CLS] ("cls") or averaged over the real
        tokens ("mean"); float32 [len(texts), hidden_size]."""
        self._require("embed")
        if pooling not in POOLINGS:
            raise BertTfError(f"pooling={pooling!r}: use one of {', '.join(POOLINGS)}.")
        packed = [packing.pack_and_pad(self.tokenizer.tokenize(text), None, self.tokenizer,
                                       self.config.max_seq_length) for text in texts]
        outputs = self._run(packed)
        width = outputs[0][pooling].shape[-1] if outputs else 0
        return np.asarray([output[pooling] for output in outputs],
                          np.float32).reshape(-1, width)


def _word_starts(char_to_word, num_words):
    """The character offset of each doc token (`squad.split_context` words) in the context."""
    starts = [None] * num_words
    for offset, word in enumerate(char_to_word):
        if word >= 0 and starts[word] is None:
            starts[word] = offset
    return starts


def _context_offsets(example, span, starts):
    """(start, end) character offsets in the context of an `AnswerSpan`."""
    def offset(position):
        # `position` indexes " ".join(doc_tokens[first:last + 1]); walk to its token.
        for token in range(span.first_token, span.last_token + 1):
            length = len(example.doc_tokens[token])
            if position <= length:
                return starts[token] + position
            position -= length + 1
        return None

    return offset(span.start), offset(span.end)


def _answer_record(example, answers, nbest, null_odds, spans, starts):
    qid = example.qas_id
    text, span = answers[qid], spans.get(qid)
    start, end = _context_offsets(example, span, starts) if span else (None, None)
    record = {"answer": text, "start": start, "end": end,
              "score": next((entry["probability"] for entry in nbest[qid]
                             if entry["text"] == text), 0.0),
              "nbest": nbest[qid]}
    if qid in null_odds:
        record["null_odds"] = null_odds[qid]
    return record


# ------------------------------------------------------------------- scripts/predict.py

INPUT_FORMATS = ("text", "jsonl")
# Per task: the fields an input line must have, and the optional ones.
_INPUT_FIELDS = {"classifier": (("text",), ("text_b",)), "squad": (("question", "context"), ()),
                 "ner": (("text",), ()), "fill_mask": (("text",), ()), "embed": (("text",), ())}
_PAIR_SEPARATOR = " ||| "


def _parse_line(line, input_format, task):
    """One input line as {field: str} (plus "id" from JSON); raises ValueError saying why."""
    required, optional = _INPUT_FIELDS[task]
    if input_format == "jsonl":
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON object ({e.msg})") from None
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        for key in (*required, *optional):
            if key in record and not isinstance(record[key], str) and record[key] is not None:
                raise ValueError(f"\"{key}\" must be a string")
        missing = [key for key in required if not record.get(key)]
        if missing:
            raise ValueError(f"no {' / '.join(missing)} (a {task} model reads "
                             f"{', '.join(required + optional)})")
        return {key: record[key] for key in (*required, *optional, "id") if key in record}
    parts = line.split(_PAIR_SEPARATOR)
    if not line.strip():
        raise ValueError("empty line")
    if len(parts) == 2 and len(required) + len(optional) == 2:
        return dict(zip(required + optional, parts, strict=True))
    if len(parts) == 1 and len(required) == 1:
        return {"text": line}
    expected = ("'question ||| context'" if task == "squad" else
                "'text' or 'text ||| text_b'" if task == "classifier" else "one text")
    raise ValueError(f"expected {expected} for a {task} model")


def read_records(path, input_format, task):
    """The input lines of scripts/predict.py as dicts, all checked before any prediction.

    Args:
      path: the input file, or None for stdin.
      input_format: "text" or "jsonl" (see `flags.define_predict_flags`).
      task: the model's task (which fields a line needs).

    Raises:
      BertTfError: naming the file and line of the first line that is not `input_format`.
    """
    import sys

    source = path or "<stdin>"
    if path:
        errors.require_file(path, flag="input_file", what="input file")
        with fileio.open_text(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    else:
        lines = sys.stdin.read().splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(_parse_line(line, input_format, task))
        except ValueError as e:
            raise BertTfError(f"{source}:{number}: {e}; fix the line or pass the right "
                              "--input_format.") from None
    return records


def _answer_records(predictor, records, options):
    """The model's answers (JSON-ready dicts) to a chunk of `read_records` records."""
    task = predictor.config.task
    texts = [record.get("text") for record in records]
    if task == "classifier":
        outputs = predictor.predict_pairs([(r["text"], r.get("text_b")) for r in records])
    elif task == "squad":
        outputs = predictor.answer([r["question"] for r in records],
                                   [r["context"] for r in records])
    elif task == "ner":
        outputs = predictor.tag(texts)
    elif task == "fill_mask":
        outputs = [{"masks": masks} for masks in predictor.fill_mask(texts, options.top_k)]
    else:
        outputs = [{"embedding": [float(x) for x in vector]}
                   for vector in predictor.embed(texts, options.pooling)]
    return [({"id": record["id"]} if "id" in record else {}) | output
            for record, output in zip(records, outputs, strict=True)]


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


def _model_task(options):
    """The task of the model `options` name (read without loading it), checking that
    exactly one of --export_dir / --onnx_file / --init_checkpoint is given."""
    given = [flag for flag, value in (("export_dir", options.export_dir),
                                      ("onnx_file", options.onnx_file),
                                      ("init_checkpoint", options.model.init_checkpoint))
             if value]
    if len(given) != 1:
        named = ", ".join(f"--{flag}" for flag in given) or "none"
        raise BertTfError("pass exactly one of --export_dir, --onnx_file and "
                          f"--init_checkpoint (got {named}).")
    if options.export_dir:
        path = os.path.join(newest_export(options.export_dir), "assets.extra",
                            export.PREDICT_CONFIG_FILE)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                return PredictConfig.from_dict(json.loads(f.read()), path).task
        return None  # from_saved_model names what is missing.
    if options.onnx_file:
        return None
    if not options.task:
        raise BertTfError("--task: required with --init_checkpoint; one of "
                          f"{', '.join(TASKS)}.")
    return options.task


def make_predictor(options):
    """The `Predictor` of `PredictOptions`."""
    if options.export_dir:
        return Predictor.from_saved_model(options.export_dir, options.batch_size)
    if options.onnx_file:
        return Predictor.from_onnx(options.onnx_file, options.batch_size)
    settings = {name: getattr(options, name) for name in squad.SquadTask.predict_flags}
    return Predictor.from_checkpoint(
        options.model.init_checkpoint, options.model.bert_config_file,
        options.tokenizer.vocab_file, options.task,
        do_lower_case=options.tokenizer.do_lower_case,
        max_seq_length=options.model.max_seq_length, label_list=options.labels,
        batch_size=options.batch_size, precision_name=options.model.precision, **settings)


def run_predict(options):
    """scripts/predict.py: reads every input line, then answers them in chunks, writing JSON
    lines to --output_file (whole or not at all) or stdout as they come.

    Returns:
      The number of lines answered.
    """
    import sys

    if options.output_file:
        fileio.require_local(options.output_file, "output_file", "predict.py writes its answers")
    task = _model_task(options)
    records = read_records(options.input_file, options.input_format, task) if task else None
    predictor = make_predictor(options)
    if records is None:
        records = read_records(options.input_file, options.input_format,
                               predictor.config.task)
    chunk = options.batch_size * 16
    output = (open(options.output_file + ".tmp", "w", encoding="utf-8")
              if options.output_file else sys.stdout)
    start = time.time()
    try:
        for begin in range(0, len(records), chunk):
            for record in _answer_records(predictor, records[begin:begin + chunk], options):
                output.write(json.dumps(record, ensure_ascii=False) + "\n")
            output.flush()
            logging.info("%d of %d lines answered (%.1f/s)", min(begin + chunk, len(records)),
                         len(records), min(begin + chunk, len(records)) /
                         max(time.time() - start, 1e-9))
    except BaseException:
        if options.output_file:
            output.close()
            os.remove(options.output_file + ".tmp")
        raise
    if options.output_file:
        output.close()
        os.replace(options.output_file + ".tmp", options.output_file)
    return len(records)
