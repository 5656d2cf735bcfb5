"""From text to answers: `Predictor` loads a fine-tuned model once and answers raw text.

    predictor = Predictor.from_saved_model("export/1700000000")
    predictor.predict(["a fine match"])            # classifier: label + probabilities
    predictor.answer(["Who?"], ["Ada wrote it."])  # SQuAD: text, score, char offsets, n-best
    predictor.tag(["Ada lives in Paris"])          # NER: words, tags, char spans

Four backends run the same model: an export (`from_saved_model`, which reads what it needs
from the export's assets.extra/), a checkpoint (`from_checkpoint`: a run's --output_dir or a
prefix, plus the config, vocab and task), an ONNX file (`from_onnx`, made by
scripts/export_onnx.py, which stores the same assets in the model's metadata) and a TFLite
file (`from_tflite`, made by scripts/export_tflite.py, the assets in its metadata too).

Pre- and post-processing are the library's own, so the answers are those of
`run_*.py --do_predict` on the same checkpoint: `classification_features.convert_single_example`,
`squad.convert_examples_to_features` + `squad_postprocess.compute_predictions`,
`ner.convert_single_example` + `tasks.ner.word_tags`. Examples are batched by length (sorted,
each batch padded to its longest), and results come back in input order.

One Predictor may be shared by many threads (a web service's request handlers): each call
answers as it would alone. The sessions and ONNX Runtime run concurrent calls side by side;
LiteRT's interpreter, which keeps its tensors between calls, runs one call at a time.
`micro_batching=True` merges concurrent calls of the same width into one model call
(`bert_tf.serving.micro_batching`): more requests/s under load, answers within float32
rounding of those alone.
"""

import dataclasses
import json
import os
import re
import threading
import time

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio, modeling, precision, tokenization
from bert_tf.data import bert_inputs
from bert_tf.data import classification_features as classification_data
from bert_tf.data import ner as ner_data
from bert_tf.data import squad as squad_data
from bert_tf.encoder import sentence_pooling
from bert_tf.errors import BertTfError, missing_extra
from bert_tf.serving import backends, encoder_export, export
from bert_tf.serving import micro_batching as micro_batching_lib
from bert_tf.tasks import base, classification, ner, squad, squad_postprocess
from bert_tf.tasks import encoder as encoder_tasks
from bert_tf.training import checkpoints

tf1 = tf.compat.v1

POOLINGS = encoder_export.POOLINGS
MASK_TOKEN = "[MASK]"
_SEQUENCE_FEATURES = export.SERVING_INPUT_NAMES
_LOG_EVERY_SECS = 10.0


# ------------------------------------------------------------------------------- backends


# --------------------------------------------------------------------------- checkpoints


def _read_assets(read, source):
    """(export.PredictConfig, vocab file text) from `read(name) -> text or None`."""
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
    return export.PredictConfig.from_dict(values, source), files[export.VOCAB_FILE]


# -------------------------------------------------------------------------------- predictor


class Predictor:
    """A fine-tuned BERT that answers text; build it with `from_saved_model`,
    `from_checkpoint`, `from_onnx` or `from_tflite`.

    Attributes:
      config: the `export.PredictConfig`.
      task: the task's registered class (`config.task_class`), which answers
        scripts/predict.py's records (`answer_records`).
      batch_size: examples (SQuAD: windows) per model call.
      micro_batching: whether concurrent calls are merged (`micro_batching.MicroBatcher`,
        up to `batch_size` rows a model call); every constructor takes it.
    """

    def __init__(self, backend, config, tokenizer, batch_size=32, micro_batching=False):
        config.check()
        self.config = config
        self.task = config.task_class
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.micro_batching = micro_batching
        self._backend = (micro_batching_lib.MicroBatcher(backend, batch_size)
                         if micro_batching else backend)
        self._num_seen = 0  # The first few examples a Predictor packs are logged.
        self._num_seen_lock = threading.Lock()

    # ---------------------------------------------------------------------- constructors

    @classmethod
    def from_saved_model(cls, path, batch_size=32, micro_batching=False):
        """Loads a `run_*.py --export_dir` export: `<export_dir>/<timestamp>`, or
        `<export_dir>` itself for its newest export."""
        path = export.newest_export(path)
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
        tokenizer = export.tokenizer_from_text(vocab_text, config.do_lower_case)
        return cls(backends.SavedModelBackend(path), config, tokenizer, batch_size,
                   micro_batching)

    @classmethod
    def from_onnx(cls, path, batch_size=32, intra_op_num_threads=0, micro_batching=False):
        """Loads an ONNX model written by scripts/export_onnx.py (fp32 or INT8)."""
        try:
            import onnxruntime
        except ImportError:
            raise missing_extra("Predictor.from_onnx needs onnxruntime", "onnx",
                                "onnxruntime") from None
        fileio.require_file(path, what="ONNX model")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = intra_op_num_threads
        session = onnxruntime.InferenceSession(path, options,
                                               providers=["CPUExecutionProvider"])
        metadata = session.get_modelmeta().custom_metadata_map
        config, vocab_text = _read_assets(
            lambda name: metadata.get(backends.ASSET_METADATA_PREFIX + name),
            f"ONNX model {path} (metadata)")
        tokenizer = export.tokenizer_from_text(vocab_text, config.do_lower_case)
        return cls(backends.OnnxBackend(path, session), config, tokenizer, batch_size,
                   micro_batching)

    @classmethod
    def from_tflite(cls, path, batch_size=32, num_threads=None, micro_batching=False):
        """Loads a TFLite model written by scripts/export_tflite.py (fp32, dynamic INT8 or
        float16), run by LiteRT (the `[tflite]` extra)."""
        try:
            from ai_edge_litert import interpreter as litert
        except ImportError:
            raise missing_extra("Predictor.from_tflite needs LiteRT", "tflite",
                                "ai-edge-litert") from None
        fileio.require_file(path, what="TFLite model")
        with tf.io.gfile.GFile(path, "rb") as f:
            model = f.read()
        try:
            files = backends.tflite_assets(model)
            interpreter = litert.Interpreter(model_content=model, num_threads=num_threads)
        except (ValueError, RuntimeError) as e:
            raise BertTfError(f"TFLite model {path} cannot be loaded ({e}); pass a .tflite "
                              "file written by scripts/export_tflite.py.") from None
        config, vocab_text = _read_assets(files.get, f"TFLite model {path} (metadata)")
        tokenizer = export.tokenizer_from_text(vocab_text, config.do_lower_case)
        return cls(backends.TfliteBackend(path, interpreter), config, tokenizer, batch_size,
                   micro_batching)

    @classmethod
    def from_checkpoint(cls, output_dir_or_prefix, bert_config_file, vocab_file, task,
                        do_lower_case=True, max_seq_length=128, label_list=None,
                        batch_size=32, precision_name="fp32", micro_batching=False,
                        **settings):
        """Builds the task's model once and restores a checkpoint into it.

        Args:
          output_dir_or_prefix: a run's --output_dir (its latest checkpoint) or a prefix.
          bert_config_file, vocab_file, do_lower_case, max_seq_length: as the run's flags.
          task: a registered task that predicts, e.g. one of TASKS ("fill_mask" needs a
            pre-training checkpoint, "embed" any).
          label_list: classifier / NER labels in id order; default: the run directory's
            label_list.txt.
          batch_size: examples (SQuAD: windows) per model call.
          precision_name: "fp32", "bf16" or "fp16" compute.
          micro_batching: merge concurrent calls (see the class).
          **settings: SQuAD's doc_stride, max_query_length, n_best_size, max_answer_length,
            version_2_with_negative, null_score_diff_threshold; other names go to the
            config's `settings` (a task's own `predict_settings`).
        """
        checkpoint = checkpoints.resolve_checkpoint(output_dir_or_prefix)
        fileio.require_file(bert_config_file, flag="bert_config_file", what="BERT config file")
        fileio.require_file(vocab_file, flag="vocab_file", what="vocab file")
        task_class = export.predicting_task(task)
        if label_list is None and task_class.needs_labels:
            label_list = base.labels_next_to(checkpoint)
        settings = {**task_class.checkpoint_settings(checkpoint), **settings}
        fields = {field.name for field in dataclasses.fields(export.PredictConfig)}
        config = export.PredictConfig(
            task=task, do_lower_case=do_lower_case, max_seq_length=max_seq_length,
            label_list=tuple(label_list) if label_list else None,
            **{name: value for name, value in settings.items() if name in fields},
            settings={name: value for name, value in settings.items() if name not in fields})
        config.check()
        bert_config = modeling.BertConfig.from_json_file(bert_config_file)
        if max_seq_length > bert_config.max_position_embeddings:
            raise BertTfError(f"--max_seq_length={max_seq_length} is longer than "
                              f"max_position_embeddings ({bert_config.max_position_embeddings}) "
                              f"in {bert_config_file}; lower --max_seq_length.")
        backend = backends.GraphBackend(
            backends.task_outputs(config, bert_config, precision.compute_dtype_from_name(
                precision_name)), checkpoint,
            extra_inputs=task_class.predict_inputs(config))
        tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        return cls(backend, config, tokenizer, batch_size, micro_batching)

    # --------------------------------------------------------------------------- batching

    def answer_records(self, records, options):
        """The task's JSON-ready answers to scripts/predict.py's records (`Task.answer`)."""
        return self.task.answer(self, records, options)

    def run_features(self, features, extra_inputs=None):
        """The model's outputs per feature: see `_run` (for a task's own `answer`)."""
        return self._run(features, extra_inputs)

    def _run(self, features, extra_inputs=None, names=None):
        """Runs the model over `features` (objects with input_ids, input_mask, segment_ids
        [max_seq_length]) in batches of similar length; returns per feature a dict of its
        outputs, in input order ([S] outputs cut to the feature's batch length S).

        `extra_inputs(indices) -> {name: array [B, ...]}` adds inputs for a batch; `names`
        (a checkpoint's graph only) the outputs computed, default all.
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
            outputs = self._backend(inputs) if names is None else self._backend(inputs, names)
            for row, index in enumerate(indices):
                results[index] = {name: value[row] for name, value in outputs.items()}
            if time.time() - last_log > _LOG_EVERY_SECS:
                last_log = time.time()
                done = begin + len(indices)
                logging.info("predicted %d of %d sequences (%.1f/s)", done, len(features),
                             done / (last_log - start))
        return results

    def _require(self, task_class):
        if not issubclass(self.task, task_class):
            raise BertTfError(f"this model is a {self.config.task} model; "
                              f"{task_class.name} models answer this call.")

    def _next_index(self):
        with self._num_seen_lock:
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
        self._require(classification.ClassificationTask)
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
        self._require(squad.SquadTask)
        if len(questions) != len(contexts):
            raise BertTfError(f"{len(questions)} questions for {len(contexts)} contexts; "
                              "pass one context per question.")
        c = self.config
        examples, word_starts = [], []
        for i, (question, context) in enumerate(zip(questions, contexts, strict=True)):
            words = squad_data.context_words(context)
            examples.append(squad_data.SquadExample(qas_id=str(i), question_text=question,
                                                    doc_tokens=words.doc_tokens,
                                                    follows_space=words.follows_space))
            word_starts.append(_word_starts(words.char_to_word_offset, len(words.doc_tokens)))
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
        self._require(ner.NerTask)
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
                   for feature, output in zip(features, self._run(
                       features, ner.prediction_inputs(self.config, features)), strict=True)]
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
        self._require(encoder_tasks.FillMaskTask)
        packed, positions = [], []
        for text in texts:
            pieces = []
            for k, part in enumerate(text.split(MASK_TOKEN)):
                pieces += ([MASK_TOKEN] if k else []) + self.tokenizer.tokenize(part)
            packed.append(bert_inputs.pack_and_pad(pieces, None, self.tokenizer,
                                                   self.config.max_seq_length))
            positions.append([i for i, token in enumerate(packed[-1].tokens)
                              if token == MASK_TOKEN] or [0])
        most = max((len(p) for p in positions), default=1)

        def mask_positions(indices):
            return {"masked_lm_positions": np.asarray(
                [bert_inputs.pad(positions[i], most) for i in indices], np.int32)}

        results = []
        for features, output in zip(packed, self._run(packed, mask_positions), strict=True):
            probs = np.exp(output["log_probs"])
            results.append([[{"token": self.tokenizer.convert_ids_to_tokens([int(i)])[0],
                              "probability": float(probs[m][i])}
                             for i in np.argsort(-probs[m], kind="stable")[:top_k]]
                            for m in range(features.tokens.count(MASK_TOKEN))])
        return results

    def embed(self, texts, pooling=None, pooling_layer=None, normalize=None):
        """Sentence vectors, pooled by `bert_tf.encoder.sentence_pooling.pool`.

        An embedding export (scripts/export_encoder.py) answers the pooling it was made with
        (the defaults); a checkpoint any (default "cls" of the last layer, not normalized).

        Args:
          texts: strings.
          pooling: "cls", "mean", "max" (over the real tokens) or "pooler".
          pooling_layer: the encoder layer pooled: -1 the last, -2 the one before, ...
          normalize: divide each vector by its L2 norm.

        Returns:
          float32 [len(texts), hidden_size].
        """
        self._require(encoder_tasks.EmbedTask)
        spec, key = self._embedding(pooling, pooling_layer, normalize)
        packed = [bert_inputs.pack_and_pad(self.tokenizer.tokenize(text), None, self.tokenizer,
                                           self.config.max_seq_length) for text in texts]
        outputs = self._run(packed, names=None if key == "embedding" else [key])
        width = outputs[0][key].shape[-1] if outputs else 0
        return np.asarray([output[key] for output in outputs], np.float32).reshape(-1, width)

    def _embedding(self, pooling, pooling_layer, normalize):
        """(the `SentencePooling` asked for, the output holding it); BertTfError in one line
        when the model does not have it."""
        c = self.config
        exported = c.pooling and sentence_pooling.SentencePooling(
            c.pooling, -1 if c.pooling_layer is None else c.pooling_layer, bool(c.normalize))
        default = exported or sentence_pooling.SentencePooling()
        spec = sentence_pooling.SentencePooling(
            pooling or default.pooling,
            default.layer if pooling_layer is None else pooling_layer,
            default.normalize if normalize is None else bool(normalize))
        spec.check(prefix="")
        if exported:
            if spec != exported:
                raise BertTfError(
                    f"this export's embedding is {exported.describe()}; ask for that, or "
                    f"re-export with scripts/export_encoder.py {spec.describe()}.")
            return spec, "embedding"
        names = self._backend.output_names
        if spec.key not in names:  # A layer the encoder does not have.
            spec.check(num_layers=sum(name.startswith("cls@") and "+" not in name
                                      for name in names), prefix="")
        return spec, spec.key


def _word_starts(char_to_word, num_words):
    """The character offset of each doc token (`squad.context_words`) in the context."""
    starts = [None] * num_words
    for offset, word in enumerate(char_to_word):
        if word >= 0 and starts[word] is None:
            starts[word] = offset
    return starts


def _context_offsets(example, span, starts):
    """(start, end) character offsets in the context of an `AnswerSpan`."""
    def offset(position):
        # `position` indexes example.doc_text(first, last); walk to its token.
        for token in range(span.first_token, span.last_token + 1):
            length = len(example.doc_tokens[token])
            if position <= length:
                return starts[token] + position
            position -= length
            if token < span.last_token:
                position -= len(example.separator_before(token + 1))
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


