"""`TrainingStep`: built from a run's options, its defaults and `create_optimizer`'s the flags'."""

import inspect

from bert_tf import optimization
from bert_tf import options as bert_options
from bert_tf.training import estimator
from bert_tf.training.training_step import TrainingStep, trainable_selection


def test_from_options_takes_the_train_and_model_groups():
    options = bert_options.FinetuneOptions(
        train=bert_options.TrainOptions(learning_rate=3e-4, optimizer="lamb",
                                        num_accumulation_steps=4, freeze_layers=2),
        model=bert_options.ModelOptions(precision="bf16"))
    step = TrainingStep.from_options(options, num_train_steps=100, num_warmup_steps=10)
    assert (step.learning_rate, step.optimizer, step.num_accumulation_steps) == (3e-4, "lamb", 4)
    assert (step.num_train_steps, step.num_warmup_steps) == (100, 10)
    assert step.compute_dtype == options.model.compute_dtype
    assert step.trainable == optimization.TrainableSelection((), (), 2)


def test_no_frozen_variables_is_no_selection():
    assert trainable_selection(bert_options.TrainOptions()) is None


def test_the_defaults_are_the_flags():
    train = bert_options.TrainOptions()
    step = TrainingStep()
    assert (step.learning_rate, step.optimizer, step.num_accumulation_steps) == (
        train.learning_rate, train.optimizer, train.num_accumulation_steps)
    defaults = inspect.signature(optimization.create_optimizer).parameters
    assert defaults["optimizer"].default == train.optimizer
    assert defaults["num_accumulation_steps"].default == train.num_accumulation_steps


def test_run_config_defaults_are_the_run_flags():
    run, config = bert_options.RunOptions(), estimator.RunConfig()
    assert (config.save_checkpoints_steps, config.keep_checkpoint_max,
            config.log_step_count_steps, config.save_summary_steps,
            config.preemption_grace_secs) == (
        run.save_checkpoints_steps, run.keep_checkpoint_max, run.log_every_n_steps,
        run.save_summary_steps, run.preemption_grace_secs)
