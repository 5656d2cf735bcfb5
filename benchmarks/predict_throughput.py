"""End-to-end throughput, raw text -> answers: bert_tf's Predictor on each backend and the
same work through a Hugging Face pipeline (PyTorch), in alternating rounds.

    python benchmarks/predict_throughput.py --bert_config_file=configs/bert_base.json \
        --vocab_file=VOCAB --work_dir=/tmp/predict_bench --torch_python=/tmp/torchvenv/bin/python

Builds a BERT-base model with random weights (run_squad.py's / run_classifier.py's graph, one
training step, so the export is a real one), exports it, converts it to ONNX fp32 and INT8, and
times the Predictor on `--num_questions` inputs of the shipped corpus (`--lengths`) for: TF
fp32 (the export), TF bf16 (the checkpoint at --precision=bf16),
ONNX fp32, ONNX INT8, and (classifier) `transformers.pipeline("text-classification")` on a
randomly initialised `BertForSequenceClassification` of the same config in a `--torch_python`
process (same truncation and batch). transformers 5 has no question-answering pipeline any
more, so --task=squad has no Hugging Face column. Each round runs every backend once, in turn;
the result gives the median inputs/s over rounds. Weights do not change the compute.

Workloads (`--lengths`), the same texts for every backend, Hugging Face included:
  full:   consecutive runs of 250 words of data/corpus/train.txt; with the uncased BERT vocab
          each is 295..332 word pieces ([CLS] / [SEP] included), so every batch is ~320 wide
          whichever way it is formed and batching by length cannot help anyone.
  corpus: inputs of a spread of lengths: word counts drawn from a fixed-seed log-normal
          (median 60 words, sigma 0.8, rounded, clipped to 10..300; numpy RandomState(13)),
          each input that many consecutive words of data/corpus/train.txt starting at a
          sentence start (the next input starts at the next sentence). In word pieces
          ([CLS] / [SEP] included, cut at 384), --num_questions=16: min 25, quartiles
          58 / 116 / 149, max 235; 64: min 20, quartiles 52 / 78 / 118, max 384 (the result's
          "workload" gives them for any run). The Predictor sorts by length and pads each batch
          to its longest; the pipeline pads each batch, in input order, to its longest.

`--output_json=PATH` writes the result (the printed JSON: medians, every round's seconds, the
workload's lengths, the fused operators of the ONNX files; ONNX files already in --work_dir are
reused, so delete them after changing the export) with the machine (CPU model and SIMD
flags, TF / onnxruntime versions, and torch / transformers from the --torch_python worker).
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # finetune_helpers: run_squad's options

flags.DEFINE_string("bert_config_file", os.path.join(ROOT, "configs", "bert_base.json"),
                    "The model size.")
flags.DEFINE_string("vocab_file", None, "An uncased BERT vocab.txt.")
flags.DEFINE_string("work_dir", "/tmp/predict_bench", "Checkpoint, export and ONNX files.")
flags.DEFINE_string("torch_python", None, "A Python with torch + transformers (HF pipeline); "
                    "None: skip it.")
flags.DEFINE_enum("task", "squad", ["squad", "classifier"], "What the model answers.")
flags.DEFINE_integer("max_seq_length", 384, "Window length.")
flags.DEFINE_integer("batch_size", 4, "Windows per model call.")
flags.DEFINE_integer("num_questions", 8, "Questions per timed run.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
flags.DEFINE_list("backends", "tf_fp32,tf_bf16,onnx_fp32,onnx_int8,hf", "What to time.")
flags.DEFINE_enum("lengths", "full", ["full", "corpus"],
                  "full: every input one full window; corpus: a spread of lengths (module doc).")
flags.DEFINE_string("output_json", None, "Also write the result here as JSON.")
FLAGS = flags.FLAGS

_HF_WORKER = r"""
import json, sys, time, torch, transformers
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                  "torch_threads": torch.get_num_threads()}), flush=True)
config = transformers.BertConfig(**__CONFIG__)
model = transformers.BertForSequenceClassification(config).eval()
tokenizer = transformers.BertTokenizerFast(__VOCAB__, do_lower_case=True)
classify = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer,
                                 device=-1)
texts = __CONTEXTS__
for line in sys.stdin:
    start = time.perf_counter()
    with torch.inference_mode():
        classify(texts, truncation=True, max_length=__SEQ__, batch_size=__BATCH__, top_k=None)
    print(time.perf_counter() - start, flush=True)
"""


CORPUS_SEED = 13


def _inputs(num_questions, lengths):
    """(questions, contexts): `num_questions` texts of the `lengths` workload (module doc)."""
    import numpy as np

    with open(os.path.join(ROOT, "data", "corpus", "train.txt"), encoding="utf-8") as f:
        sentences = [line.split() for line in f if line.strip()]
    words = [word for sentence in sentences for word in sentence]
    if lengths == "full":
        contexts = [" ".join(words[i * 250:(i + 1) * 250]) for i in range(num_questions)]
    else:
        starts = np.cumsum([0] + [len(sentence) for sentence in sentences])
        rng = np.random.RandomState(CORPUS_SEED)
        targets = np.clip(np.round(rng.lognormal(np.log(60), 0.8, num_questions)), 10, 300)
        contexts, start = [], 0
        for target in targets.astype(int):
            if start + target > len(words):
                start = 0
            contexts.append(" ".join(words[start:start + target]))
            # The next input begins at the next sentence.
            start = int(starts[np.searchsorted(starts, start + target)]) \
                if start + target < starts[-1] else 0
    questions = [f"who said the words in part {i}?" for i in range(num_questions)]
    return questions, contexts


def _workload(contexts):
    """Word-piece lengths of the classifier inputs ([CLS] text [SEP], cut at max_seq_length)."""
    import numpy as np

    from bert_tf import tokenization

    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, do_lower_case=True)
    lengths = [min(len(tokenizer.tokenize(text)) + 2, FLAGS.max_seq_length)
               for text in contexts]
    return {"lengths": FLAGS.lengths, "word_pieces": lengths,
            "word_pieces_min_quartiles_max": [int(v) for v in np.percentile(
                lengths, [0, 25, 50, 75, 100], method="nearest")],
            "words": [len(text.split()) for text in contexts]}


def _fused_operators(paths):
    """{file: sorted com.microsoft operator types}: [] means an unfused (--nooptimize or older)
    model, e.g. one left in --work_dir by an earlier version."""
    import onnx

    return {path: sorted({node.op_type for node in onnx.load(path).graph.node
                          if node.domain == "com.microsoft"}) for path in paths}


def _machine(hf_versions):
    import onnxruntime

    from bert_tf.tools import machine

    return {**machine.machine_info(), "onnxruntime": onnxruntime.__version__,
            **(hf_versions or {})}


def _build_models(work_dir):
    """(export path, output dir, onnx fp32, onnx int8): a 1-step model, exported."""
    from finetune_helpers import FINETUNE_DATA, TOPICS, only_export, options

    from bert_tf.runs import driver
    from bert_tf.serving import onnx_export

    work_dir = os.path.join(work_dir, FLAGS.task)
    out, export = os.path.join(work_dir, "out"), os.path.join(work_dir, "export")
    task_values = (dict(doc_stride=128, max_query_length=64,
                        train_file=os.path.join(FINETUNE_DATA, "squad_small.json"))
                   if FLAGS.task == "squad" else
                   dict(task_name="tsv", text_a_column="sentence",
                        data_dir=TOPICS))
    if not os.path.isdir(export):
        driver.run_task(options(
            FLAGS.task, vocab_file=FLAGS.vocab_file, bert_config_file=FLAGS.bert_config_file,
            output_dir=out, export_dir=export, do_train=True, num_train_steps=1,
            train_batch_size=1, max_seq_length=FLAGS.max_seq_length, **task_values))
    export = only_export(export)
    onnx_files = {}
    for quantize in ("none", "int8"):
        path = os.path.join(work_dir, f"model_{quantize}.onnx")
        if not os.path.exists(path):
            onnx_export.export_onnx(export, path, quantize)
        onnx_files[quantize] = path
    return export, out, onnx_files["none"], onnx_files["int8"]


def _hf_runner(questions, contexts):
    with open(FLAGS.bert_config_file, encoding="utf-8") as f:
        config = json.load(f)
    config = {key: config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "max_position_embeddings", "type_vocab_size")}
    source = (_HF_WORKER.replace("__CONFIG__", repr(config))
              .replace("__VOCAB__", repr(FLAGS.vocab_file))
              .replace("__QUESTIONS__", repr(questions)).replace("__CONTEXTS__", repr(contexts))
              .replace("__SEQ__", str(FLAGS.max_seq_length))
              .replace("__BATCH__", str(FLAGS.batch_size)))
    worker = subprocess.Popen([FLAGS.torch_python, "-c", source], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    versions = json.loads(worker.stdout.readline())

    def run():
        worker.stdin.write("go\n")
        worker.stdin.flush()
        return float(worker.stdout.readline())

    return run, versions


def main(_):
    from bert_tf.serving.predictor import Predictor

    os.makedirs(FLAGS.work_dir, exist_ok=True)
    export, out, onnx_fp32, onnx_int8 = _build_models(FLAGS.work_dir)
    questions, contexts = _inputs(FLAGS.num_questions, FLAGS.lengths)
    settings = dict(max_seq_length=FLAGS.max_seq_length, doc_stride=128, max_query_length=64,
                    batch_size=FLAGS.batch_size)
    if FLAGS.task == "classifier":
        settings = dict(max_seq_length=FLAGS.max_seq_length, batch_size=FLAGS.batch_size)
    makers = {
        "tf_fp32": lambda: Predictor.from_saved_model(export, FLAGS.batch_size),
        "tf_bf16": lambda: Predictor.from_checkpoint(
            out, FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.task, precision_name="bf16",
            **settings),
        "onnx_fp32": lambda: Predictor.from_onnx(onnx_fp32, FLAGS.batch_size),
        "onnx_int8": lambda: Predictor.from_onnx(onnx_int8, FLAGS.batch_size),
    }
    runners, hf_versions = {}, None
    for name in FLAGS.backends:
        if name == "hf":
            if FLAGS.torch_python and FLAGS.task == "classifier":
                runners[name], hf_versions = _hf_runner(questions, contexts)
            continue
        predictor = makers[name]()

        def run(predictor=predictor):
            start = time.perf_counter()
            if FLAGS.task == "squad":
                predictor.answer(questions, contexts)
            else:
                predictor.predict(contexts)
            return time.perf_counter() - start

        runners[name] = run
    for run in runners.values():
        run()  # warm-up
    seconds = {name: [] for name in runners}
    for round_index in range(FLAGS.rounds):
        for name, run in runners.items():
            seconds[name].append(run())
        print(f"round {round_index}: " + ", ".join(
            f"{name} {FLAGS.num_questions / s[-1]:.2f}/s" for name, s in seconds.items()),
            flush=True)
    medians = {name: FLAGS.num_questions / statistics.median(s) for name, s in seconds.items()}
    result = {"task": FLAGS.task, "inputs_per_sec_median": medians, "seconds": seconds,
              "inputs_per_sec": {name: [FLAGS.num_questions / x for x in s]
                                 for name, s in seconds.items()},
              "max_seq_length": FLAGS.max_seq_length, "batch_size": FLAGS.batch_size,
              "num_questions": FLAGS.num_questions, "rounds": FLAGS.rounds,
              "workload": _workload(contexts)}
    print(json.dumps(result, indent=2))
    if FLAGS.output_json:
        result["machine"] = _machine(hf_versions)
        result["onnx_fused_operators"] = _fused_operators([onnx_fp32, onnx_int8])
        with open(FLAGS.output_json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    flags.mark_flags_as_required(["vocab_file"])
    app.run(main)
