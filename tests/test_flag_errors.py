"""A bad command line (a required flag missing, an unknown flag, a value that does not parse)
ends, like any bad input, in one `error: --<flag>: ...` line and exit status 2."""

import pytest
from finetune_helpers import assert_clean_error, run_script

# script -> the flags it requires (flags.mark_flags_as_required in the script).
# --bert_config_file and --vocab_file of the training scripts may come with a foreign
# --init_checkpoint (tests/test_checkpoint_sources.py checks the line when neither gives them).
REQUIRED = {
    "run_classifier.py": {"task_name", "data_dir", "output_dir"},
    "run_pretraining.py": {"input_file", "output_dir"},
    "run_squad.py": {"output_dir"},
    "run_ner.py": {"data_dir", "output_dir"},
    "create_pretraining_data.py": {"input_file", "output_file", "vocab_file"},
    "export_checkpoint.py": {"init_checkpoint", "bert_config_file", "output_dir"},
}


def _assert_one_line_without_usage(result):
    line = assert_clean_error(result)
    assert result.stderr.splitlines()[-1] == line
    assert "FATAL" not in result.stderr and "--helpshort" not in result.stderr
    assert line.startswith("error: --")
    return line


@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_no_flags_names_a_required_flag(script):
    line = _assert_one_line_without_usage(run_script(script))
    flag = line.split(":")[1].strip()
    assert flag.removeprefix("--") in REQUIRED[script], line
    assert "this flag is required" in line and f"pass {flag}=" in line


@pytest.mark.parametrize("script", ["run_classifier.py", "run_pretraining.py",
                                    "create_pretraining_data.py"])
def test_unknown_flag_is_named(script):
    line = _assert_one_line_without_usage(run_script(script, "--no_such_flag=1"))
    assert line.startswith("error: --no_such_flag: "), line


def test_value_that_does_not_parse_is_named():
    result = run_script("run_pretraining.py", "--bert_config_file=c.json", "--input_file=x",
                        "--output_dir=out", "--max_seq_length=abc")
    line = _assert_one_line_without_usage(result)
    assert line.startswith("error: --max_seq_length: cannot use 'abc'"), line
