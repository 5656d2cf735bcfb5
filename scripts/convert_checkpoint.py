"""Converts BERT checkpoints between the Hugging Face and the Google layouts.

  python scripts/convert_checkpoint.py --direction=hf_to_tf --hf_dir=DIR --output_dir=OUT
  python scripts/convert_checkpoint.py --direction=tf_to_hf --bert_config_file=bert_config.json \
      --init_checkpoint=bert_model.ckpt --output_dir=OUT
  # A fine-tuned model with its head (classifier, multi_label, regression, squad, ner,
  # multiple_choice), for the matching Hugging Face class:
  python scripts/convert_checkpoint.py --direction=tf_to_hf --task=classifier \
      --bert_config_file=bert_config.json --init_checkpoint=RUN_OUTPUT_DIR --output_dir=OUT
  # TensorFlow Model Garden (BertEncoder / BertEncoderV2 checkpoints, TF Hub SavedModels;
  # --task=classifier for a BertClassifier):
  python scripts/convert_checkpoint.py --direction=model_garden_to_tf \
      --init_checkpoint=MODEL_GARDEN_CKPT_OR_SAVEDMODEL --output_dir=OUT
  python scripts/convert_checkpoint.py --direction=tf_to_model_garden \
      --bert_config_file=bert_config.json --init_checkpoint=bert_model.ckpt --output_dir=OUT
  # KerasHub presets (BertBackbone; with --task=classifier a BertTextClassifier):
  python scripts/convert_checkpoint.py --direction=keras_hub_to_tf --keras_hub_preset=DIR \
      --output_dir=OUT
  python scripts/convert_checkpoint.py --direction=tf_to_keras_hub \
      --bert_config_file=bert_config.json --init_checkpoint=bert_model.ckpt --output_dir=OUT

See `bert_tf/tools/conversion.py` (Hugging Face), `bert_tf/tools/model_garden_conversion.py`
and `bert_tf/tools/keras_hub_conversion.py` for the name mappings and what each direction
writes.
"""

from absl import flags

from bert_tf import errors, fileio
from bert_tf.cli import tool_flags
from bert_tf.tools import conversion, keras_hub_conversion, model_garden_conversion

FLAGS = flags.FLAGS
tool_flags.define_conversion_flags()


def main(_):
    if not FLAGS.direction:
        raise errors.BertTfError("--direction: not given; pass --direction=hf_to_tf, tf_to_hf, "
                                 "keras_hub_to_tf, tf_to_keras_hub, model_garden_to_tf or "
                                 "tf_to_model_garden.")
    if not FLAGS.output_dir:
        raise errors.BertTfError("--output_dir: not given; pass the directory to write to.")
    if FLAGS.direction == "hf_to_tf":
        if not FLAGS.hf_dir:
            raise errors.BertTfError("--hf_dir: not given; pass the Hugging Face model directory "
                                     "holding config.json and model.safetensors.")
        conversion.convert_hf_to_tf(FLAGS.hf_dir, FLAGS.output_dir,
                                    skip_unknown=FLAGS.skip_unknown_keys, task=FLAGS.task)
        return
    if FLAGS.direction == "keras_hub_to_tf":
        if not FLAGS.keras_hub_preset:
            raise errors.BertTfError("--keras_hub_preset: not given; pass the KerasHub preset "
                                     "directory holding config.json and model.weights.h5.")
        keras_hub_conversion.convert_keras_hub_to_tf(FLAGS.keras_hub_preset, FLAGS.output_dir,
                                                     task=FLAGS.task)
        return
    if FLAGS.direction != "model_garden_to_tf":
        fileio.require_file(FLAGS.bert_config_file, flag="bert_config_file", what="BERT config")
    if not FLAGS.init_checkpoint:
        raise errors.BertTfError("--init_checkpoint: not given; pass the checkpoint prefix, "
                                 "e.g. .../bert_model.ckpt.")
    if FLAGS.direction == "model_garden_to_tf":
        model_garden_conversion.convert_model_garden_to_tf(
            FLAGS.init_checkpoint, FLAGS.output_dir, bert_config_file=FLAGS.bert_config_file,
            vocab_file=FLAGS.vocab_file, task=FLAGS.task)
    elif FLAGS.direction == "tf_to_model_garden":
        model_garden_conversion.convert_tf_to_model_garden(
            FLAGS.bert_config_file, FLAGS.init_checkpoint, FLAGS.output_dir,
            vocab_file=FLAGS.vocab_file, task=FLAGS.task)
    elif FLAGS.direction == "tf_to_keras_hub":
        keras_hub_conversion.convert_tf_to_keras_hub(
            FLAGS.bert_config_file, FLAGS.init_checkpoint, FLAGS.output_dir,
            vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case, task=FLAGS.task)
    else:
        conversion.convert_tf_to_hf(FLAGS.bert_config_file, FLAGS.init_checkpoint,
                                    FLAGS.output_dir, vocab_file=FLAGS.vocab_file,
                                    task=FLAGS.task, label_list_file=FLAGS.label_list)


if __name__ == "__main__":
    errors.run_main(main)
