"""A fine-tuning task is complete once made: `Task(task_options, options)` sets (or computes from
its data files) every field its hooks read, and the hooks take no options of their own."""

import inspect
import os

import pytest
from finetune_helpers import DATA, FINETUNE_DATA, options

from bert_tf.tasks import base, classification, multiple_choice, ner, pretraining, squad

# kind -> (the minimum beside the script's flag defaults, the fields the hooks read).
CASES = {
    "classifier": (dict(task_name="mrpc", data_dir=os.path.join(DATA, "glue", "MRPC"),
                        do_train=True, do_eval=True),
                   ("processor", "label_list", "task_name", "collector")),
    "ner": (dict(data_dir=os.path.join(DATA, "ner"), do_train=True, do_eval=True),
            ("processor", "label_list", "collector")),
    "multiple_choice": (dict(task_name="swag", data_dir=os.path.join(FINETUNE_DATA, "swag"),
                             do_train=True, do_eval=True),
                        ("processor", "num_choices", "sequences_per_example")),
    "squad": (dict(train_file=os.path.join(FINETUNE_DATA, "squad_small.json"),
                   predict_file=os.path.join(FINETUNE_DATA, "squad_small.json"),
                   do_train=True, do_predict=True),
              ("has_answers",)),
}

# Fields that are None by design after construction: no --class_weights, a training run's
# head labels (they come from the data), and what exists only once `write_features` wrote
# the records it describes.
NONE_BY_DESIGN = {"class_weights", "head_labels", "examples_per_row", "predict_features"}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_task_is_complete_after_construction(kind):
    values, fields = CASES[kind]
    task = options(kind, **values)
    assert task.options.train.do_train and task.task_options is not None
    for field in fields:
        assert getattr(task, field) is not None, f"{kind}: {field} is None after construction"
    unset = {name for name, value in vars(task).items()
             if not name.startswith("_") and value is None} - NONE_BY_DESIGN
    assert not unset, f"{kind}: {sorted(unset)} None after construction"


def test_a_squad_predict_file_with_answers_is_known_at_construction():
    assert options("squad", **CASES["squad"][0]).has_answers is True


def test_the_label_list_is_the_data_files():
    assert options("classifier", **CASES["classifier"][0]).label_list == ["0", "1"]
    assert options("ner", **CASES["ner"][0]).label_list[0] == "O"


@pytest.mark.parametrize("task_class", [classification.ClassificationTask, ner.NerTask,
                                        squad.SquadTask, multiple_choice.MultipleChoiceTask,
                                        base.FinetuningTask, pretraining.PretrainingTask])
def test_the_hooks_take_no_options(task_class):
    names = ("check", "read_examples", "training_schedule", "model_fn", "split_input_fn",
             "metric_names", "evaluate", "write_eval_files", "predict")
    if issubclass(task_class, base.FinetuningTask):
        names += ("write_features", "input_fn")
    for name in names:
        parameters = inspect.signature(getattr(task_class, name)).parameters
        assert "options" not in parameters, f"{task_class.__name__}.{name}"


def test_pretraining_is_a_task_the_driver_runs(tmp_path):
    """run_pretraining is `driver.run_task` on a PretrainingTask: the record checks run as its
    `read_examples`, before anything is written."""
    from bert_tf import options as options_lib
    from bert_tf.errors import BertTfError
    from bert_tf.runs import driver

    assert issubclass(pretraining.PretrainingTask, base.TrainableTask)
    task = pretraining.PretrainingTask(None, options_lib.PretrainOptions(
        input_file=str(tmp_path / "missing-*.tfrecord"),
        model=options_lib.ModelOptions(bert_config_file=os.path.join(
            os.path.dirname(__file__), "..", "configs", "bert_tiny.json")),
        train=options_lib.TrainOptions(do_train=True),
        run=options_lib.RunOptions(output_dir=str(tmp_path / "out"))))
    assert task.tokenizer_options is None and task.requested == {"do_train": True,
                                                                 "do_eval": False}
    with pytest.raises(BertTfError, match="--input_file"):
        driver.run_task(task)
    assert not (tmp_path / "out").exists()
