"""What every task's model_fn builds on: the encoder over the task features with the task's
head (`Encoder.build`). Its TRAIN mode is `bert_tf.training.training_step.TrainingStep`.
Pre-training, classification, NER, SQuAD and multiple choice all take both as settings objects."""

import contextlib
import dataclasses

import tensorflow as tf
from absl import logging

from bert_tf import modeling, precision, table_growth


def bert_from_features(bert_config, features, is_training, use_one_hot_embeddings=False,
                       compute_dtype=tf.float32, recompute_grad=False, padding_free=False,
                       pooled_only=False, sequence_positions=None):
    """A `BertModel` over the features input_ids, input_mask, segment_ids ([B, S] each; the
    keys of docs/compatibility.md §3); packed records (`data.row_packing`) add
    position_ids [B, S] and cls_positions [B, K], and the pooled output is then [B * K, H].
    `padding_free`: the encoder layers run on the real tokens only; `pooled_only` and
    `sequence_positions`: the last layer runs at the positions the head reads only (all three
    `modeling.BertModel`)."""
    return modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings, compute_dtype=compute_dtype,
        recompute_grad=recompute_grad, position_ids=features.get("position_ids"),
        pooled_positions=features.get("cls_positions"), padding_free=padding_free,
        pooled_only=pooled_only, sequence_positions=sequence_positions)


def run_padding_free(padding_free, run):
    """Whether a run's encoder skips padding (`Encoder.padding_free`): `padding_free` (the
    flag; None where the script has none) unless the run (`options.RunOptions`) needs fixed
    shapes: XLA compiles each shape it sees, TPUs only take static ones. Logs the choice."""
    if not padding_free:
        return False
    if run.use_xla or run.distribution.on_tpu:
        logging.info("--padding_free is off: %s compiles fixed shapes.",
                     "XLA" if run.use_xla else "the TPU")
        return False
    logging.info("Encoder layers run on real tokens only (--padding_free).")
    return True


@dataclasses.dataclass(frozen=True)
class Encoder:
    """How a task's model_fn builds BERT: the config, the checkpoint that initializes it, the
    compute dtype, the embedding lookup, recomputation and how longer tables grow."""

    bert_config: modeling.BertConfig
    # Same-named variables are initialized from it, unless a checkpoint of the run is restored.
    init_checkpoint: str | None = None
    compute_dtype: tf.DType = tf.float32  # tf.float32, tf.bfloat16 or tf.float16.
    use_one_hot_embeddings: bool = False  # One-hot embedding lookup (TPUs).
    recompute_grad: bool = False  # Recompute encoder layers in the backward pass.
    # Training and evaluation run the encoder layers on real tokens only; prediction and
    # exports keep the padded graph that serving runtimes and their fusions expect.
    padding_free: bool = False
    # How position / vocabulary tables longer than the checkpoint's start; None: an error.
    growth: table_growth.GrowthOptions | None = None

    @classmethod
    def from_options(cls, bert_config, init_checkpoint, model, padding_free=False):
        """The Encoder of a run: `model` is its `options.ModelOptions`, `padding_free` the
        run's choice (`run_padding_free`)."""
        growth = table_growth.GrowthOptions(model.position_embedding_init, model.new_token_init)
        return cls(bert_config, init_checkpoint, model.compute_dtype,
                   recompute_grad=model.recompute_grad, padding_free=padding_free, growth=growth)

    def build(self, features, purpose, head_fn, pooled_only=False, sequence_positions=None):
        """The encoder over `features` and the task's head on it.

        Args:
          features: dict with input_ids, input_mask, segment_ids [B, S].
          purpose: an `estimator.Purpose`, why the graph is built: dropout is on only in
            training; the run's own checkpoint restored over it makes `init_checkpoint`
            useless; an export keeps the whole graph.
          head_fn: `head_fn(model, is_training)` builds the head on the `BertModel` and
            returns its outputs; it runs in the compute dtype (heads cast their logits to
            float32).
          pooled_only: `head_fn` reads the pooled output only, so training, evaluation and
            the Estimator's prediction compute the last layer at the pooled positions alone
            (`modeling.BertModel`); exports compute all of it.
          sequence_positions: int Tensor [B, P], the positions of the sequence output
            `head_fn` reads: `model.get_sequence_output()` is then [B, P, H] at those
            positions, and the last layer computes them and the pooled positions only.

        Returns:
          What `head_fn` returns.
        """
        is_training = purpose.is_training
        # Exports keep the whole graph that serving runtimes and their fusions expect; the
        # Estimator's own prediction computes what its outputs need, as evaluation does.
        graph_for_serving = purpose.is_export
        # Evaluation, prediction and exports never update the weights: cast them once.
        with (contextlib.nullcontext() if is_training else precision.weights_cast_once()):
            model = bert_from_features(
                self.bert_config, features, is_training, self.use_one_hot_embeddings,
                self.compute_dtype, self.recompute_grad and is_training,
                padding_free=self.padding_free and not graph_for_serving,
                pooled_only=pooled_only and not graph_for_serving,
                sequence_positions=sequence_positions)
            with precision.compute_dtype_scope(self.compute_dtype):
                outputs = head_fn(model, is_training)
        # Not when the run's own checkpoint is restored over it (eval, predict, export).
        if self.init_checkpoint and not purpose.restores_checkpoint:
            modeling.init_from_checkpoint(self.init_checkpoint, growth=self.growth)
        return outputs
