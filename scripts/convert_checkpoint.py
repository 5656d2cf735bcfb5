"""Converts BERT checkpoints between the Hugging Face and the Google layouts.

  python scripts/convert_checkpoint.py --direction=hf_to_tf --hf_dir=DIR --output_dir=OUT
  python scripts/convert_checkpoint.py --direction=tf_to_hf --bert_config_file=bert_config.json \
      --init_checkpoint=bert_model.ckpt --output_dir=OUT

See `bert_tf/conversion.py` for the name mapping and what each direction writes.
"""

from absl import flags

from bert_tf import conversion, errors

FLAGS = flags.FLAGS

flags.DEFINE_enum("direction", None, ["hf_to_tf", "tf_to_hf"],
                  "hf_to_tf: Hugging Face config.json + model.safetensors -> bert_config.json + "
                  "bert_model.ckpt. tf_to_hf: the reverse, in the BertForPreTraining layout.")
flags.DEFINE_string("hf_dir", None, "hf_to_tf: Hugging Face BERT model directory.")
flags.DEFINE_string("bert_config_file", None, "tf_to_hf: the checkpoint's bert_config.json.")
flags.DEFINE_string("init_checkpoint", None,
                    "tf_to_hf: checkpoint prefix, e.g. .../bert_model.ckpt.")
flags.DEFINE_string("vocab_file", None,
                    "tf_to_hf: vocab.txt to copy (default: vocab.txt beside --bert_config_file).")
flags.DEFINE_string("output_dir", None, "Directory to write the converted model to.")
flags.DEFINE_bool("skip_unknown_keys", False,
                  "hf_to_tf: drop keys that are not BERT weights (e.g. a classifier head) "
                  "instead of failing.")


def main(_):
    if not FLAGS.direction:
        raise errors.BertTfError("--direction: not given; pass --direction=hf_to_tf or "
                                 "--direction=tf_to_hf.")
    if not FLAGS.output_dir:
        raise errors.BertTfError("--output_dir: not given; pass the directory to write to.")
    if FLAGS.direction == "hf_to_tf":
        if not FLAGS.hf_dir:
            raise errors.BertTfError("--hf_dir: not given; pass the Hugging Face model directory "
                                     "holding config.json and model.safetensors.")
        conversion.convert_hf_to_tf(FLAGS.hf_dir, FLAGS.output_dir,
                                    skip_unknown=FLAGS.skip_unknown_keys)
    else:
        errors.require_file(FLAGS.bert_config_file, flag="bert_config_file", what="BERT config")
        if not FLAGS.init_checkpoint:
            raise errors.BertTfError("--init_checkpoint: not given; pass the checkpoint prefix, "
                                     "e.g. .../bert_model.ckpt.")
        conversion.convert_tf_to_hf(FLAGS.bert_config_file, FLAGS.init_checkpoint,
                                    FLAGS.output_dir, vocab_file=FLAGS.vocab_file)


if __name__ == "__main__":
    errors.run_main(main)
