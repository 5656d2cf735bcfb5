"""The pieces every task's model_fn shares: the encoder over the task features with the task's
head (`Encoder.build`) and the TRAIN-mode spec (`Training.spec`). Pre-training,
classification, NER, SQuAD and multiple choice all build on them."""

import dataclasses

import tensorflow as tf

from bert_tf import modeling, optimization, precision
from bert_tf.training import estimator as estimator_lib


def bert_from_features(bert_config, features, is_training, use_one_hot_embeddings=False,
                       compute_dtype=tf.float32):
    """A `BertModel` over the features input_ids, input_mask, segment_ids ([B, S] each; the
    keys of docs/compatibility.md §3)."""
    return modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings, compute_dtype=compute_dtype)


@dataclasses.dataclass(frozen=True)
class Encoder:
    """How a task's model_fn builds BERT: the config, the checkpoint that initializes it, the
    compute dtype and the embedding lookup."""

    bert_config: modeling.BertConfig
    # Same-named variables are initialized from it, unless a checkpoint of the run is restored.
    init_checkpoint: str | None = None
    compute_dtype: tf.DType = tf.float32  # tf.float32, tf.bfloat16 or tf.float16.
    use_one_hot_embeddings: bool = False  # One-hot embedding lookup (TPUs).

    def build(self, features, mode, head_fn):
        """The encoder over `features` and the task's head on it.

        Args:
          features: dict with input_ids, input_mask, segment_ids [B, S].
          mode: an `estimator.ModeKeys` value; dropout is on only in TRAIN.
          head_fn: `head_fn(model, is_training)` builds the head on the `BertModel` and
            returns its outputs; it runs in the compute dtype (heads cast their logits to
            float32).

        Returns:
          What `head_fn` returns.
        """
        is_training = mode == estimator_lib.ModeKeys.TRAIN
        model = bert_from_features(self.bert_config, features, is_training,
                                   self.use_one_hot_embeddings, self.compute_dtype)
        with precision.compute_dtype_scope(self.compute_dtype):
            outputs = head_fn(model, is_training)
        # Not when the run's own checkpoint is restored over it (eval, predict, export).
        if self.init_checkpoint and not estimator_lib.restores_checkpoint():
            modeling.init_from_checkpoint(self.init_checkpoint)
        return outputs


@dataclasses.dataclass(frozen=True)
class Training:
    """How a task's model_fn trains: the arguments of `optimization.create_optimizer`."""

    learning_rate: float
    num_train_steps: int
    num_warmup_steps: int
    optimizer: str = "adamw"
    num_accumulation_steps: int = 1
    compute_dtype: tf.DType = tf.float32  # fp16 gets dynamic loss scaling.
    trainable: optimization.TrainableSelection | None = None  # Frozen layers.

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
            trainable=self.trainable)
        batch = modeling.get_shape_list(input_ids)[0]
        examples = batch * self.num_accumulation_steps if isinstance(batch, int) else None
        return estimator_lib.EstimatorSpec(mode=estimator_lib.ModeKeys.TRAIN, loss=loss,
                                           train_op=train_op, examples_per_step=examples,
                                           training_metrics=training_metrics)


def encoder_and_training(builder_args):
    """The `Encoder` and `Training` of a task's model_fn_builder, from its arguments.

    Every builder takes the same names for them (the original's plus precision and frozen
    layers): bert_config, init_checkpoint, compute_dtype, use_one_hot_embeddings,
    learning_rate, num_train_steps, num_warmup_steps, optimizer, num_accumulation_steps and
    trainable; a builder passes `locals()`.
    """
    a = builder_args
    encoder = Encoder(a["bert_config"], a["init_checkpoint"], a["compute_dtype"],
                      a["use_one_hot_embeddings"])
    training = Training(a["learning_rate"], a["num_train_steps"], a["num_warmup_steps"],
                        a["optimizer"], a["num_accumulation_steps"], a["compute_dtype"],
                        a["trainable"])
    return encoder, training
