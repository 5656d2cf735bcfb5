"""The pieces every task's model_fn shares: the encoder over the task features and the
TRAIN-mode spec (pre-training, classification, NER and SQuAD all build on them)."""

import tensorflow as tf

from bert_tf import estimator as estimator_lib
from bert_tf import modeling, optimization


def bert_from_features(bert_config, features, is_training, use_one_hot_embeddings=False,
                       compute_dtype=tf.float32):
    """A `BertModel` over the SPEC §6 features input_ids, input_mask, segment_ids ([B, S] each)."""
    return modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings, compute_dtype=compute_dtype)


def train_spec(loss, input_ids, learning_rate, num_train_steps, num_warmup_steps, optimizer,
               num_accumulation_steps, compute_dtype):
    """The TRAIN-mode EstimatorSpec: the optimizer on `loss` (fp16 gets dynamic loss scaling).

    Args:
      loss: float32 scalar, the mean loss of the micro-batch.
      input_ids: int Tensor [B, S] of the micro-batch (its static B counts examples/sec).
      Others: as in `optimization.create_optimizer`.
    """
    train_op = optimization.create_optimizer(
        loss, learning_rate, num_train_steps, num_warmup_steps, optimizer=optimizer,
        num_accumulation_steps=num_accumulation_steps,
        loss_scale="dynamic" if compute_dtype == tf.float16 else None)
    batch = modeling.get_shape_list(input_ids)[0]
    examples = batch * num_accumulation_steps if isinstance(batch, int) else None
    return estimator_lib.EstimatorSpec(mode=estimator_lib.ModeKeys.TRAIN, loss=loss,
                                       train_op=train_op, examples_per_step=examples)
