"""Is run_pretraining input-bound or compute-bound? Steps/sec with records vs in memory.

Times three things on the same TFRecords (pre-training records, e.g. the output of
benchmarks/pretraining_data_scale.py) with the same bert_tf pipeline and model_fn as
scripts/run_pretraining.py:
  input only    batches/sec of `pretraining.input_fn_builder` alone (read, shuffle, parse);
  train, records  training steps/sec fed by that pipeline;
  train, memory   training steps/sec on one parsed batch cached in memory (no I/O, no parse).
If "train, records" is close to "train, memory" and "input only" is far above both, the
step is compute-bound: the pipeline keeps it fed.

    python benchmarks/pretraining_input_pipeline.py --input_file=/tmp/x/train.tfrecord \
        --bert_config_file=configs/bert_tiny.json --batch_size=32
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tensorflow as tf  # noqa: E402

from bert_tf import fileio, modeling  # noqa: E402
from bert_tf.tasks import model_fn_parts, pretraining  # noqa: E402
from bert_tf.training import estimator as estimator_lib  # noqa: E402
from bert_tf.training.training_step import TrainingStep  # noqa: E402

tf1 = tf.compat.v1


def rate(session, fetch, warmup, steps):
    """Runs of `fetch` per second over `steps` runs after `warmup` untimed ones."""
    for _ in range(warmup):
        session.run(fetch)
    start = time.perf_counter()
    for _ in range(steps):
        session.run(fetch)
    return steps / (time.perf_counter() - start)


def measure(input_files, bert_config, seq, predictions, batch_size, warmup, steps, what):
    with tf.Graph().as_default():
        tf1.set_random_seed(1)
        dataset = pretraining.input_fn_builder(input_files, seq, predictions, is_training=True)(
            {"batch_size": batch_size})
        if what == "train, memory":
            dataset = dataset.take(1).cache().repeat()
        features = tf1.data.make_one_shot_iterator(dataset).get_next()
        if what == "input only":
            fetch = features
        else:
            model_fn = pretraining.model_fn_builder(
                model_fn_parts.Encoder(bert_config),
                TrainingStep(learning_rate=1e-4, num_train_steps=100000, num_warmup_steps=10))
            fetch = model_fn(features, None, estimator_lib.ModeKeys.TRAIN, {}).train_op
        with tf1.Session() as session:
            session.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
            return rate(session, fetch, warmup, steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input_file", required=True, help="Pre-training TFRecords (glob ok).")
    parser.add_argument("--bert_config_file", default=os.path.join(ROOT, "configs",
                                                                   "bert_tiny.json"))
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    files = fileio.expand_input_files(args.input_file)
    config = modeling.BertConfig.from_json_file(args.bert_config_file)
    result = {"config": os.path.basename(args.bert_config_file), "batch_size": args.batch_size,
              "max_seq_length": args.max_seq_length, "cpus": os.cpu_count()}
    for what in ("input only", "train, records", "train, memory"):
        steps = args.steps * (5 if what == "input only" else 1)
        per_sec = measure(files, config, args.max_seq_length, args.max_predictions_per_seq,
                          args.batch_size, args.warmup, steps, what)
        result[f"{what}: steps/sec"] = round(per_sec, 2)
        result[f"{what}: examples/sec"] = round(per_sec * args.batch_size)
        print(f"{what}: {per_sec:.2f} steps/sec", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
