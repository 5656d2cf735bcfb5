"""Every bad input is one clear line (docs/compatibility.md §5): a table of bad command lines.

Each row runs a script (as `python scripts/<name>` does: tests/script_runner.py) with one thing
wrong and checks what a user sees:
a non-zero exit (2), exactly one `error: ...` line naming the flag or file (and what to do),
no Python traceback, and the files a previous run left in the output directory unchanged.
Rows run two at a time.
"""

import collections
import concurrent.futures
import json
import os
import shutil

import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import PRETRAINING_TINY as TINY
from finetune_helpers import TINY_CONFIG as FINETUNE_CONFIG
from finetune_helpers import run_script, write_records

from bert_tf import modeling
from bert_tf.tasks import model_fn_parts, pretraining
from bert_tf.training import estimator as estimator_lib

OLD_RESULTS = "global_step = 7\nloss = 1.25\n"

Case = collections.namedtuple("Case", "name script args fragments env", defaults=(None,))

_PRETRAIN = ["--bert_config_file={d}/bert_config.json", "--input_file={d}/train.tfrecord",
             "--output_dir={out}", "--max_seq_length=16", "--max_predictions_per_seq=4",
             "--do_train", "--train_batch_size=8", "--num_train_steps=2"]
_CREATE = ["--input_file={d}/corpus.txt", "--output_file={out}/data.tfrecord",
           "--vocab_file={d}/vocab.txt", "--max_seq_length=16", "--max_predictions_per_seq=4",
           "--num_workers=1"]
_CLASSIFY = ["--task_name=mrpc", "--data_dir={d}/glue_mrpc", "--vocab_file={minilm_vocab}",
             "--bert_config_file={d}/finetune_config.json", "--output_dir={out}", "--do_train",
             "--max_seq_length=16", "--num_train_steps=1"]
_SQUAD = ["--vocab_file={minilm_vocab}", "--bert_config_file={d}/finetune_config.json",
          "--output_dir={out}", "--do_train", "--train_file={d}/squad.json",
          "--max_seq_length=32", "--max_query_length=8", "--num_train_steps=1"]
_FEATURES = ["--input_file={d}/sentences.txt", "--output_file={out}/features.jsonl",
             "--vocab_file={minilm_vocab}", "--bert_config_file={d}/finetune_config.json",
             "--init_checkpoint={d}/init/model.ckpt", "--max_seq_length=16"]


def _with(args, **replace):
    """`args` with the flags in `replace` set to new values (None drops the flag)."""
    out = [arg for arg in args if arg.split("=", 1)[0].lstrip("-") not in replace]
    return out + [f"--{flag}={value}" for flag, value in replace.items() if value is not None]


CASES = [
    # create_pretraining_data.py: corpora and vocabularies.
    Case("corpus glob matches nothing", "create_pretraining_data.py",
         _with(_CREATE, input_file="{d}/no_such_*.txt"), ["--input_file", "no_such_*.txt"]),
    Case("binary corpus file", "create_pretraining_data.py",
         _with(_CREATE, input_file="{d}/binary.txt"), ["binary.txt", "NUL byte"]),
    Case("non-UTF-8 corpus file", "create_pretraining_data.py",
         _with(_CREATE, input_file="{d}/latin1.txt"), ["latin1.txt", "not valid UTF-8"]),
    Case("empty corpus", "create_pretraining_data.py",
         _with(_CREATE, input_file="{d}/empty.txt"), ["--input_file", "empty.txt", "no text"]),
    Case("vocab without [MASK]", "create_pretraining_data.py",
         _with(_CREATE, vocab_file="{d}/vocab_no_mask.txt"), ["vocab_no_mask.txt", "[MASK]"]),
    Case("duplicate vocab entries", "create_pretraining_data.py",
         _with(_CREATE, vocab_file="{d}/vocab_duplicate.txt"),
         ["vocab_duplicate.txt", "'hello'", "remove the duplicate"]),
    Case("missing vocab file", "create_pretraining_data.py",
         _with(_CREATE, vocab_file="{d}/nope.txt"), ["--vocab_file", "nope.txt"]),
    # run_pretraining.py: configs, records, checkpoints, flags.
    Case("missing BERT config", "run_pretraining.py",
         _with(_PRETRAIN, bert_config_file="{d}/nope.json"), ["nope.json"]),
    Case("config is not JSON", "run_pretraining.py",
         _with(_PRETRAIN, bert_config_file="{d}/not_json.json"), ["not_json.json"]),
    Case("hidden size not divisible by heads", "run_pretraining.py",
         _with(_PRETRAIN, bert_config_file="{d}/heads.json"),
         ["heads.json", "not a multiple of num_attention_heads"]),
    Case("negative size in config", "run_pretraining.py",
         _with(_PRETRAIN, bert_config_file="{d}/negative.json"),
         ["negative.json", "intermediate_size"]),
    Case("input glob matches nothing", "run_pretraining.py",
         _with(_PRETRAIN, input_file="{d}/none_*.tfrecord"), ["--input_file", "none_*.tfrecord"]),
    Case("input is not a TFRecord file", "run_pretraining.py",
         _with(_PRETRAIN, input_file="{d}/corpus.txt"), ["--input_file", "corpus.txt"]),
    Case("records of another max_seq_length", "run_pretraining.py",
         _with(_PRETRAIN, max_seq_length=32), ["--max_seq_length=32", "train.tfrecord"]),
    Case("records of another max_predictions_per_seq", "run_pretraining.py",
         _with(_PRETRAIN, max_predictions_per_seq=5),
         ["--max_predictions_per_seq=5", "train.tfrecord"]),
    Case("max_seq_length over max_position_embeddings", "run_pretraining.py",
         _with(_PRETRAIN, max_seq_length=128), ["--max_seq_length=128", "max_position_embeddings"]),
    Case("truncated TFRecord (an interrupted copy)", "run_pretraining.py",
         _with(_PRETRAIN, input_file="{d}/cut.tfrecord"),
         ["--input_file", "cut.tfrecord", "corrupt at byte", "re-copy", "--skip_corrupt_records"]),
    Case("truncated --init_checkpoint data shard", "run_pretraining.py",
         _with(_PRETRAIN, init_checkpoint="{d}/cut_ckpt/model.ckpt"),
         ["--init_checkpoint", "cut_ckpt/model.ckpt", "cannot be read"]),
    Case("checkpoint of another shape", "run_pretraining.py",
         _with(_PRETRAIN, init_checkpoint="{d}/wide/model.ckpt"), ["model.ckpt", "shape"]),
    Case("output_dir is a file", "run_pretraining.py",
         _with(_PRETRAIN, output_dir="{d}/corpus.txt"), ["--output_dir", "is a file"]),
    Case("output_dir cannot be created", "run_pretraining.py",
         _with(_PRETRAIN, output_dir="/proc/bert_tf_out"), ["--output_dir", "/proc/bert_tf_out"]),
    Case("batch not divisible by the replicas", "run_pretraining.py",
         _with(_PRETRAIN, train_batch_size=7, distribution_strategy="multi_worker"),
         ["--train_batch_size=7", "2 replicas"],
         {"TF_CONFIG": json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                   "task": {"type": "worker", "index": 0}})}),
    Case("multi_worker without TF_CONFIG", "run_pretraining.py",
         _with(_PRETRAIN, distribution_strategy="multi_worker"), ["TF_CONFIG"]),
    Case("--use_tpu with another strategy", "run_pretraining.py",
         _with(_PRETRAIN, use_tpu="true", distribution_strategy="mirrored"),
         ["--use_tpu", "--distribution_strategy=mirrored"]),
    # Training-run flags (README "Training runs").
    Case("unknown --best_checkpoint_metric", "run_pretraining.py",
         _with(_PRETRAIN, eval_every_n_steps=1, best_checkpoint_metric="f1"),
         ["--best_checkpoint_metric", "'f1'", "masked_lm_accuracy"]),
    Case("negative --early_stopping_patience", "run_pretraining.py",
         _with(_PRETRAIN, eval_every_n_steps=1, best_checkpoint_metric="masked_lm_loss",
               early_stopping_patience=-2), ["--early_stopping_patience", "-2"]),
    Case("frozen scope that matches nothing", "run_pretraining.py",
         _with(_PRETRAIN, freeze_scopes="bert/encoder/layer_9"),
         ["--freeze_scopes", "bert/encoder/layer_9", "matches no variable"]),
    Case("more frozen layers than the model has", "run_pretraining.py",
         _with(_PRETRAIN, freeze_layers=5), ["--freeze_layers=5", "encoder layers"]),
    # Fine-tuning and feature extraction.
    Case("unknown task", "run_classifier.py", _with(_CLASSIFY, task_name="sentiment"),
         ["sentiment"]),
    Case("malformed GLUE file", "run_classifier.py",
         _with(_CLASSIFY, data_dir="{d}/glue_bad"), ["train.tsv"]),
    Case("vocab without [CLS]", "run_classifier.py",
         _with(_CLASSIFY, vocab_file="{d}/vocab_no_cls.txt"), ["vocab_no_cls.txt", "[CLS]"]),
    Case("unknown --best_checkpoint_metric for the task", "run_classifier.py",
         _with(_CLASSIFY, do_eval="true", eval_every_n_steps=1, best_checkpoint_metric="mcc"),
         ["--best_checkpoint_metric", "'mcc'", "eval_accuracy"]),
    Case("--eval_every_n_steps without eval data", "run_classifier.py",
         _with(_CLASSIFY, eval_every_n_steps=1), ["--eval_every_n_steps=1", "--do_eval"]),
    Case("malformed SQuAD file", "run_squad.py", _with(_SQUAD, train_file="{d}/corpus.txt"),
         ["corpus.txt"]),
    Case("SQuAD file without data", "run_squad.py",
         _with(_SQUAD, train_file="{d}/squad_no_data.json"), ["squad_no_data.json"]),
    Case("missing init checkpoint", "extract_features.py",
         _with(_FEATURES, init_checkpoint="{d}/nowhere/model.ckpt"), ["nowhere/model.ckpt"]),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory, minilm_dir):
    """The good files each row breaks one thing of, plus the bad ones."""
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "bert_config.json").write_text(json.dumps(TINY))
    (d / "finetune_config.json").write_text(json.dumps(FINETUNE_CONFIG))
    (d / "heads.json").write_text(json.dumps({**TINY, "num_attention_heads": 3}))
    (d / "negative.json").write_text(json.dumps({**TINY, "intermediate_size": -4}))
    (d / "not_json.json").write_text("{vocab_size: 64,")
    write_records(str(d / "train.tfrecord"), num=16)
    records = (d / "train.tfrecord").read_bytes()
    (d / "cut.tfrecord").write_bytes(records[:len(records) * 2 // 3])
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "hello", "world", "."]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (d / "vocab.txt").write_text("\n".join(specials + words) + "\n")
    (d / "vocab_no_mask.txt").write_text("\n".join(specials[:4] + words) + "\n")
    (d / "vocab_duplicate.txt").write_text("\n".join(specials + words + ["hello"]) + "\n")
    with open(os.path.join(minilm_dir, "vocab.txt"), encoding="utf-8") as f:
        (d / "vocab_no_cls.txt").write_text(f.read().replace("[CLS]\n", "[CLZ]\n"))
    (d / "corpus.txt").write_text("the cat sat on the mat .\na dog ran .\n\nhello world .\n"
                                  "the dog sat .\n")
    (d / "sentences.txt").write_text("hello world\n")
    (d / "binary.txt").write_bytes(b"the cat\x00\x01\x02 sat\n")
    (d / "latin1.txt").write_bytes("the caf\u00e9 sat\n".encode("latin-1"))
    (d / "empty.txt").write_text("\n\n")
    (d / "glue_mrpc").mkdir()
    for split in ("train", "dev"):
        (d / "glue_mrpc" / f"{split}.tsv").write_text(
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tthe cat sat\tthe cat sat\n")
    (d / "glue_bad").mkdir()
    (d / "glue_bad" / "train.tsv").write_text(
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\tonly three columns\n")
    (d / "squad_no_data.json").write_text(json.dumps({"version": "1.1"}))
    # A checkpoint of a wider model (hidden 48) for --init_checkpoint; and a finetune one.
    _save_model_checkpoint({**TINY, "hidden_size": 48}, str(d / "wide" / "model.ckpt"))
    _save_model_checkpoint(FINETUNE_CONFIG, str(d / "init" / "model.ckpt"))
    _save_model_checkpoint(TINY, str(d / "cut_ckpt" / "model.ckpt"))
    shard = d / "cut_ckpt" / "model.ckpt.data-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[:shard.stat().st_size // 3])
    return {"d": str(d), "minilm_vocab": os.path.join(minilm_dir, "vocab.txt")}


def _save_model_checkpoint(config, prefix):
    with tf.Graph().as_default():
        ints = lambda width: tf.zeros([1, width], tf.int32)  # noqa: E731
        features = {"input_ids": ints(8), "input_mask": ints(8) + 1, "segment_ids": ints(8),
                    "masked_lm_positions": ints(2), "masked_lm_ids": ints(2),
                    "masked_lm_weights": tf.ones([1, 2]), "next_sentence_labels": ints(1)}
        model_fn = pretraining.model_fn_builder(
            model_fn_parts.Encoder(modeling.BertConfig.from_dict(config)))
        model_fn(features, None, estimator_lib.ModeKeys.EVAL, {})
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, prefix)


def _run_case(case, paths, out):
    """Runs one row in an output dir holding an earlier run's results; returns its outcome."""
    os.makedirs(out)
    with open(os.path.join(out, "eval_results.txt"), "w") as f:
        f.write(OLD_RESULTS)
    args = [arg.format(out=out, **paths) for arg in case.args]
    completed = run_script(case.script, *args, env=child_env(**(case.env or {})))
    return completed, sorted(os.listdir(out)), open(os.path.join(out, "eval_results.txt")).read()


@pytest.mark.slow
def test_bad_inputs_fail_with_one_line_naming_the_flag_or_file(data, tmp_path):
    assert len(CASES) >= 20
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {case.name: pool.submit(_run_case, case, data, str(tmp_path / f"case{i}"))
                   for i, case in enumerate(CASES)}
    problems = []
    for case in CASES:
        completed, files, old_results = futures[case.name].result()
        stderr = completed.stderr
        errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
        fragments = [fragment.format(**data) for fragment in case.fragments]
        if completed.returncode != 2 or len(errors) != 1 or "Traceback" in stderr:
            problems.append(f"{case.name}: exit {completed.returncode}, "
                            f"{len(errors)} error lines, stderr tail: {stderr[-1500:]}")
        elif not all(fragment in errors[0] for fragment in fragments):
            problems.append(f"{case.name}: {errors[0]!r} lacks one of {fragments}")
        elif len(errors[0]) > 400:
            problems.append(f"{case.name}: message too long: {errors[0]!r}")
        if files != ["eval_results.txt"] or old_results != OLD_RESULTS:
            problems.append(f"{case.name}: the output dir changed: {files}")
    assert not problems, "\n\n".join(problems)


def test_table_covers_every_script_that_takes_user_files():
    scripts = {case.script for case in CASES}
    assert {"create_pretraining_data.py", "run_pretraining.py", "run_classifier.py",
            "run_squad.py", "extract_features.py"} <= scripts
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.slow
def test_the_good_command_line_trains(data, tmp_path):
    """Sanity of the harness: the good pre-training command line works (so each bad row fails
    because of its one change)."""
    outcome, files, old = _run_case(Case("good", "run_pretraining.py", _PRETRAIN, []), data,
                                    str(tmp_path / "good"))
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    assert old == OLD_RESULTS and "checkpoint" in files
    shutil.rmtree(tmp_path / "good")
