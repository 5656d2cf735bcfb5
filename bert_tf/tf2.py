"""The BERT encoder in TensorFlow 2 code: eager, `tf.function` (XLA), GradientTape, strategies.

`modeling.py`'s builders are graph-mode code: each `get_variable` makes a variable. Here a
`tf.Module` creates the variables once, in its constructor, by running the builders on a
one-token input under a variable creator that records what they ask for; every call then runs
the same builders under a creator that hands each `get_variable` the recorded variable of that
name. So there is one model implementation, the variables carry exactly the names of a
graph-mode `BertModel` (`bert/encoder/layer_0/attention/self/query/kernel`, ...), and
Google's checkpoints load by name.

    encoder = tf2.BertEncoder("minilm/bert_config.json")
    encoder.load_checkpoint("minilm/bert_model.ckpt")
    outputs = encoder(input_ids, input_mask, token_type_ids)  # [B, S] int32 each
    outputs["pooled_output"]  # [B, H]
"""

import collections
import contextlib
import dataclasses

import tensorflow as tf
from absl import logging

from bert_tf import modeling, precision
from bert_tf.encoder import albert, sentence_pooling, transformer
from bert_tf.errors import BertTfError
from bert_tf.training import checkpoints

tf1 = tf.compat.v1

# How many names an error lists before "and N more".
_MAX_NAMES_SHOWN = 10


def load_bert_config(bert_config):
    """A validated `modeling.BertConfig` from a `BertConfig`, its dict or a bert_config.json path.

    Raises:
      BertTfError: naming the file (or "BERT config") and the bad key.
    """
    if isinstance(bert_config, dict):
        bert_config = modeling.BertConfig.from_dict(bert_config)
    if isinstance(bert_config, modeling.BertConfig):
        bert_config.validate()
        return bert_config
    return modeling.BertConfig.from_json_file(str(bert_config))


def initial_values(build):
    """Runs `build()` eagerly and returns the initial value of every variable it asks for.

    Args:
      build: a function calling `modeling` builders (on a small input: only the variables'
        values are kept).

    Returns:
      OrderedDict Google name (e.g. "bert/pooler/dense/kernel") -> float32 Tensor drawn by
      the builder's initializer, in the order a graph-mode model creates its variables.
    """
    values = collections.OrderedDict()

    def draw(getter, name, shape=None, dtype=tf.float32, initializer=None, **kwargs):
        del getter, kwargs  # No variable is made.
        if name not in values:
            values[name] = tf.convert_to_tensor(initializer(shape, dtype=dtype))
        return values[name]

    # Eagerly (init_scope), even when the module is made inside a tf.function.
    with tf.init_scope(), _getter_scope(draw):
        build()
    return values


def make_variables(values):
    """tf.Variables with the given names and initial values (mirrored in a strategy's scope).

    Args:
      values: dict Google name -> initial value.

    Returns:
      OrderedDict Google name -> tf.Variable named so (plus ":0").
    """
    with tf.init_scope():
        return collections.OrderedDict((name, tf.Variable(value, name=name))
                                       for name, value in values.items())


@contextlib.contextmanager
def variables_from(variables_by_name):
    """A block whose `modeling` builders take their variables from a dict, by name.

    Args:
      variables_by_name: dict Google name -> variable (a tf.Variable, or anything
        `tf.convert_to_tensor` reads, such as a Keras variable's value).

    Raises (from the builders):
      BertTfError: when a builder asks for a name the dict lacks (a config that differs
        from the one the variables were made for).
    """
    def lookup(getter, name, *args, **kwargs):
        del getter, args, kwargs  # Nothing is created: the variables exist.
        try:
            return variables_by_name[name]
        except KeyError:
            raise BertTfError(f"the encoder has no variable '{name}': it was built for "
                              "another config.") from None

    with _getter_scope(lookup):
        yield


@contextlib.contextmanager
def _getter_scope(getter):
    """Runs the builders with `getter` answering every `get_variable`.

    A custom getter answers before the variable store is asked, so nothing is created or
    recorded there (a tf.function graph shares the eager program's store, which would
    otherwise refuse the names on the next call and keep the variables alive).
    """
    with modeling.variables_owned_by_caller(), \
            tf1.variable_scope(tf1.get_variable_scope(), custom_getter=getter):
        yield


def bert_outputs(config, input_ids, input_mask=None, token_type_ids=None, training=False,
                 compute_dtype=tf.float32, use_one_hot_embeddings=False):
    """`modeling.BertModel`'s outputs as a dict (call inside `variables_from`).

    Args:
      config: `modeling.BertConfig`.
      input_ids: int Tensor [B, S].
      input_mask: optional int Tensor [B, S], 1 for real tokens.
      token_type_ids: optional int Tensor [B, S].
      training: Python bool; dropout only when True.
      compute_dtype: as `BertModel`'s.
      use_one_hot_embeddings: as `BertModel`'s.

    Returns:
      dict "sequence_output" [B, S, H], "pooled_output" [B, H], "encoder_outputs" (a list of
      num_hidden_layers [B, S, H]), in `compute_dtype`.
    """
    if not isinstance(training, bool):
        raise BertTfError(f"training must be True or False, got {training!r}.")
    model = modeling.BertModel(
        config, is_training=training, input_ids=input_ids, input_mask=input_mask,
        token_type_ids=token_type_ids, use_one_hot_embeddings=use_one_hot_embeddings,
        scope="bert", compute_dtype=compute_dtype)
    return {"sequence_output": model.get_sequence_output(),
            "pooled_output": model.get_pooled_output(),
            "encoder_outputs": list(model.get_all_encoder_layers())}


def load_variables(variables_by_name, checkpoint, allow_missing=False):
    """Assigns each variable the same-named tensor of a Google / bert_tf checkpoint.

    Args:
      variables_by_name: dict Google name -> variable (anything with `assign` and `shape`).
      checkpoint: a checkpoint prefix (".../bert_model.ckpt") or a directory (its latest).
      allow_missing: keep the values of variables the checkpoint lacks (and log them)
        instead of stopping.

    Returns:
      The names the checkpoint did not have (empty when it had them all).

    Raises:
      BertTfError: naming the checkpoint and the variable when the checkpoint cannot be
        read, a shape differs, or (without `allow_missing`) names are missing.
    """
    prefix = checkpoints.resolve_checkpoint(checkpoint)
    reason = checkpoints.unreadable_reason(prefix)
    if reason is not None:
        raise BertTfError(f"checkpoint '{prefix}' cannot be read ({reason}); pass a checkpoint "
                          "prefix such as '.../bert_model.ckpt' whose files are whole.")
    reader = checkpoints.reader_of(prefix)
    stored = reader.get_variable_to_shape_map()
    albert.check_layout(list(variables_by_name), list(stored), prefix)
    missing = [name for name in variables_by_name if name not in stored]
    for name, variable in variables_by_name.items():
        if name in stored and list(stored[name]) != list(variable.shape):
            raise BertTfError(
                f"checkpoint '{prefix}': variable '{name}' has shape {list(stored[name])} but "
                f"the encoder built from the BERT config has shape {list(variable.shape)}; "
                "use the bert_config.json that came with the checkpoint.")
    if missing and not allow_missing:
        raise BertTfError(
            f"checkpoint '{prefix}' lacks {len(missing)} of the encoder's "
            f"{len(variables_by_name)} variables ({_names(missing)}); use the bert_config.json "
            "that came with the checkpoint, or pass allow_missing=True to keep their values.")
    for name, variable in variables_by_name.items():
        if name in stored:
            variable.assign(reader.get_tensor(name))
    logging.log(logging.WARNING if missing else logging.INFO, "%s",
                modeling.restore_summary(prefix, [n for n in variables_by_name
                                                  if n not in missing], missing))
    return missing


def save_variables(variables_by_name, checkpoint_prefix):
    """Writes the variables as a TF checkpoint in Google's layout (the names as given), which
    `--init_checkpoint` of every script reads.

    Args:
      variables_by_name: dict Google name -> variable.
      checkpoint_prefix: e.g. "out/bert_model.ckpt" (a local path).

    Returns:
      `checkpoint_prefix`.
    """
    checkpoints.write_tf_checkpoint(
        {name: tf.convert_to_tensor(variable).numpy()
         for name, variable in variables_by_name.items()}, checkpoint_prefix)
    return checkpoint_prefix


def _names(names):
    shown = ", ".join(names[:_MAX_NAMES_SHOWN])
    more = len(names) - _MAX_NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


class _VariableOwner(tf.Module):
    """What both encoders share: the variables by Google name, their checkpoints."""

    def _set_variables(self, variables_by_name):
        # A dict keyed by Google name: tf.train.Checkpoint and SavedModel track it.
        self._variables_by_name = variables_by_name

    @property
    def variables_by_name(self):
        """dict Google name -> tf.Variable, in creation order."""
        return dict(self._variables_by_name)

    @property
    def variables(self):
        """The variables, in the order a graph-mode model creates them."""
        return tuple(self._variables_by_name.values())

    @property
    def trainable_variables(self):
        """The variables (all trainable), in the order a graph-mode model creates them."""
        return self.variables

    def load_checkpoint(self, checkpoint, allow_missing=False):
        """Loads a Google / bert_tf checkpoint by name; see `load_variables`.

        Returns:
          The names the checkpoint lacked (only with `allow_missing`; else they raise).
        """
        return load_variables(self._variables_by_name, checkpoint, allow_missing)

    def save_checkpoint(self, checkpoint_prefix):
        """Writes the variables in Google's layout (e.g. "out/bert_model.ckpt"); returns it."""
        return save_variables(self._variables_by_name, checkpoint_prefix)


class BertEncoder(_VariableOwner):
    """`modeling.BertModel` as a `tf.Module`: variables made once, named as in graph mode.

    Call it eagerly, in `tf.function` (also `jit_compile=True`), under `tf.GradientTape` or
    a distribution strategy (construct it inside `strategy.scope()`); save it with
    `tf.train.Checkpoint` / `tf.saved_model.save`, or in Google's layout with
    `save_checkpoint`.
    """

    def __init__(self, bert_config, compute_dtype=tf.float32, use_one_hot_embeddings=False,
                 name="bert_encoder"):
        """Creates the variables (randomly initialised as in graph mode).

        Args:
          bert_config: `modeling.BertConfig`, or the path of a bert_config.json.
          compute_dtype: tf.float32, tf.bfloat16 or tf.float16: as `BertModel`'s (variables
            stay float32; outputs are in this dtype).
          use_one_hot_embeddings: as `BertModel`'s.
          name: the module's name.

        Raises:
          BertTfError: for a bad config (naming the file).
        """
        super().__init__(name=name)
        self.config = load_bert_config(bert_config)
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.use_one_hot_embeddings = use_one_hot_embeddings
        one_token = tf.zeros([1, 1], tf.int32)
        self._set_variables(make_variables(initial_values(
            lambda: bert_outputs(self.config, one_token, compute_dtype=self.compute_dtype,
                                 use_one_hot_embeddings=use_one_hot_embeddings))))

    def __call__(self, input_ids, input_mask=None, token_type_ids=None, training=False):
        """Runs the encoder.

        Args:
          input_ids: int32 or int64 Tensor [B, S], word-piece ids.
          input_mask: optional int Tensor [B, S], 1 for real tokens, 0 for padding.
          token_type_ids: optional int Tensor [B, S], segment ids.
          training: Python bool; True turns dropout on.

        Returns:
          dict "sequence_output" [B, S, H], "pooled_output" [B, H], "encoder_outputs" (list
          of num_hidden_layers [B, S, H]), in the compute dtype.
        """
        with variables_from(self._variables_by_name):
            return bert_outputs(self.config, tf.convert_to_tensor(input_ids),
                                None if input_mask is None else tf.convert_to_tensor(input_mask),
                                None if token_type_ids is None
                                else tf.convert_to_tensor(token_type_ids),
                                training=training, compute_dtype=self.compute_dtype,
                                use_one_hot_embeddings=self.use_one_hot_embeddings)

    def embed(self, input_ids, input_mask=None, token_type_ids=None, pooling="cls",
              pooling_layer=-1, normalize=False, training=False):
        """Sentence vectors (`bert_tf.encoder.sentence_pooling.pool`, as the exports pool).

        Args:
          input_ids, input_mask, token_type_ids, training: as `__call__`'s.
          pooling: "cls", "mean", "max" (over the real tokens) or "pooler".
          pooling_layer: the encoder layer pooled: -1 the last, -2 the one before, ...
          normalize: divide each vector by its L2 norm.

        Returns:
          float32 [B, H].

        Raises:
          BertTfError: naming the argument, for a pooling or layer the encoder lacks.
        """
        spec = sentence_pooling.SentencePooling(pooling, pooling_layer, normalize)
        spec.check(self.config.num_hidden_layers, prefix="")
        outputs = self(input_ids, input_mask, token_type_ids, training=training)
        input_mask = tf.ones_like(input_ids) if input_mask is None else input_mask
        return sentence_pooling.pool(outputs["encoder_outputs"], input_mask, spec,
                                     outputs["pooled_output"])


class TransformerEncoder(_VariableOwner):
    """`modeling.transformer_model` as a `tf.Module` (variables `layer_{i}/...`, as the
    builder names them in the current scope; `encoder_width` adds cross-attention)."""

    def __init__(self, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, intermediate_act_fn="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, initializer_range=0.02, layer_norm_eps=1e-12,
                 layer_norm_type="post", position_embedding_type="absolute",
                 max_position_embeddings=512, encoder_width=None, compute_dtype=tf.float32,
                 name="transformer_encoder"):
        """Creates the variables; arguments as `transformer_model`'s, plus:

        Args:
          intermediate_act_fn: an activation name (see `modeling.get_activation`) or function.
          encoder_width: H_enc of the `encoder_output` every call then passes (adds the
            cross-attention sub-layers); None for an encoder.
          compute_dtype: float32, bfloat16 or float16 compute (variables stay float32).
          name: the module's name.

        Raises:
          ValueError: as `transformer_model` for inconsistent sizes or unknown variants.
        """
        super().__init__(name=name)
        self.compute_dtype = tf.as_dtype(compute_dtype)
        self.encoder_width = encoder_width
        self._num_hidden_layers = num_hidden_layers
        self._layer = modeling.LayerConfig(
            hidden_size, num_attention_heads, intermediate_size,
            modeling.get_activation(intermediate_act_fn), hidden_dropout_prob,
            attention_probs_dropout_prob, initializer_range,
            modeling.LayerVariant(layer_norm_type, layer_norm_eps, position_embedding_type,
                                  max_position_embeddings))
        one_position = tf.zeros([1, 1, hidden_size])
        encoder_output = None if encoder_width is None else tf.zeros([1, 1, encoder_width])
        self._set_variables(make_variables(initial_values(
            lambda: self._outputs(one_position, None, encoder_output, None, None, False))))

    def __call__(self, input_tensor, attention_mask=None, encoder_output=None,
                 encoder_attention_mask=None, head_mask=None, training=False):
        """Runs the layers.

        Args:
          input_tensor: float Tensor [B, S, H].
          attention_mask: optional Tensor [B, S, S], 1 where position i may attend to j
            (`modeling.create_attention_mask_from_input_mask`).
          encoder_output: float Tensor [B, T, H_enc]; required iff `encoder_width` was given.
          encoder_attention_mask: optional Tensor [B, S, T].
          head_mask: optional [num_hidden_layers, N] or [N] float multipliers per head.
          training: Python bool; True turns dropout on.

        Returns:
          list of num_hidden_layers Tensors [B, S, H] (each layer's output), in the compute
          dtype.

        Raises:
          BertTfError: if `encoder_output` is given without `encoder_width` or the reverse.
        """
        if (encoder_output is None) != (self.encoder_width is None):
            raise BertTfError("TransformerEncoder: pass encoder_output exactly when the module "
                              f"was built with encoder_width (here {self.encoder_width}).")
        with variables_from(self._variables_by_name):
            return self._outputs(tf.convert_to_tensor(input_tensor), attention_mask,
                                 encoder_output, encoder_attention_mask, head_mask, training)

    def _outputs(self, input_tensor, attention_mask, encoder_output, encoder_attention_mask,
                 head_mask, training):
        if not isinstance(training, bool):
            raise BertTfError(f"training must be True or False, got {training!r}.")
        layer = self._layer if training else dataclasses.replace(
            self._layer, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        cast = (lambda tensor: None if tensor is None
                else tf.cast(tensor, self.compute_dtype))
        computation = modeling.Computation(
            head_mask=head_mask, encoder_output=cast(encoder_output),
            encoder_attention_mask=encoder_attention_mask)
        with precision.compute_dtype_scope(self.compute_dtype):
            outputs, _ = transformer.transformer_layers(
                cast(input_tensor), attention_mask, layer, self._num_hidden_layers, computation)
            return outputs
