"""Shared by the run_classifier / run_squad / run_ner / export tests: a tiny config, option
namespaces with the scripts' flag defaults, running a script, reading its outputs."""

import json
import os
import types

import pytest
from envs import child_env
from script_runner import run_python_script

from bert_tf import options as bert_options
from bert_tf.cli import flags as bert_flags
from bert_tf.runs import finetuning
from bert_tf.tasks import classification, multiple_choice, ner, squad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
FINETUNE_DATA = os.path.join(DATA, "finetune")
# The README's walk-through data: sports vs food sentences (data/README.md).
TOPICS = os.path.join(ROOT, "data", "topics")

# A 2-layer, 32-wide BERT over the real 30522-token uncased vocab (MiniLM's vocab.txt).
TINY_CONFIG = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
                   hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                   initializer_range=0.02)

# Small sizes for tests; every other option keeps its flag default (bert_tf.cli.flags).
_TEST_VALUES = dict(max_seq_length=32, train_batch_size=8, eval_batch_size=8,
                    predict_batch_size=8, learning_rate=1e-3, num_train_epochs=1.0,
                    keep_checkpoint_max=2, save_summary_steps=0, random_seed=1)
# kind -> (the script's task flag group, its options class, its task, whether it has
# --do_eval).
_TASKS = {
    "classifier": (bert_flags.define_classifier_flags, bert_options.ClassifierOptions,
                   classification.ClassificationTask, True),
    "squad": (bert_flags.define_squad_flags, bert_options.SquadOptions, squad.SquadTask, False),
    "ner": (bert_flags.define_ner_flags, bert_options.NerOptions, ner.NerTask, True),
    "multiple_choice": (bert_flags.define_multiple_choice_flags,
                        bert_options.MultipleChoiceOptions,
                        multiple_choice.MultipleChoiceTask, True),
}


def write_tiny_config(directory, **overrides):
    """Writes TINY_CONFIG (with overrides) as bert_config.json in `directory`; returns it."""
    path = os.path.join(str(directory), "bert_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**TINY_CONFIG, **overrides}, f)
    return path


def options(kind, **values):
    """(task, FinetuneOptions) for `finetuning.run_finetuning`, as run_classifier / run_squad /
    run_ner / run_multiple_choice ("classifier", "squad", "ner", "multiple_choice") build them
    from the script's own flag groups: the flag defaults, then `_TEST_VALUES`, then `values`."""
    define_task, options_class, task_class, has_eval = _TASKS[kind]

    def define(flag_values):
        define_task(flag_values)
        bert_flags.define_finetuning_flags(has_eval=has_eval,
                                           length_buckets=task_class.length_buckets,
                                           flag_values=flag_values)

    flag_values = bert_flags.parse(define)
    for name, value in {**_TEST_VALUES, **values}.items():
        if name in flag_values:
            setattr(flag_values, name, value)
        else:
            assert name not in values, f"not a {kind} flag: {name}"
    return (task_class(options_class.from_flags(flag_values)),
            bert_options.FinetuneOptions.from_flags(flag_values))


def run_script(name, *args, timeout=300):
    """Runs scripts/<name> with `args` as `python scripts/<name>` does (through
    tests/script_runner.py); returns the CompletedProcess."""
    return run_python_script(os.path.join(ROOT, "scripts", name), args, env=child_env(),
                             timeout=timeout)


def assert_ok(result):
    assert result.returncode == 0, result.stderr[-3000:]


def assert_clean_error(result, *fragments):
    """Exit status 2 and one `error: ...` line naming `fragments`, no traceback."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in error_lines[0], error_lines[0]
    return error_lines[0]


def read_key_values(path):
    """eval_results.txt as a dict of floats (`key = value` lines; `# header` lines skipped)."""
    results = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            key, value = line.rstrip("\n").split(" = ")
            results[key] = float(value)
    return results


def only_export(export_dir):
    """The single timestamped SavedModel directory under `export_dir`."""
    entries = os.listdir(export_dir)
    assert len(entries) == 1 and entries[0].isdigit(), entries
    return os.path.join(export_dir, entries[0])


def minilm_files(minilm_converted):
    """The fine-tuning options naming the converted MiniLM (conftest `minilm_converted`):
    init_checkpoint, vocab_file and bert_config_file."""
    return {"init_checkpoint": os.path.join(minilm_converted, "bert_model.ckpt"),
            "vocab_file": os.path.join(minilm_converted, "vocab.txt"),
            "bert_config_file": os.path.join(minilm_converted, "bert_config.json")}


def fine_tune_minilm(directory, minilm_converted, kind, **values):
    """Fine-tunes the converted MiniLM (conftest `minilm_converted`) for `kind` ("classifier",
    "squad", ...) with --export_dir under `directory`: a namespace of the output_dir, the
    export path and the run's results."""
    output_dir, export_dir = os.path.join(directory, "out"), os.path.join(directory, "export")
    results = finetuning.run_finetuning(*options(
        kind, **minilm_files(minilm_converted), output_dir=output_dir, export_dir=export_dir,
        do_train=True, keep_checkpoint_max=1, **values))
    return types.SimpleNamespace(output_dir=output_dir, export=only_export(export_dir),
                                 results=results)


def squad_questions(path):
    """[(question id, context, gold answer texts)] in file order."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [(qa["id"], paragraph["context"], [a["text"] for a in qa.get("answers", [])])
            for article in data for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_prediction_files(output_dir, squad_file, n_best_size, max_answer_words,
                           version_2=False, null_score_diff_threshold=0.0):
    """Checks predictions.json, nbest_predictions.json (and null_odds.json) against the
    questions of `squad_file`: every question answered, with text of its own context."""
    questions = squad_questions(squad_file)
    predictions = load_json(os.path.join(output_dir, "predictions.json"))
    nbest = load_json(os.path.join(output_dir, "nbest_predictions.json"))
    assert list(predictions) == [qid for qid, _, _ in questions]
    assert list(nbest) == list(predictions)
    # A context has single spaces here, so an answer mapped back to it is a substring.
    for qid, context, _ in questions:
        answer = predictions[qid]
        assert isinstance(answer, str) and answer in context
        entries = nbest[qid]
        assert 1 <= len(entries) <= n_best_size + (1 if version_2 else 0)
        assert sum(entry["probability"] for entry in entries) == pytest.approx(1.0, abs=1e-5)
        scores = [entry["start_logit"] + entry["end_logit"] for entry in entries if entry["text"]]
        assert scores == sorted(scores, reverse=True)
        for entry in entries:
            assert set(entry) == {"text", "probability", "start_logit", "end_logit"}
            assert entry["text"] in context or entry["text"] == "empty"
            assert len(entry["text"].split()) <= max_answer_words
    null_odds_path = os.path.join(output_dir, "null_odds.json")
    if not version_2:
        assert not os.path.exists(null_odds_path)
        return predictions
    null_odds = load_json(null_odds_path)
    assert list(null_odds) == list(predictions)
    for qid, answer in predictions.items():
        # The v2.0 rule: null answer iff null score - best non-null score > threshold.
        assert (answer == "") == (null_odds[qid] > null_score_diff_threshold)
        assert "" in [entry["text"] for entry in nbest[qid]]
    return predictions
