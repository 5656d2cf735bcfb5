"""Times the real training step or inference forward of a BERT task on in-graph data.

Example (BERT-base SQuAD fine-tuning, seq 384, batch 4, bf16):

    python scripts/benchmark.py --bert_config_file=configs/bert_base.json --task=squad \
        --mode=train --precision=bf16 --output_json=/tmp/bench.json

`--api=tf2` times the same step through bert_tf.tf2.BertEncoder (tf.function, with and without
XLA) beside the graph-mode step, in fp32 and bf16 (bert_tf.tools.tf2_benchmark).
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import tool_flags
from bert_tf.tools import benchmark

tool_flags.define_benchmark_flags()

FLAGS = flags.FLAGS


def main(_):
    benchmark.run(options.BenchmarkOptions.from_flags(FLAGS))


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file"])
    errors.run_main(main)
