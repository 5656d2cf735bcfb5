"""scripts/pretrain_recipe.py (`make pretrain-example`): raw text to a pre-trained model, every
stage, at a size a test can afford (the held-out chapters as both corpora, a few steps)."""

import json
import os

from finetune_helpers import ROOT, assert_ok, read_key_values, run_script


def test_recipe_runs_every_stage_from_a_relative_output_dir(tmp_path):
    eval_text = os.path.join(ROOT, "data", "corpus", "eval.txt")
    result = run_script(
        "pretrain_recipe.py", f"--input_file={eval_text}", f"--eval_input_file={eval_text}",
        "--output_dir=recipe", "--vocab_size=600", "--phase1_seq_length=32",
        "--phase2_seq_length=64", "--phase1_steps=3", "--phase2_steps=2",
        "--train_batch_size=4", "--num_workers=1",
        f"--bert_config_file={os.path.join(ROOT, 'configs', 'bert_tiny.json')}",
        cwd=str(tmp_path))
    assert_ok(result)
    out = tmp_path / "recipe"
    with open(out / "bert_config.json", encoding="utf-8") as f:
        config = json.load(f)
    with open(out / "vocab.txt", encoding="utf-8") as f:
        assert config["vocab_size"] == len(f.read().splitlines())
    for name in ("train_32", "eval_32", "train_64", "eval_64"):
        assert (out / "data" / f"{name}.tfrecord").stat().st_size > 0
    for phase, steps in (("phase1", 3), ("phase2", 2)):
        results = read_key_values(out / phase / "eval_results.txt")
        assert results["global_step"] == steps
        assert 0 <= results["masked_lm_accuracy"] <= 1
    # Phase 2 starts from phase 1's weights (its own schedule: its steps count from 0).
    assert os.path.join("recipe", "phase1", "model.ckpt-3") in result.stderr
    assert "held-out masked_lm_accuracy" in result.stderr
