"""The task registry: a task is found by its name, and nothing outside bert_tf/tasks/ decides
anything by comparing a task's name (it asks the task's class instead)."""

import ast
import pathlib

import pytest

from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.tasks import base, registry
from bert_tf.tools import benchmark_step, conversion

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "bert_tf"


def _task_names():
    """Every name a task is known by: the registry's and the converter's head names."""
    return set(registry.names()) | set(conversion.hf_heads())


def _literals(node):
    """The string constants `node` is or holds (a tuple, list, set or dict's keys)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [value for element in node.elts for value in _literals(element)]
    if isinstance(node, ast.Dict):
        return [value for key in node.keys if key is not None for value in _literals(key)]
    return []


def name_switches(source, names):
    """[(line, text)] of `source`'s comparisons on a task name: `x == "squad"`,
    `x in ("classifier", "ner")`, and collections of two or more task names (lists that
    must grow with every task)."""
    found = []
    tree = ast.parse(source)
    # The field lists of generated flag groups name options fields, some of which are spelled
    # like tasks (`regression`, `multi_label`); they decide nothing.
    field_lists = {id(argument) for call in ast.walk(tree) if isinstance(call, ast.Call)
                   and getattr(call.func, "id", getattr(call.func, "attr", "")) == "define_fields"
                   for argument in call.args}
    for node in ast.walk(tree):
        if id(node) in field_lists:
            continue
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(value in names for operand in operands for value in _literals(operand)):
                found.append(node.lineno)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            if len(set(_literals(node)) & names) >= 2:
                found.append(node.lineno)
    lines = source.splitlines()
    return [(line, lines[line - 1].strip()) for line in sorted(set(found))]


def test_no_module_outside_tasks_compares_a_task_name():
    names = _task_names()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if relative.startswith("bert_tf/tasks/"):
            continue
        for line, text in name_switches(path.read_text(encoding="utf-8"), names):
            offenders.append(f"{relative}:{line}: {text}")
    assert not offenders, ("decided by a task's name; ask the task's class (bert_tf.tasks."
                           "base.Task) instead:\n" + "\n".join(offenders))


def test_the_check_finds_each_kind_of_name_switch():
    source = ('if task == "squad":\n    pass\n'
              'ok = config.task in ("classifier", "ner")\n'
              'FIELDS = {"classifier": 1, "squad": 2}\n'
              'fine = glue_task == "cola"\n')
    assert [line for line, _ in name_switches(source, {"squad", "classifier", "ner"})] == [1, 3, 4]


def test_every_built_in_task_is_found_by_the_name_its_exports_record():
    # Built in: an export need not record the task's module (another test adds a toy task).
    built_in = registry.names(where=lambda task: registry.module_of(task) is None)
    assert built_in == ("classifier", "squad", "ner", "multiple_choice", "pretraining",
                        "fill_mask", "embed")
    for name in built_in:
        task = registry.get(name)
        assert issubclass(task, base.Task) and task.name == name


def test_an_unknown_task_is_one_error_naming_the_known_tasks():
    with pytest.raises(BertTfError) as error:
        registry.get("sentiment")
    message = str(error.value)
    assert "\n" not in message and "unknown task 'sentiment'" in message
    assert all(name in message for name in registry.names())


def test_a_task_module_that_cannot_be_imported_is_named():
    with pytest.raises(BertTfError, match="its module no_such_module_here cannot be imported"):
        registry.get("toy", module="no_such_module_here")


def test_two_classes_cannot_share_a_name():
    class Twin(base.Task):
        name = "squad"

    with pytest.raises(BertTfError, match="task 'squad': registered twice"):
        registry.register(Twin)
    assert registry.get("squad").__name__ == "SquadTask"


def test_a_task_without_a_name_cannot_register():
    class Nameless(base.Task):
        pass

    with pytest.raises(BertTfError, match="needs a `name`"):
        registry.register(Nameless)


def test_the_lists_other_modules_offer_come_from_the_registry():
    # The flag choices of scripts/predict.py, benchmark.py and convert_checkpoint.py.
    assert export.TASKS == ("classifier", "squad", "ner", "fill_mask", "embed")
    assert benchmark_step.TASKS == ("squad", "classifier", "pretraining")
    assert list(conversion.TASK_HEADS) == ["classifier", "multi_label", "regression", "squad",
                                           "ner", "multiple_choice"]


def test_a_predict_config_of_an_unknown_or_unanswered_task_is_a_clear_error():
    with pytest.raises(BertTfError, match='needs a "task", one of classifier, squad'):
        export.PredictConfig.from_dict({"task": "sentiment"}, "x.json")
    with pytest.raises(BertTfError, match="task multiple_choice: the Predictor does not answer"):
        export.PredictConfig.from_dict({"task": "multiple_choice"}, "x.json")
    with pytest.raises(BertTfError, match="task ner: no label list"):
        export.PredictConfig(task="ner").check()


def test_the_converter_names_a_task_whose_head_has_no_counterpart():
    with pytest.raises(BertTfError) as error:
        conversion.task_head("fill_mask")
    assert str(error.value) == ("--task=fill_mask: the fill_mask head has no Hugging Face "
                                "counterpart; convert the encoder alone (without --task).")
    with pytest.raises(BertTfError, match="unknown task 'sentiment'; use one of classifier"):
        conversion.task_head("sentiment")


def test_the_order_of_the_tasks_does_not_depend_on_what_was_imported_first():
    """Flag choices come from the registry: a process that imports a task module before the
    others lists the tasks as every other process does."""
    import subprocess
    import sys

    from envs import child_env

    code = ("import bert_tf.tasks.encoder, bert_tf.tasks.pretraining\n"
            "from bert_tf.tasks import registry\nprint(','.join(registry.names()))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=child_env(), check=True).stdout.strip()
    assert output == ",".join(registry.names(where=lambda task: registry.module_of(task)
                                             is None))
