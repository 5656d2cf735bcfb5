"""What a model_fn's TRAIN mode does: the optimizer, its schedule, gradient accumulation, loss
scaling and frozen variables, as one settings object (`TrainingStep`).

A run builds it once (`TrainingStep.from_options`) and hands it whole to the task's model_fn, which
calls `TrainingStep.spec` on its loss.
"""

import dataclasses

import tensorflow as tf

from bert_tf import modeling, optimization
from bert_tf.options import TrainOptions
from bert_tf.training import estimator as estimator_lib


@dataclasses.dataclass(frozen=True)
class TrainingStep:
    """The arguments of `optimization.create_optimizer` for one run.

    The defaults build a model_fn that can train (one update, no warmup): what evaluation,
    prediction and export need, where TRAIN mode never runs. The optimizer's are the
    run_*.py flags' (`options.TrainOptions`).
    """

    learning_rate: float = TrainOptions.learning_rate  # Peak learning rate.
    num_train_steps: int = 1  # Optimizer updates in the whole run (the schedule's length).
    num_warmup_steps: int = 0  # Linear warmup updates.
    optimizer: str = TrainOptions.optimizer  # "adamw" or "lamb".
    # Micro-batches per update (each session run is one).
    num_accumulation_steps: int = TrainOptions.num_accumulation_steps
    compute_dtype: tf.DType = tf.float32  # fp16 gets dynamic loss scaling.
    trainable: optimization.TrainableSelection | None = None  # Frozen layers.
    # Dense gradients only, for a step compiled whole (see `optimization.create_optimizer`).
    static_shapes: bool = False

    @classmethod
    def from_options(cls, options, num_train_steps, num_warmup_steps):
        """The `TrainingStep` of a run's options, which every task's model_fn takes.

        Args:
          options: `FinetuneOptions` or `PretrainOptions` (its `train` and `model` groups).
          num_train_steps, num_warmup_steps: the schedule in optimizer updates (fine-tuning:
            `runner.finetuning_schedule`).
        """
        train = options.train
        return cls(learning_rate=train.learning_rate, num_train_steps=num_train_steps,
                   num_warmup_steps=num_warmup_steps, optimizer=train.optimizer,
                   num_accumulation_steps=train.num_accumulation_steps,
                   compute_dtype=options.model.compute_dtype,
                   trainable=trainable_selection(train))

    def spec(self, loss, input_ids, training_metrics=None):
        """The TRAIN-mode EstimatorSpec: the optimizer on `loss`.

        Args:
          loss: float32 scalar, the mean loss of the micro-batch.
          input_ids: int Tensor [B, S] of the micro-batch (its static B counts examples/sec).
          training_metrics: dict name -> float32 scalar on the training batch, logged with the
            progress line and written to TensorBoard (see `estimator.EstimatorSpec`).
        """
        train_op = optimization.create_optimizer(
            loss, self.learning_rate, self.num_train_steps, self.num_warmup_steps,
            optimizer=self.optimizer, num_accumulation_steps=self.num_accumulation_steps,
            loss_scale="dynamic" if self.compute_dtype == tf.float16 else None,
            trainable=self.trainable, static_shapes=self.static_shapes)
        batch = modeling.get_shape_list(input_ids)[0]
        examples = batch * self.num_accumulation_steps if isinstance(batch, int) else None
        return estimator_lib.EstimatorSpec(mode=estimator_lib.ModeKeys.TRAIN, loss=loss,
                                           train_op=train_op, examples_per_step=examples,
                                           training_metrics=training_metrics)


def trainable_selection(train):
    """The `optimization.TrainableSelection` of --trainable_scopes / --freeze_scopes /
    --freeze_layers (`options.TrainOptions`), or None when every variable trains."""
    if not (train.trainable_scopes or train.freeze_scopes or train.freeze_layers):
        return None
    return optimization.TrainableSelection(tuple(train.trainable_scopes or ()),
                                           tuple(train.freeze_scopes or ()),
                                           train.freeze_layers)
