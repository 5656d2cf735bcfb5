"""Official SQuAD v1.1 / v2.0 evaluation of a predictions file.

Usage:
  python scripts/squad_evaluate.py DATA_FILE PRED_FILE [--version_2]
      [--na_prob_file=null_odds.json] [--na_prob_thresh=1.0] [--out_file=eval.json]

The official v2.0 script's spellings work too (`--na-prob-file`, `--na-prob-thresh`,
`--out-file`), so the original README's command runs as typed:
  python scripts/squad_evaluate.py dev-v2.0.json predictions.json --na-prob-file null_odds.json

Chinese data (CMRC 2018, DRCD) is scored by the official CMRC 2018 rules with --language=zh
(the default --language=auto picks them when the contexts are mostly CJK ideographs).

Prints one JSON line: v1.1 {"exact_match", "f1"}; CMRC 2018 {"exact_match", "f1", "average",
"total", "skip"}; v2.0 {"exact", "f1", "total", "HasAns_*",
"NoAns_*"} and, with --na_prob_file, {"best_exact", "best_exact_thresh", "best_f1",
"best_f1_thresh"}. Scores are percentages, as in the official scripts.
"""

import json

from absl import flags

from bert_tf import errors, fileio, options
from bert_tf.cli import flags as bert_flags
from bert_tf.cli import option_flags
from bert_tf.metrics import squad as squad_metrics

FLAGS = flags.FLAGS

flags.DEFINE_bool("version_2", False, "Use the SQuAD v2.0 metric (questions may have no answer).")
bert_flags.define_path("na_prob_file", None,
                       "v2.0: JSON {question id: no-answer probability}, e.g. null_odds.json.")
flags.DEFINE_float("na_prob_thresh", 1.0,
                   "v2.0: a prediction counts as no answer when its no-answer probability "
                   "exceeds this.")
bert_flags.define_path("out_file", None, "Also write the JSON result to this file.")
# The official evaluate-v2.0.py's option names.
for _official, _ours in (("na-prob-file", "na_prob_file"), ("na-prob-thresh", "na_prob_thresh"),
                         ("out-file", "out_file")):
    flags.DEFINE_alias(_official, _ours)
option_flags.define_fields(options.SquadEvaluateOptions)


def main(argv):
    if len(argv) != 3:
        raise errors.BertTfError(
            f"expected 2 arguments DATA_FILE PRED_FILE, got {len(argv) - 1}; usage: "
            "squad_evaluate.py DATA_FILE PRED_FILE [--version_2] [--na_prob_file F] "
            "[--na_prob_thresh T] [--language=auto|en|zh].")
    result = squad_metrics.evaluate_files(
        fileio.user_path(argv[1]), fileio.user_path(argv[2]),
        version_2=FLAGS.version_2 or bool(FLAGS.na_prob_file),
        na_prob_file=FLAGS.na_prob_file,
        na_prob_thresh=FLAGS.na_prob_thresh,
        language=options.SquadEvaluateOptions.from_flags(FLAGS).language)
    print(json.dumps(result))
    if FLAGS.out_file:
        fileio.atomic_write_text(FLAGS.out_file, json.dumps(result) + "\n")


if __name__ == "__main__":
    errors.run_main(main)
