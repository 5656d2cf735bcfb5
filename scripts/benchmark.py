"""Times the real training step or inference forward of a BERT task on in-graph data.

Example (BERT-base SQuAD fine-tuning, seq 384, batch 4, bf16):

    python scripts/benchmark.py --bert_config_file=configs/bert_base.json --task=squad \
        --mode=train --precision=bf16 --output_json=/tmp/bench.json

`--api=tf2` times the same step through bert_tf.tf2.BertEncoder (tf.function, with and without
XLA) beside the graph-mode step, in fp32 and bf16 (bert_tf.tools.tf2_benchmark).
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import flags as bert_flags
from bert_tf.tools import benchmark

bert_flags.define_path("bert_config_file", None, "The config json file of the BERT model.")
flags.DEFINE_enum("task", "squad", list(benchmark.TASKS), "Which task's model_fn to run.")
flags.DEFINE_enum("mode", "train", list(benchmark.MODES),
                  "train: forward + backward + optimizer update; infer: forward only.")
flags.DEFINE_integer("max_seq_length", 384, "Sequence length S.")
flags.DEFINE_integer("batch_size", 4,
                     "Sequences per micro-batch, over all replicas of --distribution_strategy.")
flags.DEFINE_integer("num_warmup_steps", 2, "Untimed steps before timing.")
flags.DEFINE_integer("num_steps", 10, "Timed steps.")
flags.DEFINE_integer("num_accumulation_steps", 1,
                     "Micro-batches per optimizer update (--mode=train); one step is one update.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence (pretraining).")
flags.DEFINE_integer("num_labels", 2, "Classes of the classifier head.")
flags.DEFINE_integer("peak_matmul_size", 2048,
                     "n of the n x n x n matmul that measures the peak TFLOP/s.")
bert_flags.define_path("output_json", None, "Write the result as JSON here.")
bert_flags.define_path("output_plot", None,
                    "Draw step time and throughput across --plot_batch_sizes to this image "
                    "(needs matplotlib).")
flags.DEFINE_string("plot_batch_sizes", "1,2,4,8", "Batch sizes of the --output_plot sweep.")
bert_flags.define_path("trace_file", None,
                    "Also trace one step: print time per op type and write a Chrome trace here.")
flags.DEFINE_bool("check_onednn", True,
                  "On CPU, report which oneDNN ISA and matmul kernels this precision uses "
                  "(a child process with ONEDNN_VERBOSE=1).")
flags.DEFINE_enum("api", "graph", ["graph", "tf2"],
                  "graph: the task's model_fn in a session. tf2: the SQuAD training step "
                  "through bert_tf.tf2.BertEncoder under tf.function, with and without XLA, "
                  "beside the graph-mode step, fp32 and bf16, timed alternately in one run.")
flags.DEFINE_bool("find_max_batch", False,
                  "Instead of timing --batch_size, search the largest batch whose step runs "
                  "within --memory_limit_mb (doubling, then bisection; each probe a child "
                  "process).")
flags.DEFINE_integer("memory_limit_mb", 8000,
                     "--find_max_batch: resident-memory budget of one probe, in MB.")
bert_flags.define_recompute_grad_flag()
bert_flags.define_max_position_embeddings_flag()
bert_flags.define_precision_flags()
bert_flags.define_xla_flags()
bert_flags.define_distribution_flags()

FLAGS = flags.FLAGS


def main(_):
    benchmark.run(options.BenchmarkOptions.from_flags(FLAGS))


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file"])
    errors.run_main(main)
