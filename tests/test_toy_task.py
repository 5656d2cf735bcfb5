"""Adding a task is one file plus its script (docs/architecture.md "Adding a task"): a toy task,
sentence-pair regression with a cosine head (tests/fixtures/toy_tasks/), copied into a package
of a temporary directory, trains, evaluates, predicts and exports through its own script,
answers through `Predictor` and scripts/predict.py, and the converter names its missing
Hugging Face head in one line, all with no edit anywhere in bert_tf."""

import json
import os
import shutil

import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import (
    ROOT,
    assert_ok,
    only_export,
    read_key_values,
    run_script,
    write_tiny_config,
)
from script_runner import run_python_script

from bert_tf.errors import BertTfError

TOY = os.path.join(ROOT, "tests", "fixtures", "toy_tasks")

_PAIRS = [("the team won the match", "the team won the game", 0.9),
          ("a goal in the last minute", "a late goal won it", 0.8),
          ("fresh bread and butter", "warm bread with butter", 0.9),
          ("the soup was too salty", "salty soup for dinner", 0.7),
          ("the team won the match", "fresh bread and butter", -0.5),
          ("a goal in the last minute", "the soup was too salty", -0.6),
          ("the coach picked the players", "rice and beans for lunch", -0.4),
          ("the crowd cheered loudly", "the cake was sweet", -0.3)]


def _write_tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{a}\t{b}\t{score}\n" for a, b, score in rows)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """(directory, script, data dir): the toy package and its script copied to a temporary
    directory, and the task's TSV files."""

    root = tmp_path_factory.mktemp("toy")
    package = root / "pkg" / "toy_tasks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(os.path.join(TOY, "cosine_regression.py"), package)
    script = shutil.copy(os.path.join(TOY, "run_cosine_regression.py"), root / "pkg")
    data = root / "data"
    data.mkdir()
    _write_tsv(data / "train.tsv", _PAIRS * 2)
    _write_tsv(data / "dev.tsv", _PAIRS)
    _write_tsv(data / "test.tsv", _PAIRS[:4])
    return root, script, data


def _run_toy(root, script, data, vocab):
    out, export_dir = root / "out", root / "export"
    result = run_python_script(
        str(script), [f"--data_dir={data}", f"--vocab_file={vocab}",
                      f"--bert_config_file={write_tiny_config(root)}", f"--output_dir={out}",
                      "--do_train", "--do_eval", "--do_predict", "--max_seq_length=24",
                      "--train_batch_size=8", "--num_train_steps=4", "--learning_rate=1e-3",
                      "--score_scale=1.0", f"--export_dir={export_dir}"],
        env=child_env(), cwd=ROOT)
    assert_ok(result)
    return out, only_export(export_dir)


def test_a_toy_task_trains_exports_and_answers(toy_run, vocab_file, monkeypatch, tmp_path):
    root, script, data = toy_run
    out, exported = _run_toy(root, script, data, vocab_file)

    results = read_key_values(out / "eval_results.txt")
    assert results["global_step"] == 4 and "eval_mse" in results
    with open(out / "test_results.tsv", encoding="utf-8") as f:
        predicted = [float(line) for line in f]
    assert len(predicted) == 4 and all(-1.0 <= value <= 1.0 for value in predicted)
    with open(os.path.join(exported, "assets.extra", "predict_config.json")) as f:
        config = json.load(f)
    assert config["task"] == "cosine_regression"
    assert config["task_module"] == "toy_tasks.cosine_regression"
    assert config["score_scale"] == 1.0

    # The Predictor finds the task by the module the export records.
    monkeypatch.syspath_prepend(str(root / "pkg"))
    from bert_tf.serving.predictor import Predictor

    predictor = Predictor.from_saved_model(exported)
    assert predictor.task.__name__ == "CosineRegressionTask"
    records = [{"text": a, "text_b": b} for a, b, _ in _PAIRS[:4]]
    answers = predictor.answer_records(records, options=None)
    assert [answer["similarity"] for answer in answers] == pytest.approx(predicted, abs=1e-5)

    # A checkpoint answers alike, given the task's own settings.
    from_checkpoint = Predictor.from_checkpoint(
        str(out), str(root / "bert_config.json"), vocab_file, "cosine_regression",
        max_seq_length=24, score_scale=1.0)
    assert [answer["similarity"] for answer in from_checkpoint.answer_records(records, None)] \
        == pytest.approx(predicted, abs=1e-5)

    # scripts/predict.py, in a process that imports the task's module from the export's record.
    lines = tmp_path / "pairs.txt"
    lines.write_text("".join(f"{a} ||| {b}\n" for a, b, _ in _PAIRS[:4]))
    answered = tmp_path / "answers.jsonl"
    env = child_env(PYTHONPATH=os.pathsep.join([str(root / "pkg"), ROOT]))
    assert_ok(run_script("predict.py", f"--export_dir={exported}", f"--input_file={lines}",
                         f"--output_file={answered}", env=env))
    with open(answered, encoding="utf-8") as f:
        from_script = [json.loads(line)["similarity"] for line in f]
    assert from_script == pytest.approx(predicted, abs=1e-5)

    # The converter: the cosine head has no Hugging Face counterpart; the encoder converts.
    from bert_tf.tools import conversion

    checkpoint = tf.train.latest_checkpoint(str(out))
    with pytest.raises(BertTfError) as error:
        conversion.convert_tf_to_hf(str(root / "bert_config.json"), checkpoint,
                                    str(tmp_path / "hf"), vocab_file, task="cosine_regression")
    assert str(error.value) == ("--task=cosine_regression: the cosine_regression head has no "
                                "Hugging Face counterpart; convert the encoder alone (without "
                                "--task).")
    conversion.convert_tf_to_hf(str(root / "bert_config.json"), checkpoint,
                                str(tmp_path / "hf"), vocab_file)
    assert os.path.isfile(tmp_path / "hf" / "model.safetensors")
