"""Masked-LM + next-sentence pre-training (flags of the original Google run_pretraining.py)."""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import flags as bert_flags
from bert_tf.runs.pretraining import run_pretraining

bert_flags.define_pretraining_flags()


def main(_):
    run_pretraining(options.PretrainOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    # --bert_config_file may come with a foreign --init_checkpoint (a KerasHub preset, ...); the
    # run stops with one line when neither gives it.
    flags.mark_flags_as_required(["input_file", "output_dir"])
    errors.run_main(main)
