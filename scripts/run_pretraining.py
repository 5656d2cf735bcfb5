"""Masked-LM + next-sentence pre-training (flags of the original Google run_pretraining.py)."""

from absl import flags

from bert_tf import errors
from bert_tf import flags as bert_flags
from bert_tf.tasks import pretraining

flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT model.")
flags.DEFINE_string("input_file", None, "Input TF example files (glob or comma separated).")
flags.DEFINE_string("eval_input_file", None,
                    "Held-out TF example files for --do_eval (default: --input_file).")
flags.DEFINE_string("output_dir", None, "The output directory for checkpoints and eval results.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually a pre-trained BERT).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked LM predictions per sequence.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
flags.DEFINE_integer("train_batch_size", 32, "Examples per optimizer update (global batch).")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for the optimizer.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps (optimizer updates).")
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Accepted for compatibility (TPU loop size).")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval batches.")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "The optimizer.")
flags.DEFINE_integer("num_accumulation_steps", 1,
                     "Micro-batches accumulated per update; train_batch_size must divide by it.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
flags.DEFINE_integer("log_every_n_steps", 100, "Steps between progress lines.")
flags.DEFINE_integer("save_summary_steps", 100, "Steps between TensorBoard summaries.")
flags.DEFINE_integer("random_seed", None, "Graph-level random seed for repeatable runs.")
flags.DEFINE_bool("report_majority_baseline", False,
                  "After eval, also log the masked-LM accuracy of always predicting the most "
                  "frequent masked token of the training data.")
bert_flags.define_precision_flags()
bert_flags.define_tpu_flags()
bert_flags.define_distribution_flags()
bert_flags.define_xla_flags()

FLAGS = flags.FLAGS


def main(_):
    pretraining.run_pretraining(FLAGS)


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "input_file", "output_dir"])
    errors.run_main(main)
