"""Answers text with a fine-tuned model: an export, an ONNX or TFLite file or a checkpoint.

    python scripts/predict.py --export_dir=export/1700000000 --input_file=questions.jsonl \
        --input_format=jsonl --output_file=answers.jsonl

    echo "a fine match ||| a great game" | python scripts/predict.py \
        --init_checkpoint=out/ --task=classifier --bert_config_file=$BERT_DIR/bert_config.json \
        --vocab_file=$BERT_DIR/vocab.txt --max_seq_length=128

Writes one JSON object per input line (classifier: label + probabilities; SQuAD: answer, char
offsets, score, n-best; NER: words, tags, spans; fill_mask; embed). See README "Predicting and
serving".
"""

from absl import flags

from bert_tf import errors, options
from bert_tf.cli import predict, tool_flags
from bert_tf.serving import prediction_process

tool_flags.define_predict_flags()


def main(_):
    # This process only predicts: oneDNN may keep every weight in its kernel's layout.
    prediction_process.assume_frozen_weights()
    predict.run_predict(options.PredictOptions.from_flags(flags.FLAGS))


if __name__ == "__main__":
    errors.run_main(main)
