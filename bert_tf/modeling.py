"""The BERT encoder as graph-mode (tf.compat.v1) builders.

A drop-in for the original Google `modeling.py`: the same functions, argument
names, variable names and checkpoint layout, built from
`tf.compat.v1.get_variable` and plain ops (no Keras, no tf.contrib), so it runs
on current TensorFlow 2.x in graph mode.

Shapes use B = batch size, S (F, T) = sequence length (from / to), H = hidden
size, N = attention heads, D = H / N (size per head), I = intermediate size,
V = vocabulary size.

Design note: inside `transformer_model` activations stay 2-D [B*S, H] from the
first layer to the last (one reshape in, one out), so every dense layer is a
plain MatMul + BiasAdd that grappler / oneDNN fuse, and only attention reshapes
to 4-D. With `token_index` (`BertModel(padding_free=True)`) those 2-D activations
hold the real tokens only, [K, H], and attention alone sees the padded layout.

Encoder variants found in other BERT code are config keys, all off by default
so Google configs and checkpoints behave exactly as before:
`position_embedding_type` (learned relative positions, Hugging Face
semantics), `layer_norm_type` (pre-LN blocks), `layer_norm_eps`, more
`hidden_act` values; `BertModel` also returns attention probabilities and
takes a `head_mask`, and `transformer_model` can add cross-attention to an
encoder output.
"""

import collections
import contextlib
import copy
import dataclasses
import json
import math
import re
import threading

import tensorflow as tf
from absl import logging

from bert_tf import precision, table_growth
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1

_ACTIVATIONS = ("gelu", "gelu_new", "gelu_tanh", "relu", "silu", "swish", "tanh", "linear")
POSITION_EMBEDDING_TYPES = ("absolute", "relative_key", "relative_key_query")
# How many `variables_owned_by_caller` blocks are open (on any thread: a distribution
# strategy runs replicas in threads of their own).
_owned_variable_blocks = 0
LAYER_NORM_TYPES = ("post", "pre")


class BertConfig:
    """Configuration for `BertModel` (the `bert_config.json` of a checkpoint).

    Unknown keys read from JSON are kept as attributes and written back by
    `to_dict`, so configs from other BERT code survive a round trip.
    """

    def __init__(self,
                 vocab_size,
                 hidden_size=768,
                 num_hidden_layers=12,
                 num_attention_heads=12,
                 intermediate_size=3072,
                 hidden_act="gelu",
                 hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512,
                 type_vocab_size=16,
                 initializer_range=0.02,
                 layer_norm_eps=1e-12,
                 position_embedding_type="absolute",
                 layer_norm_type="post"):
        """Constructs BertConfig.

        Args:
          vocab_size: V, the number of WordPiece tokens.
          hidden_size: H, the width of the encoder layers and the pooler.
          num_hidden_layers: number of Transformer layers.
          num_attention_heads: N, attention heads per layer; must divide H.
          intermediate_size: I, the width of the feed-forward layer.
          hidden_act: feed-forward activation name (see `get_activation`).
          hidden_dropout_prob: dropout on embeddings, encoder and pooler outputs.
          attention_probs_dropout_prob: dropout on attention probabilities.
          max_position_embeddings: the longest sequence the model accepts.
          type_vocab_size: number of `token_type_ids` values.
          initializer_range: stddev of the truncated normal weight initializer.
          layer_norm_eps: epsilon added to the variance in every layer norm.
          position_embedding_type: "absolute" (learned table added to the
            embeddings), "relative_key" or "relative_key_query" (learned
            distance vectors inside each self-attention, Hugging Face semantics;
            no absolute table is added).
          layer_norm_type: "post" (BERT: LayerNorm(x + sublayer(x))) or "pre"
            (x + sublayer(LayerNorm(x)), one final layer norm on the encoder output).
        """
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.layer_norm_type = layer_norm_type

    @classmethod
    def from_dict(cls, json_object):
        """Constructs a `BertConfig` from a Python dictionary of parameters."""
        config = BertConfig(vocab_size=None)
        for key, value in json_object.items():
            config.__dict__[key] = value
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """Reads and validates a `bert_config.json`; errors name the file and the fix."""
        try:
            with tf.io.gfile.GFile(json_file, "r") as reader:
                text = reader.read()
        except (tf.errors.NotFoundError, FileNotFoundError, IsADirectoryError):
            raise BertTfError(f"BERT config file '{json_file}' does not exist; pass an existing "
                              "bert_config.json with --bert_config_file.") from None
        try:
            json_object = json.loads(text)
        except ValueError as e:
            raise BertTfError(f"BERT config file '{json_file}' is not valid JSON ({e}); "
                              "fix the file or pass another --bert_config_file.") from None
        if not isinstance(json_object, dict):
            raise BertTfError(f"BERT config file '{json_file}' must hold a JSON object of "
                              "parameters such as {\"vocab_size\": 30522, ...}.")
        config = cls.from_dict(json_object)
        config.validate(source=json_file)
        return config

    def validate(self, source="BERT config"):
        """Raises `BertTfError` if the sizes are missing, negative or inconsistent."""
        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, key, None)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BertTfError(f"{source}: '{key}' must be a positive integer, got {value!r}; "
                                  "fix the config file.")
        if self.hidden_size % self.num_attention_heads:
            raise BertTfError(
                f"{source}: hidden_size ({self.hidden_size}) is not a multiple of "
                f"num_attention_heads ({self.num_attention_heads}); pick sizes where it divides.")
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key, None)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise BertTfError(f"{source}: '{key}' must be in [0, 1), got {value!r}.")
        if isinstance(self.hidden_act, str) and self.hidden_act.lower() not in _ACTIVATIONS:
            raise BertTfError(f"{source}: unknown hidden_act '{self.hidden_act}'; use one of "
                              f"{', '.join(_ACTIVATIONS)}.")
        eps = getattr(self, "layer_norm_eps", 1e-12)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0.0 < eps < 1.0:
            raise BertTfError(f"{source}: 'layer_norm_eps' must be a small positive number such "
                              f"as 1e-12, got {eps!r}.")
        for key, choices in (("position_embedding_type", POSITION_EMBEDDING_TYPES),
                             ("layer_norm_type", LAYER_NORM_TYPES)):
            value = getattr(self, key, choices[0])
            if value not in choices:
                raise BertTfError(f"{source}: unknown {key} {value!r}; use one of "
                                  f"{', '.join(choices)}.")

    def to_dict(self):
        """Serializes this instance to a Python dictionary."""
        return copy.deepcopy(self.__dict__)

    def to_json_string(self):
        """Serializes this instance to a JSON string."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel:
    """BERT: embeddings, a Transformer encoder and a pooler on the [CLS] token.

    Example:

    ```python
    input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
    input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
    token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])
    config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
        num_hidden_layers=8, num_attention_heads=8, intermediate_size=1024)
    model = modeling.BertModel(config=config, is_training=True,
        input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)
    pooled_output = model.get_pooled_output()  # [B, H]
    ```
    """

    def __init__(self,
                 config,
                 is_training,
                 input_ids,
                 input_mask=None,
                 token_type_ids=None,
                 use_one_hot_embeddings=False,
                 scope=None,
                 compute_dtype=tf.float32,
                 head_mask=None,
                 recompute_grad=False,
                 position_ids=None,
                 pooled_positions=None,
                 padding_free=False,
                 pooled_only=False,
                 sequence_positions=None):
        """Builds the model in the current graph.

        Args:
          config: `BertConfig`.
          is_training: True for training; False turns every dropout off.
          input_ids: int32/int64 Tensor [B, S], WordPiece ids.
          input_mask: optional int Tensor [B, S], 1 for real tokens, 0 for padding.
          token_type_ids: optional int Tensor [B, S], segment ids.
          use_one_hot_embeddings: look embeddings up with a one-hot matmul (faster
            on TPUs) instead of a gather.
          scope: variable scope, default "bert".
          compute_dtype: tf.float32, tf.bfloat16 or tf.float16. Variables stay
            float32; matmuls run in this dtype; layer norm and softmax in float32.
            Outputs are in this dtype.
          head_mask: optional float array or Tensor [num_hidden_layers, N] or [N]
            (same for every layer) multiplying each head's attention
            probabilities after softmax and dropout: 0 removes a head, 1 keeps it.
          recompute_grad: recompute each encoder layer's activations in the backward pass
            instead of keeping them (see `transformer_model`): less memory, same gradients.
          position_ids: optional int Tensor [B, S], each token's position. For packed rows
            (several examples one after another, each from position 0): each token then
            attends only to the tokens of its own example
            (`create_attention_mask_from_packed_positions`). None: 0..S-1 in every row.
          pooled_positions: optional int Tensor [B, K], the tokens the pooler reads (each
            packed example's [CLS]); `get_pooled_output` is then [B * K, H]. None: the
            first token of each row, [B, H].
          padding_free: run the encoder layers on the real tokens only
            (`padding_free_index(input_mask)`, see `transformer_model`): the same outputs at
            real tokens, zeros at padding in the sequence outputs, and no dense-layer work
            for padding. Dynamic shapes: not for TPUs or XLA.

        Raises:
          BertTfError: if the config is inconsistent or the sequence is longer
            than `max_position_embeddings`.
        """
        config = copy.deepcopy(config)
        config.validate()
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0

        input_shape = get_shape_list(input_ids, expected_rank=2, name="input_ids")
        batch_size, seq_length = input_shape[0], input_shape[1]
        if input_mask is None:
            input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)
        position_embedding_type = getattr(config, "position_embedding_type", "absolute")
        layer_norm_eps = getattr(config, "layer_norm_eps", 1e-12)

        with precision.compute_dtype_scope(compute_dtype, scope, default_name="bert"):
            with tf1.variable_scope("embeddings"):
                self.embedding_output, self.embedding_table = embedding_lookup(
                    input_ids=input_ids,
                    vocab_size=config.vocab_size,
                    embedding_size=config.hidden_size,
                    initializer_range=config.initializer_range,
                    word_embedding_name="word_embeddings",
                    use_one_hot_embeddings=use_one_hot_embeddings)
                self.embedding_output = embedding_postprocessor(
                    input_tensor=self.embedding_output,
                    use_token_type=True,
                    token_type_ids=token_type_ids,
                    token_type_vocab_size=config.type_vocab_size,
                    token_type_embedding_name="token_type_embeddings",
                    # Relative types encode position inside attention instead.
                    use_position_embeddings=position_embedding_type == "absolute",
                    position_embedding_name="position_embeddings",
                    initializer_range=config.initializer_range,
                    max_position_embeddings=config.max_position_embeddings,
                    dropout_prob=config.hidden_dropout_prob,
                    layer_norm_eps=layer_norm_eps,
                    position_ids=position_ids)

            with tf1.variable_scope("encoder"):
                if position_ids is None:
                    attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
                else:
                    attention_mask = create_attention_mask_from_packed_positions(position_ids,
                                                                                 input_mask)
                output_positions = None
                if _last_layer_shortens(pooled_only, sequence_positions,
                                        position_embedding_type):
                    output_positions = (tf.zeros([batch_size, 1], tf.int32)
                                        if pooled_positions is None
                                        else tf.cast(pooled_positions, tf.int32))
                    pooled_count = get_shape_list(output_positions, expected_rank=2,
                                                  name="pooled_positions")[1]
                    if sequence_positions is not None:
                        output_positions = tf.concat(
                            [output_positions, tf.cast(sequence_positions, tf.int32)], axis=1)
                # The probabilities are graph tensors the encoder builds anyway;
                # keeping references to them costs nothing unless they are fetched.
                self.all_encoder_layers, self.all_attention_probs = transformer_model(
                    input_tensor=self.embedding_output,
                    attention_mask=attention_mask,
                    hidden_size=config.hidden_size,
                    num_hidden_layers=config.num_hidden_layers,
                    num_attention_heads=config.num_attention_heads,
                    intermediate_size=config.intermediate_size,
                    intermediate_act_fn=get_activation(config.hidden_act),
                    hidden_dropout_prob=config.hidden_dropout_prob,
                    attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                    initializer_range=config.initializer_range,
                    do_return_all_layers=True,
                    layer_norm_eps=layer_norm_eps,
                    layer_norm_type=getattr(config, "layer_norm_type", "post"),
                    position_embedding_type=position_embedding_type,
                    max_position_embeddings=config.max_position_embeddings,
                    head_mask=head_mask,
                    do_return_attention_probs=True,
                    recompute_grad=recompute_grad,
                    token_index=padding_free_index(input_mask) if padding_free else None,
                    output_positions=output_positions)
            self.sequence_output = last_layer = self.all_encoder_layers[-1]
            if output_positions is not None and sequence_positions is not None:
                # The last layer's rows: the pooled positions, then `sequence_positions`.
                self.sequence_output = last_layer[:, pooled_count:]
            elif sequence_positions is not None:
                self.sequence_output = tf.gather(last_layer, sequence_positions, batch_dims=1)

            # The pooler takes the hidden state of the first token ([CLS]), which
            # pre-training's next-sentence objective has trained to summarise the pair.
            with tf1.variable_scope("pooler"):
                if output_positions is not None:  # The last layer's rows start with them.
                    first_token_tensor = tf.reshape(last_layer[:, :pooled_count],
                                                    [-1, config.hidden_size])
                elif pooled_positions is None:
                    first_token_tensor = last_layer[:, 0, :]
                else:
                    first_token_tensor = tf.reshape(
                        tf.gather(last_layer, pooled_positions, batch_dims=1),
                        [-1, config.hidden_size])
                self.pooled_output = dense_layer(
                    first_token_tensor, config.hidden_size, activation=tf.tanh,
                    kernel_initializer=create_initializer(config.initializer_range),
                    name="dense")

    def get_pooled_output(self):
        """Tanh-pooled [CLS] output, [B, H]."""
        return self.pooled_output

    def get_sequence_output(self):
        """Final encoder layer, [B, S, H] ([B, K, H] with `pooled_only`, [B, P, H] with
        `sequence_positions`)."""
        return self.sequence_output

    def get_all_encoder_layers(self):
        """Every encoder layer's output, a list of num_hidden_layers [B, S, H] Tensors.

        With `layer_norm_type` "pre" the last one is after the final layer norm
        and the others are the un-normalised residual stream."""
        return self.all_encoder_layers

    def get_all_attention_probs(self):
        """Every layer's self-attention probabilities, a list of num_hidden_layers
        [B, N, F, T] Tensors (F = T = S) in the compute dtype, after dropout and
        `head_mask`, as used to weight the values (Hugging Face `attentions`)."""
        return self.all_attention_probs

    def get_embedding_output(self):
        """Word + position + token-type embeddings after layer norm and dropout, [B, S, H].

        For relative `position_embedding_type`s no position embedding is added here."""
        return self.embedding_output

    def get_embedding_table(self):
        """The word embedding table [V, H] (in the compute dtype)."""
        return self.embedding_table


def gelu(x):
    """Gaussian Error Linear Unit, exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))


def gelu_tanh(x):
    """GELU, tanh approximation (`gelu_new` in Hugging Face, the original `gelu`)."""
    cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))
    return x * cdf


def get_activation(activation_string):
    """Maps an activation name to a function.

    Args:
      activation_string: "gelu" (exact erf form), "gelu_new" / "gelu_tanh" (tanh
        approximation), "relu", "silu" / "swish" (x * sigmoid(x)), "tanh",
        "linear"; None or "" mean linear. A
        non-string is returned unchanged (assumed to be a function already).

    Returns:
      A function, or None for linear.

    Raises:
      ValueError: for an unknown name.
    """
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    act = activation_string.lower()
    if act == "linear":
        return None
    if act == "relu":
        return tf.nn.relu
    if act == "gelu":
        return gelu
    if act in ("gelu_new", "gelu_tanh"):
        return gelu_tanh
    if act in ("silu", "swish"):
        return tf.nn.silu  # x * sigmoid(x)
    if act == "tanh":
        return tf.tanh
    raise ValueError(f"Unsupported activation: {act}; use one of {', '.join(_ACTIVATIONS)}.")


def get_assignment_map_from_checkpoint(tvars, init_checkpoint, grown=None):
    """Maps the graph's variables to same-named checkpoint variables.

    Args:
      tvars: list of variables (usually `tf.compat.v1.trainable_variables()`).
      init_checkpoint: checkpoint prefix, e.g. `.../bert_model.ckpt`.
      grown: optional list; tables the model has more rows of than the checkpoint (more
        positions, a bigger vocabulary: `table_growth.table_kind`) are appended to it as
        (checkpoint name, variable, checkpoint shape) instead of raising, and left out of
        the map (`table_growth.init_grown_tables` initializes them).

    Returns:
      (assignment_map, initialized_variable_names): an OrderedDict
      checkpoint-name -> graph-name for `tf.compat.v1.train.init_from_checkpoint`,
      and a dict holding every initialized name (with and without ":0"), grown tables
      included.

    Raises:
      BertTfError: if the checkpoint cannot be read, or a variable present in
        both has a different shape (names the variable and both shapes), or a table of
        the checkpoint is longer than the model's.
    """
    name_to_variable = collections.OrderedDict()
    for var in tvars:
        name = var.name
        m = re.match("^(.*):\\d+$", name)
        if m is not None:
            name = m.group(1)
        name_to_variable[name] = var

    try:
        init_vars = tf.train.list_variables(init_checkpoint)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
        raise BertTfError(f"--init_checkpoint: cannot read checkpoint '{init_checkpoint}' "
                          f"({str(e).splitlines()[0]}); pass a checkpoint prefix such as "
                          "'.../bert_model.ckpt' whose .index file exists.") from None

    assignment_map = collections.OrderedDict()
    initialized_variable_names = {}
    for name, shape in init_vars:
        if name not in name_to_variable:
            continue
        variable = name_to_variable[name]
        grows = table_growth.check_growth(name, shape, variable.shape.as_list(),
                                          init_checkpoint)
        if grows and grown is None:
            raise table_growth.shape_error(name, shape, variable.shape.as_list(),
                                           init_checkpoint)
        if grows:
            grown.append((name, variable, list(shape)))
        else:
            assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
    return assignment_map, initialized_variable_names


def init_from_checkpoint(init_checkpoint, tvars=None, log=True, growth=None):
    """Initializes same-named graph variables from `init_checkpoint`.

    Only changes the variables' initializers, so a session that restores a
    later checkpoint of its own is unaffected. With `growth`, a position or vocabulary
    table longer than the checkpoint's starts from the checkpoint's rows, its new rows as `growth`
    says (see `bert_tf.table_growth`), with one log line saying what was extended.

    Args:
      init_checkpoint: checkpoint prefix.
      tvars: variables to consider; default all trainable variables.
      log: log one line saying how many variables were initialized (`restore_summary`).
      growth: `table_growth.GrowthOptions` for the new rows of grown tables; None (the
        original's behaviour) makes any table of another size an error.

    Returns:
      (initialized, not_initialized): two lists of variable names.
    """
    if tvars is None:
        tvars = tf1.trainable_variables()
    grown = [] if growth is not None else None
    assignment_map, initialized = get_assignment_map_from_checkpoint(tvars, init_checkpoint,
                                                                     grown)
    tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
    extended = table_growth.init_grown_tables(init_checkpoint, grown or [], growth)
    if extended:
        logging.info("%s", extended)
    done, missing = [], []
    for var in tvars:
        (done if var.name in initialized else missing).append(var.name)
    if log:
        encoder_missing = [name for name in missing if name.startswith("bert/")]
        # Only encoder variables missing from the checkpoint suggest the wrong checkpoint.
        log_fn = logging.warning if encoder_missing else logging.info
        log_fn("%s", restore_summary(init_checkpoint, done, missing))
    return done, missing


# How many variable names a restore summary lists before "and N more".
_MAX_NAMES_LOGGED = 10


def restore_summary(init_checkpoint, initialized, missing):
    """One line saying how many variables `init_checkpoint` initialized and which it lacks.

    Variables outside the encoder's `bert/` scope (a fine-tuning head) are expected to be
    missing from a pre-trained checkpoint and are said to be; at most `_MAX_NAMES_LOGGED`
    names are listed, then "and N more".
    """
    total = len(initialized) + len(missing)
    line = f"Initialized {len(initialized)} of {total} variables from {init_checkpoint}"
    if not missing:
        return line + "."

    def names(variables):
        shown = ", ".join(re.sub(r":\d+$", "", name) for name in variables[:_MAX_NAMES_LOGGED])
        more = len(variables) - _MAX_NAMES_LOGGED
        return shown + (f" and {more} more" if more > 0 else "")

    encoder_missing = [name for name in missing if name.startswith("bert/")]
    if not encoder_missing:
        return (f"{line}; the other {len(missing)} (the task head: {names(missing)}) start "
                "from random values, as expected for a pre-trained checkpoint.")
    return (f"{line}; not in the checkpoint, so starting from random values: "
            f"{names(missing)}.")


# Dropout draws one 16-bit number per element: half of the Philox work of a float32 draw,
# which dominates the cost of dropout on the [B, N, F, T] attention probabilities.
_DROPOUT_LEVELS = 1 << 16


def dropout(input_tensor, dropout_prob):
    """Dropout with drop probability `dropout_prob` (not keep probability); no-op at 0.

    Each element is zeroed with probability p = round(dropout_prob * 65536) / 65536 (0.1 ->
    0.100006) and the others are scaled by 1 / (1 - p), so in float32 the expectation is the
    input (a bfloat16 scale is rounded, as in `tf.nn.dropout`). The mask comes from a
    stateless Philox draw keyed by a per-op seed that a stateful op draws on every run, so a
    graph-level seed (`tf.compat.v1.set_random_seed`) makes the sequence of masks
    reproducible, as with `tf.nn.dropout`.

    Args:
      input_tensor: float Tensor of any shape.
      dropout_prob: float in [0, 1), or None.

    Returns:
      Tensor of the same shape and dtype.
    """
    kept, scale = dropout_unscaled(input_tensor, dropout_prob)
    return kept if scale == 1.0 else kept * tf.constant(scale, kept.dtype)


def dropout_unscaled(input_tensor, dropout_prob):
    """`dropout` without its rescaling: (kept, scale), where dropout = kept * scale.

    For a caller that can apply `scale` to a smaller tensor downstream (attention scales
    the [B, N, F, D] context instead of the [B, N, F, T] probabilities); the gradient then
    needs one pass over the big tensor instead of two.

    Returns:
      (Tensor like `input_tensor` with the dropped elements zeroed, Python float scale);
      (input_tensor, 1.0) when `dropout_prob` is None or 0.

    Raises:
      ValueError: if `dropout_prob` is outside [0, 1).
    """
    if dropout_prob is None or dropout_prob == 0.0:
        return input_tensor, 1.0
    if not 0.0 <= dropout_prob < 1.0:
        raise ValueError(f"dropout_prob must be in [0, 1), got {dropout_prob}.")
    # Below 1/131072 nothing is dropped; above 1 - 1/131072 one value in 65536 is kept.
    threshold = min(int(round(dropout_prob * _DROPOUT_LEVELS)), _DROPOUT_LEVELS - 1)
    if threshold == 0:
        return input_tensor, 1.0
    with tf1.name_scope("dropout"):
        keep = random_uint16(tf.shape(input_tensor), input_tensor.shape) >= threshold
        kept = tf.where(keep, input_tensor, tf.zeros([], input_tensor.dtype))
    return kept, _DROPOUT_LEVELS / (_DROPOUT_LEVELS - threshold)


def random_uint16(shape, static_shape=None):
    """Uniform random uint16 Tensor of `shape`, new on every run.

    Args:
      shape: int32 1-D Tensor (the dynamic shape).
      static_shape: optional `tf.TensorShape` of the result, to keep static dimensions.

    Returns:
      uint16 Tensor of `shape`: two values from every uint32 of a stateless Philox draw,
      keyed by a seed that a stateful op draws on every run (and that follows the
      graph-level seed), or inside `dropout_key_scope` by that scope's key.
    """
    seed = _next_dropout_seed()
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform([(size + 1) // 2], seed, dtype=tf.uint32, minval=None,
                                       maxval=None)
    # A prefix slice along dimension 0 aliases the buffer: no copy for an even or odd size.
    values = tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size], shape)
    if static_shape is not None:
        values.set_shape(static_shape)
    return values


# Per thread (MirroredStrategy builds each replica in its own thread): the innermost
# `dropout_key_scope`'s [key, number of draws so far], or nothing.
_dropout_keys = threading.local()


@contextlib.contextmanager
def dropout_key_scope(key):
    """Makes the random draws built inside stateless functions of `key` and their order.

    Building the same ops twice inside two scopes of one `key` Tensor gives the same masks
    on every run: what recomputing a layer in the backward pass needs (`recompute_layer`).

    Args:
      key: int32 Tensor [2], e.g. a row of `random_keys`.
    """
    stack = getattr(_dropout_keys, "stack", None)
    if stack is None:
        stack = _dropout_keys.stack = []
    stack.append([portable_seed(key), 0])
    try:
        yield
    finally:
        stack.pop()


def random_keys(count):
    """int32 Tensor [count, 2]: `count` keys for `dropout_key_scope`, new on every run.

    One stateful op, so the graph-level seed makes them reproducible; inside a
    `dropout_key_scope` a stateless draw from its key, so the keys are a function of it."""
    if not getattr(_dropout_keys, "stack", None):
        return tf1.random.uniform([count, 2], 0, tf.int32.max, dtype=tf.int32)
    return tf.random.stateless_uniform([count, 2], _next_dropout_seed(), 0, tf.int32.max,
                                       dtype=tf.int32)


def _next_dropout_seed():
    """int32 [2] seed of the next random draw: from the innermost `dropout_key_scope`
    (its key folded with the draw's number), else a stateful op's draw."""
    stack = getattr(_dropout_keys, "stack", None)
    if not stack:
        return tf1.random.uniform([2], 0, tf.int32.max, dtype=tf.int32)
    entry = stack[-1]
    entry[1] += 1
    return portable_seed(tf.random.experimental.stateless_fold_in(entry[0], entry[1]))


def portable_seed(seed):
    """`seed` (int32 [2]) with its sign bits cleared: TensorFlow's kernels and XLA turn a
    negative seed into different Philox keys, a non-negative one into the same, so the masks
    of a step do not depend on whether XLA compiles it."""
    return tf.bitwise.bitwise_and(seed, tf.int32.max)


def recompute_layer(layer_fn, inputs):
    """Runs `layer_fn(*inputs)` keeping none of its activations for the backward pass.

    The backward pass builds `layer_fn` again (reusing its variables, in the same variable
    scope) and differentiates that copy, so memory holds one layer's activations at a time
    instead of every layer's, for one more forward pass of compute. Graph mode; the
    variables `layer_fn` gets with `tf.compat.v1.get_variable` must be resource variables
    (the TF 2 default). `layer_fn` must compute the same values twice: its dropout takes
    its key from an input through `dropout_key_scope`, so both passes draw the same masks
    and the gradients are those of the plain graph.

    Args:
      layer_fn: function of `inputs` -> (output Tensor, extras): the output is
        differentiated; `extras` (any structure, e.g. attention probabilities) are the
        forward pass's values, returned as they are (no gradient through the recomputation).
      inputs: list of Tensors; floating ones get gradients, integer ones (keys) get None.

    Returns:
      (output, extras).
    """
    scope = tf1.get_variable_scope()
    extras = []

    @tf.custom_gradient
    def forward(*args):
        output, extra = layer_fn(*args)
        extras.append(extra)

        def grad_fn(output_grad, variables=None):
            variables = list(variables or [])
            # A data dependency on the incoming gradient (XLA drops control dependencies)
            # keeps the recomputation in the backward pass, and keeps grappler from merging
            # it with the forward pass's identical ops. It adds 0 unless that gradient is NaN.
            first = tf.reduce_max(tf.reshape(output_grad, [-1])[:1])
            is_nan = tf.math.is_nan(first)
            replay = [arg + tf.cast(is_nan, arg.dtype) if not arg.dtype.is_floating else
                      arg + tf.where(is_nan, tf.constant(float("nan"), arg.dtype),
                                     tf.zeros([], arg.dtype))
                      for arg in args]
            floating = [arg for arg in replay if arg.dtype.is_floating]
            with tf.GradientTape() as tape:
                tape.watch(floating + variables)
                with tf1.variable_scope(scope, reuse=True):
                    recomputed, _ = layer_fn(*replay)
            grads = tape.gradient(recomputed, floating + variables, output_gradients=output_grad,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            float_grads = iter(grads[:len(floating)])
            input_grads = [next(float_grads) if arg.dtype.is_floating else None
                           for arg in replay]
            if not variables:
                return input_grads
            return input_grads, grads[len(floating):]

        return output, grad_fn

    output = forward(*inputs)
    return output, extras[0]


def layer_norm(input_tensor, name=None, epsilon=1e-12):
    """Layer normalization over the last axis, variables `<name>/gamma` and `<name>/beta`.

    Statistics are computed in float32 whatever the input dtype (bf16/fp16
    variance underflows); the result is returned in the input dtype.

    Args:
      input_tensor: Tensor [..., H].
      name: variable scope, default "LayerNorm".
      epsilon: added to the variance.

    Returns:
      Tensor [..., H], same dtype as the input.
    """
    with tf1.variable_scope(name, default_name="LayerNorm"):
        dtype = input_tensor.dtype
        x = tf.cast(input_tensor, tf.float32)
        width = x.shape[-1]
        # Trainable=True variables are cast on read under mixed precision; ask for
        # float32 explicitly so the norm runs in float32.
        beta = get_variable("beta", [width], dtype=tf.float32,
                                initializer=tf1.zeros_initializer())
        gamma = get_variable("gamma", [width], dtype=tf.float32,
                                 initializer=tf1.ones_initializer())
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        inv = tf.math.rsqrt(variance + epsilon) * gamma
        output = x * inv + (beta - mean * inv)
        return tf.cast(output, dtype)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None, epsilon=1e-12):
    """Layer norm (variance + `epsilon`) followed by dropout."""
    return dropout(layer_norm(input_tensor, name, epsilon), dropout_prob)


def create_initializer(initializer_range=0.02):
    """A truncated normal initializer with stddev `initializer_range`."""
    return tf1.truncated_normal_initializer(stddev=initializer_range)


@contextlib.contextmanager
def variables_owned_by_caller():
    """A block in which the builders may run in TensorFlow 2 code (eagerly or in a `tf.function`).

    For `bert_tf.tf2`, whose variable creator hands every `get_variable` the variable its
    module created once; outside such a block they would make new random variables silently.
    """
    global _owned_variable_blocks
    _owned_variable_blocks += 1
    try:
        yield
    finally:
        _owned_variable_blocks -= 1


def get_variable(name, *args, **kwargs):
    """`tf.compat.v1.get_variable`, refused in TensorFlow 2 code outside a `bert_tf.tf2` module.

    In a graph (`tf.compat.v1`, the Estimator) it is `get_variable` itself. Eagerly, or in a
    `tf.function` of an eager program, `get_variable` makes a fresh random variable on every
    call, which would silently run an untrained model.

    Raises:
      BertTfError: in eager code outside `variables_owned_by_caller`.
    """
    if _owned_variable_blocks == 0 and tf1.executing_eagerly_outside_functions():
        raise BertTfError(
            f"bert_tf.modeling builds graph-mode models and would make a new random variable "
            f"'{name}' on every eager call; in TensorFlow 2 code use bert_tf.tf2.BertEncoder / "
            "TransformerEncoder (or bert_tf.keras.BertEncoderLayer), or build inside "
            "`with tf.Graph().as_default():`.")
    return tf1.get_variable(name, *args, **kwargs)


def dense_layer(input_tensor, units, activation=None, kernel_initializer=None, name="dense"):
    """A fully connected layer: activation(x @ kernel + bias).

    Variables `<name>/kernel` [in, units] and `<name>/bias` [units], in the
    Google checkpoint layout.

    Args:
      input_tensor: Tensor [M, in] (or [..., in]: flattened to 2-D and back).
      units: output width.
      activation: function or None.
      kernel_initializer: initializer, default `create_initializer()`.
      name: variable scope.

    Returns:
      Tensor [M, units] (or [..., units]) in the input dtype.
    """
    shape = get_shape_list(input_tensor, name=name + "/input")
    x = input_tensor if len(shape) == 2 else tf.reshape(input_tensor, [-1, shape[-1]])
    with tf1.variable_scope(name):
        kernel = get_variable("kernel", [shape[-1], units], dtype=input_tensor.dtype,
                                  initializer=kernel_initializer or create_initializer())
        bias = get_variable("bias", [units], dtype=input_tensor.dtype,
                                initializer=tf1.zeros_initializer())
        output = tf.nn.bias_add(tf.matmul(x, kernel), bias)
        if activation is not None:
            output = activation(output)
    if len(shape) != 2:
        output = tf.reshape(output, shape[:-1] + [units])
    return output


def gather_rows(table, indices):
    """`tf.gather(table, indices)` of a variable's value (a plain Gather, not ResourceGather).

    A ResourceGather switches its variable into TF's copy-on-read mode for the rest of the
    session: from then on every read (the optimizer's weight decay, the checkpoint saver)
    copies the whole table and every update first copies it too. For BERT's word embeddings
    that is 2-3 extra passes over [V, H] floats per training step. Reading the value first
    gathers the same rows and gives the same IndexedSlices gradient.

    Args:
      table: [V, ...] variable (or tensor).
      indices: int Tensor of any shape, values in [0, V).

    Returns:
      Tensor indices.shape + table.shape[1:].
    """
    return tf.gather(tf.convert_to_tensor(table), indices)


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
    """Looks up word embeddings for ids.

    Args:
      input_ids: int Tensor [B, S] (or [B, S, 1]).
      vocab_size: V.
      embedding_size: H.
      initializer_range: stddev of the table initializer.
      word_embedding_name: variable name of the table.
      use_one_hot_embeddings: one-hot matmul instead of gather (TPU-friendly).

    Returns:
      (output [B, S, H], embedding_table [V, H]), both in the scope's compute dtype (the
      table is the float32 variable itself in float32 graphs).
    """
    # The original accepts [B, S] and [B, S, 1]; normalise to [B, S].
    if input_ids.shape.ndims == 3:
        input_ids = tf.squeeze(input_ids, axis=[2])
    input_shape = get_shape_list(input_ids, expected_rank=2, name="input_ids")

    compute_dtype = _scope_compute_dtype()
    stored_table = get_variable(
        name=word_embedding_name, shape=[vocab_size, embedding_size],
        initializer=create_initializer(initializer_range), dtype=tf.float32)
    # In the compute dtype, for the one-hot matmul and tied output layers; a session or a
    # tf.function that never uses it never runs it.
    embedding_table = precision.read_as(stored_table, compute_dtype)

    if use_one_hot_embeddings:
        flat_input_ids = tf.reshape(input_ids, [-1])
        one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size,
                                       dtype=embedding_table.dtype)
        output = tf.matmul(one_hot_input_ids, embedding_table)
    elif precision.casts_every_step():
        # Cast the B*S gathered rows, not the whole [V, H] table on every step.
        output = tf.cast(gather_rows(stored_table, input_ids), compute_dtype)
    else:
        output = gather_rows(embedding_table, input_ids)
    output = tf.reshape(output, input_shape + [embedding_size])
    return output, embedding_table


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1,
                            layer_norm_eps=1e-12,
                            position_ids=None):
    """Adds token-type and position embeddings, then layer norm and dropout.

    Args:
      input_tensor: float Tensor [B, S, H], word embeddings.
      use_token_type: add embeddings of `token_type_ids`.
      token_type_ids: int Tensor [B, S]; required if `use_token_type`.
      token_type_vocab_size: rows of the token-type table.
      token_type_embedding_name: variable name of that table.
      use_position_embeddings: add learned absolute position embeddings.
      position_embedding_name: variable name of the position table.
      initializer_range: stddev of the initializers.
      max_position_embeddings: rows of the position table; S must not exceed it.
      dropout_prob: dropout after the layer norm.
      layer_norm_eps: epsilon of the layer norm.
      position_ids: optional int Tensor [B, S], each token's row of the position table
        (packed examples restart at 0); None: 0..S-1 in every row.

    Returns:
      float Tensor [B, S, H].

    Raises:
      BertTfError: if S is known and longer than `max_position_embeddings`.
    """
    input_shape = get_shape_list(input_tensor, expected_rank=3, name="input_tensor")
    batch_size, seq_length, width = input_shape
    output = input_tensor

    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be specified if `use_token_type` is True.")
        token_type_table = get_variable(
            name=token_type_embedding_name, shape=[token_type_vocab_size, width],
            initializer=create_initializer(initializer_range), dtype=input_tensor.dtype)
        output += gather_rows(token_type_table, token_type_ids)

    if use_position_embeddings:
        # Packed rows' positions come from their records, each below S.
        checks = ([] if position_ids is not None else
                  _check_seq_length(seq_length, max_position_embeddings))
        full_position_embeddings = get_variable(
            name=position_embedding_name, shape=[max_position_embeddings, width],
            initializer=create_initializer(initializer_range), dtype=input_tensor.dtype)
        if position_ids is not None:
            output += gather_rows(full_position_embeddings, position_ids)
        else:
            with tf.control_dependencies(checks):
                # Positions are 0..S-1 in every row: slice once and broadcast over B.
                position_embeddings = tf.slice(full_position_embeddings, [0, 0],
                                               [seq_length, -1])
            output += tf.expand_dims(position_embeddings, 0)

    return layer_norm_and_dropout(output, dropout_prob, epsilon=layer_norm_eps)


def _check_seq_length(seq_length, max_position_embeddings):
    """Checks S <= max_position_embeddings: raises now if S is static, else returns assert ops.

    Raises:
      BertTfError: if S is a Python int larger than `max_position_embeddings`.
    """
    if isinstance(seq_length, int):
        if seq_length > max_position_embeddings:
            raise BertTfError(
                f"sequence length {seq_length} is longer than max_position_embeddings "
                f"({max_position_embeddings}) of the BERT config; use --max_seq_length of at "
                f"most {max_position_embeddings}.")
        return []
    return [tf.debugging.assert_less_equal(
        seq_length, max_position_embeddings,
        message="sequence longer than max_position_embeddings of the BERT config")]


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """Creates a 3-D attention mask from a 2-D padding mask.

    Args:
      from_tensor: Tensor [B, F] or [B, F, ...] (only its shape is used).
      to_mask: int Tensor [B, T], 1 for tokens that may be attended to.

    Returns:
      float32 Tensor [B, F, T].
    """
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3], name="from_tensor")
    batch_size, from_seq_length = from_shape[0], from_shape[1]
    to_shape = get_shape_list(to_mask, expected_rank=2, name="to_mask")
    to_seq_length = to_shape[1]
    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
    # Every query position sees the same keys, so broadcasting ones over F suffices.
    broadcast_ones = tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32)
    return broadcast_ones * to_mask


def create_attention_mask_from_packed_positions(position_ids, input_mask):
    """The attention mask of packed rows: each token attends to its own example only.

    An example starts at each real token whose position is 0, so the k-th example of a row
    is the tokens between its k-th and (k+1)-th start; padding attends to and is seen by
    nothing that matters (its outputs are ignored).

    Args:
      position_ids: int Tensor [B, S], positions restarting at 0 for each example.
      input_mask: int Tensor [B, S], 1 for real tokens, 0 for padding.

    Returns:
      float32 Tensor [B, S, S]: 1 where query and key belong to the same example.
    """
    is_real = tf.cast(input_mask, tf.int32)
    starts = tf.cast(tf.equal(position_ids, 0), tf.int32) * is_real
    example_ids = tf.cumsum(starts, axis=1) * is_real  # 1..k per row; 0 on padding.
    same = tf.equal(example_ids[:, :, None], example_ids[:, None, :])
    return tf.cast(tf.logical_and(same, example_ids[:, None, :] > 0), tf.float32)


def padding_free_index(input_mask):
    """The positions of the real tokens in the flattened batch, for `transformer_model`'s
    `token_index`.

    Args:
      input_mask: int Tensor [B, S], 1 for real tokens, 0 for padding.

    Returns:
      int32 Tensor [K, 1]: the indices into [B*S] where `input_mask` is 1, ascending
      (K = the number of real tokens in the batch).
    """
    return tf.cast(tf.where(tf.not_equal(tf.reshape(input_mask, [-1]), 0)), tf.int32)


def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None,
                    head_mask=None,
                    position_embedding_type="absolute",
                    max_position_embeddings=512,
                    do_return_attention_probs=False,
                    token_index=None):
    """Multi-headed scaled dot-product attention from `from_tensor` to `to_tensor`.

    Self-attention when both are the same tensor. Variables `query`, `key`,
    `value` (kernel [H_from or H_to, N*D], bias [N*D]) in the current scope,
    plus `distance_embedding` [2 * max_position_embeddings - 1, D] for the
    relative position types. Scores are computed in the input dtype; the mask
    is added and softmax taken in float32.

    Args:
      from_tensor: float Tensor [B, F, H_from], or [B*F, H_from] with
        `batch_size` and `from_seq_length` given.
      to_tensor: float Tensor [B, T, H_to], or [B*T, H_to] with `batch_size`
        and `to_seq_length` given.
      attention_mask: optional Tensor [B, F, T] of 1 (attend) / 0 (masked).
      num_attention_heads: N.
      size_per_head: D.
      query_act, key_act, value_act: activations of the projections.
      attention_probs_dropout_prob: dropout on the attention probabilities.
      initializer_range: stddev of the kernel initializers.
      do_return_2d_tensor: return [B*F, N*D] instead of [B, F, N*D].
      batch_size, from_seq_length, to_seq_length: needed for 2-D inputs.
      head_mask: optional float array or Tensor [N] multiplying each head's
        probabilities after softmax and dropout (Hugging Face semantics).
      position_embedding_type: "absolute" (plain attention), or "relative_key" /
        "relative_key_query": Hugging Face's learned relative positions, scores
        q_f . k_t + q_f . d(f - t) (+ k_t . d(f - t)), all divided by sqrt(D),
        where d is a row of `distance_embedding`. F and T must not exceed
        `max_position_embeddings`.
      max_position_embeddings: P, sizes the distance table (distances -(P-1)..P-1).
      do_return_attention_probs: also return the probabilities.
      token_index: optional int32 Tensor [K, 1], self-attention over unpadded rows: the
        2-D `from_tensor` and `to_tensor` (the same tensor) are [K, H], the rows at these
        positions of [B*F] (`padding_free_index`). The projections run on the K rows; only the
        scores see the padded [B, N, F, T] layout (padding rows zero, masked out by
        `attention_mask`); the result is [K, N*D].

    Returns:
      float Tensor [B, F, N*D], or [B*F, N*D] if `do_return_2d_tensor` ([K, N*D] with
      `token_index`); with
      `do_return_attention_probs`, a pair (that Tensor, probabilities [B, N, F, T]
      in the dtype of the values, after dropout and `head_mask`).

    Raises:
      ValueError: on inconsistent ranks or missing sizes for 2-D inputs, an
        unknown `position_embedding_type` or a `head_mask` that is not [N].
      BertTfError: if F or T is static and longer than `max_position_embeddings`
        for a relative position type.
    """
    if position_embedding_type not in POSITION_EMBEDDING_TYPES:
        raise ValueError(f"Unknown position_embedding_type {position_embedding_type!r}; use one "
                         f"of {', '.join(POSITION_EMBEDDING_TYPES)}.")
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3], name="from_tensor")
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3], name="to_tensor")
    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")
    if len(from_shape) == 3:
        batch_size, from_seq_length, to_seq_length = from_shape[0], from_shape[1], to_shape[1]
    elif batch_size is None or from_seq_length is None or to_seq_length is None:
        raise ValueError("When passing in rank 2 tensors to attention_layer, the values for "
                         "`batch_size`, `from_seq_length`, and `to_seq_length` must all be "
                         "specified.")

    # Scalar dimensions referenced here: B, F, T, N, D.
    from_tensor_2d = reshape_to_matrix(from_tensor)
    to_tensor_2d = reshape_to_matrix(to_tensor)
    init = create_initializer(initializer_range)
    width = num_attention_heads * size_per_head

    query_layer = dense_layer(from_tensor_2d, width, query_act, init, name="query")  # [B*F, N*D]
    key_layer = dense_layer(to_tensor_2d, width, key_act, init, name="key")  # [B*T, N*D]
    value_layer = dense_layer(to_tensor_2d, width, value_act, init, name="value")  # [B*T, N*D]

    def to_heads(tensor, seq_length):  # [B*S, N*D] (or [K, N*D]) -> [B, N, S, D]
        if token_index is not None:
            tensor = tf.scatter_nd(token_index, tensor, [batch_size * seq_length, width])
        tensor = tf.reshape(tensor, [batch_size, seq_length, num_attention_heads, size_per_head])
        return tf.transpose(tensor, [0, 2, 1, 3])

    query_layer = to_heads(query_layer, from_seq_length)
    key_layer = to_heads(key_layer, to_seq_length)
    value_layer = to_heads(value_layer, to_seq_length)

    # Scaling the query (B*F*N*D values) is cheaper than scaling the scores (B*N*F*T).
    scale = tf.cast(1.0 / math.sqrt(float(size_per_head)), query_layer.dtype)
    query_layer = query_layer * scale
    attention_scores = tf.matmul(query_layer, key_layer, transpose_b=True)  # [B, N, F, T]
    if position_embedding_type != "absolute":
        # Every term is linear in the query or the key, so scaling those equals
        # Hugging Face's division of the summed scores by sqrt(D).
        attention_scores += _relative_position_scores(
            query_layer, key_layer * scale if position_embedding_type == "relative_key_query"
            else None, from_seq_length, to_seq_length, size_per_head, max_position_embeddings,
            initializer_range)
    attention_scores = tf.cast(attention_scores, tf.float32)

    if attention_mask is not None:
        attention_mask = tf.expand_dims(tf.cast(attention_mask, tf.float32), axis=[1])  # [B,1,F,T]
        # -10000 rather than -inf: exp underflows to exactly 0 in float32, and a
        # fully masked row stays finite.
        attention_scores += (1.0 - attention_mask) * -10000.0

    attention_probs = tf.nn.softmax(attention_scores)  # [B, N, F, T], float32
    attention_probs, dropout_scale = dropout_unscaled(attention_probs,
                                                      attention_probs_dropout_prob)
    if dropout_scale != 1.0 and (do_return_attention_probs or value_layer.dtype != tf.float32):
        # Scaling the context instead is exact only in float32 (1/0.9 is not a bfloat16).
        attention_probs *= dropout_scale
        dropout_scale = 1.0
    if head_mask is not None:
        head_mask = tf.cast(head_mask, tf.float32)
        if head_mask.shape.ndims != 1:
            raise ValueError(f"attention_layer: head_mask must have shape [num_attention_heads] "
                             f"= [{num_attention_heads}], got {head_mask.shape}.")
        attention_probs *= tf.reshape(head_mask, [1, num_attention_heads, 1, 1])
    attention_probs = tf.cast(attention_probs, value_layer.dtype)

    context_layer = tf.matmul(attention_probs, value_layer)  # [B, N, F, D]
    if dropout_scale != 1.0:
        context_layer *= dropout_scale  # B*F*N*D values rather than B*N*F*T.
    context_layer = tf.transpose(context_layer, [0, 2, 1, 3])  # [B, F, N, D]
    if token_index is not None:
        context_layer = tf.gather_nd(
            tf.reshape(context_layer, [batch_size * from_seq_length, width]), token_index)
    elif do_return_2d_tensor:
        context_layer = tf.reshape(context_layer, [batch_size * from_seq_length, width])
    else:
        context_layer = tf.reshape(context_layer, [batch_size, from_seq_length, width])
    if do_return_attention_probs:
        return context_layer, attention_probs
    return context_layer


def _relative_position_scores(query_layer, key_layer, from_seq_length, to_seq_length,
                              size_per_head, max_position_embeddings, initializer_range):
    """The learned relative-position attention scores of Hugging Face BERT.

    Creates `distance_embedding` [2P - 1, D] in the current scope; row
    f - t + P - 1 is the vector d(f - t) for query position f and key position t.

    Args:
      query_layer: Tensor [B, N, F, D] (already scaled by 1/sqrt(D)).
      key_layer: Tensor [B, N, T, D] (scaled) for "relative_key_query", else None.
      from_seq_length, to_seq_length: F and T (ints or scalar Tensors).
      size_per_head: D.
      max_position_embeddings: P.
      initializer_range: stddev of the table initializer.

    Returns:
      Tensor [B, N, F, T]: q_f . d(f - t), plus k_t . d(f - t) when `key_layer` is given.
    """
    distance_table = get_variable(
        "distance_embedding", [2 * max_position_embeddings - 1, size_per_head],
        initializer=create_initializer(initializer_range), dtype=query_layer.dtype)
    checks = (_check_seq_length(from_seq_length, max_position_embeddings)
              + _check_seq_length(to_seq_length, max_position_embeddings))
    with tf.control_dependencies(checks):
        distance = (tf.expand_dims(tf.range(from_seq_length), 1)
                    - tf.expand_dims(tf.range(to_seq_length), 0))  # [F, T]
    distance_vectors = gather_rows(distance_table, distance + max_position_embeddings - 1)
    scores = tf.einsum("bnfd,ftd->bnft", query_layer, distance_vectors)  # [F, T, D] -> [B,N,F,T]
    if key_layer is not None:
        scores += tf.einsum("bntd,ftd->bnft", key_layer, distance_vectors)
    return scores


def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False,
                      layer_norm_eps=1e-12,
                      layer_norm_type="post",
                      position_embedding_type="absolute",
                      max_position_embeddings=512,
                      head_mask=None,
                      encoder_output=None,
                      encoder_attention_mask=None,
                      do_return_attention_probs=False,
                      recompute_grad=False,
                      token_index=None,
                      output_positions=None):
    """The multi-layer bidirectional Transformer encoder of "Attention is All You Need".

    Variables are created under `layer_{i}/...` in the current variable scope,
    in the Google BERT checkpoint layout. Activations stay 2-D [B*S, H] from the
    first layer to the last; only attention reshapes to 4-D.

    Each layer is self-attention (`attention/self`, `attention/output`), then,
    when `encoder_output` is given, cross-attention to it (`crossattention/self`,
    `crossattention/output`, as Hugging Face's BertLayer.crossattention), then
    the feed-forward block (`intermediate`, `output`). Each sub-layer has one
    LayerNorm (`<sub-layer>/output/LayerNorm`, or `output/LayerNorm` for the
    feed-forward block) whatever `layer_norm_type`; "pre" adds a final
    `LayerNorm` in the current scope.

    Args:
      input_tensor: float Tensor [B, S, H], or [B*S, H] (then `attention_mask`
        [B, S, S] is required to know B and S, and outputs are 2-D as well).
      attention_mask: optional Tensor [B, S, S], 1 where position i may attend
        to position j (see `create_attention_mask_from_input_mask`).
      hidden_size: H.
      num_hidden_layers: number of layers.
      num_attention_heads: N; must divide H.
      intermediate_size: I, width of the feed-forward layer.
      intermediate_act_fn: activation of the feed-forward layer.
      hidden_dropout_prob: dropout on each sub-layer's output.
      attention_probs_dropout_prob: dropout on attention probabilities.
      initializer_range: stddev of the kernel initializers.
      do_return_all_layers: return every layer's output instead of the last.
      layer_norm_eps: epsilon of every layer norm.
      layer_norm_type: "post" (BERT): x = LayerNorm(x + Sublayer(x)); or "pre":
        x = x + Sublayer(LayerNorm(x)) and one final LayerNorm on the last
        layer's output (earlier layers' outputs are returned un-normalised).
      position_embedding_type: "absolute" or "relative_key" /
        "relative_key_query" for the self-attention (see `attention_layer`;
        cross-attention always uses plain attention, as Hugging Face does).
      max_position_embeddings: sizes the relative distance table.
      head_mask: optional float array or Tensor [num_hidden_layers, N], or [N]
        for every layer, multiplying attention probabilities per head (layer
        i's row applies to its self- and cross-attention, as in Hugging Face).
      encoder_output: optional float Tensor [B, T, H_enc], or [B*T, H_enc] with
        `encoder_attention_mask` given; adds a cross-attention sub-layer per layer.
      encoder_attention_mask: optional Tensor [B, S, T], 1 where position i may
        attend to encoder position j; default all ones.
      do_return_attention_probs: also return the self-attention probabilities.
      recompute_grad: keep only each layer's input for the backward pass, which builds
        the layer again to differentiate it (`recompute_layer`): activation memory of one
        layer instead of all, for about one more forward pass. Same values and gradients
        (dropout masks included); no gradient reaches a `head_mask` Tensor.
      token_index: optional int32 Tensor [K, 1], the positions in [B*S] of the real tokens
        (`padding_free_index`): every layer then runs on those K rows only, and attention
        scatters them into [B, N, S, S] scores, so padding costs no dense-layer work. Real
        tokens' outputs are those of the padded computation; padding positions' outputs are
        0. `attention_mask` must mask padding keys out; not with `encoder_output`.
      output_positions: optional int Tensor [B, F], the positions whose last-layer outputs
        are wanted (e.g. [CLS] for a head that reads the pooled output). The last layer then
        computes its queries, attention output, feed-forward block and layer norms at those
        F positions of each row only; its keys and values still see every token, so those
        rows are the full computation's. Its output is [B, F, H] ([B*F, H] for a 2-D input),
        its attention probabilities [B, N, F, S]; earlier layers are unchanged. Absolute
        position embeddings only; not with `encoder_output`.

    Returns:
      Tensor [B, S, H] (the last layer; [B, F, H] with `output_positions`), or a list of
      num_hidden_layers such Tensors if `do_return_all_layers`; [B*S, H] for a 2-D input.
      With `do_return_attention_probs`, a pair (that, list of num_hidden_layers
      [B, N, S, S] self-attention probabilities).

    Raises:
      ValueError: if H is not a multiple of N, ranks are wrong, or a variant
        argument has an unknown value or shape.
    """
    if hidden_size % num_attention_heads != 0:
        raise ValueError(f"The hidden size ({hidden_size}) is not a multiple of the number of "
                         f"attention heads ({num_attention_heads})")
    if layer_norm_type not in LAYER_NORM_TYPES:
        raise ValueError(f"Unknown layer_norm_type {layer_norm_type!r}; use one of "
                         f"{', '.join(LAYER_NORM_TYPES)}.")
    pre_norm = layer_norm_type == "pre"
    attention_head_size = int(hidden_size / num_attention_heads)

    input_shape = get_shape_list(input_tensor, expected_rank=[2, 3], name="input_tensor")
    if len(input_shape) == 3:
        batch_size, seq_length, input_width = input_shape
    else:
        if attention_mask is None:
            raise ValueError("transformer_model: a 2-D input_tensor [batch*seq, hidden] needs "
                             "attention_mask [batch, seq, seq] to know batch and seq sizes.")
        mask_shape = get_shape_list(attention_mask, expected_rank=3, name="attention_mask")
        batch_size, seq_length = mask_shape[0], mask_shape[1]
        input_width = input_shape[1]

    # The residual connections need the input width to equal the hidden size.
    if input_width != hidden_size:
        raise ValueError(f"The width of the input tensor ({input_width}) != hidden size "
                         f"({hidden_size})")

    layer_head_masks = _head_mask_per_layer(head_mask, num_hidden_layers, num_attention_heads)
    if encoder_output is not None:
        encoder_shape = get_shape_list(encoder_output, expected_rank=[2, 3],
                                       name="encoder_output")
        if len(encoder_shape) == 3:
            encoder_seq_length = encoder_shape[1]
        elif encoder_attention_mask is None:
            raise ValueError("transformer_model: a 2-D encoder_output [batch*enc_seq, width] "
                             "needs encoder_attention_mask [batch, seq, enc_seq] to know enc_seq.")
        else:
            encoder_seq_length = get_shape_list(encoder_attention_mask, expected_rank=3,
                                                name="encoder_attention_mask")[2]
        encoder_output = reshape_to_matrix(encoder_output)  # [B*T, H_enc]
    if token_index is not None and encoder_output is not None:
        raise ValueError("transformer_model: token_index (padding-free layers) works with "
                         "self-attention only, not with encoder_output.")
    if output_positions is not None and (encoder_output is not None
                                         or position_embedding_type != "absolute"):
        raise ValueError("transformer_model: output_positions works with self-attention and "
                         "absolute position embeddings only (relative scores assume queries "
                         "at positions 0..S-1).")

    def attention_sublayer(sublayer_input, to_tensor, to_seq_length, mask, layer_head_mask,
                           position_type, rows=None):
        """[B*S, H] -> ([B*S, H], probs [B, N, S, T]); in the current scope, as `self` + `output`.

        Post-LN: LayerNorm(x + Dropout(Dense(Attn(x)))); pre-LN: x + Dropout(Dense(Attn(LN(x)))).
        `rows`: a `_QueryRows`; the queries and the output are then its [B*F] rows only.
        """
        attention_input = sublayer_input
        if pre_norm:
            with tf1.variable_scope("output"):
                attention_input = layer_norm(sublayer_input, "LayerNorm", layer_norm_eps)
        # Self-attention (no `to_tensor`) attends to its own (normalised) input.
        to_tensor = attention_input if to_tensor is None else to_tensor
        from_seq_length, index = seq_length, token_index
        if rows is not None:
            attention_input = tf.gather(attention_input, rows.flat)
            sublayer_input = tf.gather(sublayer_input, rows.flat)
            from_seq_length, mask, index = rows.count, rows.mask, None
        with tf1.variable_scope("self"):
            attention_output, probs = attention_layer(
                from_tensor=attention_input,
                to_tensor=to_tensor,
                attention_mask=mask,
                num_attention_heads=num_attention_heads,
                size_per_head=attention_head_size,
                attention_probs_dropout_prob=attention_probs_dropout_prob,
                initializer_range=initializer_range,
                do_return_2d_tensor=True,
                batch_size=batch_size,
                from_seq_length=from_seq_length,
                to_seq_length=to_seq_length,
                head_mask=layer_head_mask,
                position_embedding_type=position_type,
                max_position_embeddings=max_position_embeddings,
                do_return_attention_probs=True,
                token_index=index)
        with tf1.variable_scope("output"):
            return project_and_add(attention_output, sublayer_input), probs

    def project_and_add(hidden, residual):
        """A sublayer's output: dense to H, dropout, plus `residual`, then (post-LN)
        LayerNorm, in the current scope. [B*S, *] -> [B*S, H]."""
        hidden = dropout(dense_layer(hidden, hidden_size, None, init), hidden_dropout_prob)
        if pre_norm:
            return hidden + residual
        return layer_norm(hidden + residual, epsilon=layer_norm_eps)

    def encoder_layer(layer_idx, layer_input, layer_encoder_output, dropout_key):
        """One layer in the current scope: [B*S, H] -> ([B*S, H], probs [B, N, S, S]); the
        last one with `output_positions`: -> ([B*F, H], probs [B, N, F, S])."""
        keys = contextlib.nullcontext() if dropout_key is None else dropout_key_scope(dropout_key)
        rows = query_rows if layer_idx == num_hidden_layers - 1 else None
        with keys:
            with tf1.variable_scope("attention"):
                attention_output, probs = attention_sublayer(
                    layer_input, None, seq_length, attention_mask, layer_head_masks[layer_idx],
                    position_embedding_type, rows)
            if layer_encoder_output is not None:
                with tf1.variable_scope("crossattention"):
                    attention_output, _ = attention_sublayer(
                        attention_output, layer_encoder_output, encoder_seq_length,
                        encoder_attention_mask, layer_head_masks[layer_idx], "absolute")

            feed_forward_input = attention_output
            if pre_norm:
                with tf1.variable_scope("output"):
                    feed_forward_input = layer_norm(attention_output, "LayerNorm", layer_norm_eps)
            with tf1.variable_scope("intermediate"):
                intermediate_output = dense_layer(feed_forward_input, intermediate_size,
                                                  intermediate_act_fn, init)
            with tf1.variable_scope("output"):
                return project_and_add(intermediate_output, attention_output), probs

    prev_output = reshape_to_matrix(input_tensor)  # [B*S, H], kept 2-D across layers.
    if token_index is not None:
        prev_output = tf.gather_nd(prev_output, token_index)  # [K, H]
    query_rows = None
    if output_positions is not None:
        query_rows = _QueryRows.of(output_positions, attention_mask, batch_size, seq_length)
    init = create_initializer(initializer_range)
    # One key per layer, so the layer's dropout masks are a function of its inputs: the same
    # whether or not the backward pass recomputes it.
    uses_dropout = bool(hidden_dropout_prob) or bool(attention_probs_dropout_prob)
    layer_keys = random_keys(num_hidden_layers) if uses_dropout else None
    all_layer_outputs = []
    all_attention_probs = []
    for layer_idx in range(num_hidden_layers):
        if query_rows is not None and token_index is not None \
                and layer_idx == num_hidden_layers - 1:
            # The last layer picks its query rows from the padded layout (zeros at padding).
            prev_output = tf.scatter_nd(token_index, prev_output,
                                        [batch_size * seq_length, hidden_size])
        with tf1.variable_scope(f"layer_{layer_idx}"):
            inputs = [prev_output, encoder_output,
                      None if layer_keys is None else layer_keys[layer_idx]]
            if recompute_grad:
                present = [tensor for tensor in inputs if tensor is not None]

                def layer_of_present(*tensors, layer_idx=layer_idx, inputs=inputs):
                    tensors = iter(tensors)
                    return encoder_layer(layer_idx, *[None if tensor is None else next(tensors)
                                                      for tensor in inputs])

                layer_output, probs = recompute_layer(layer_of_present, present)
            else:
                layer_output, probs = encoder_layer(layer_idx, *inputs)
            all_attention_probs.append(probs)
            prev_output = layer_output
            all_layer_outputs.append(layer_output)
    if pre_norm:
        # Pre-LN leaves the residual stream un-normalised; one final norm fixes its scale.
        prev_output = layer_norm(prev_output, "LayerNorm", layer_norm_eps)
        all_layer_outputs[-1] = prev_output

    def restore(tensor, last):
        """A layer's 2-D output in the input's layout: padding back, [B, S, H] for 3-D input
        ([B, F, H] for the last layer with `output_positions`)."""
        rows = seq_length
        if last and query_rows is not None:
            rows = query_rows.count
        elif token_index is not None:
            tensor = tf.scatter_nd(token_index, tensor, [batch_size * seq_length, hidden_size])
        return tensor if len(input_shape) == 2 else tf.reshape(
            tensor, [batch_size, rows, hidden_size])

    if do_return_all_layers:
        outputs = [restore(layer_output, layer_idx == num_hidden_layers - 1)
                   for layer_idx, layer_output in enumerate(all_layer_outputs)]
    else:
        outputs = restore(prev_output, True)
    if do_return_attention_probs:
        return outputs, all_attention_probs
    return outputs


def _last_layer_shortens(pooled_only, sequence_positions, position_embedding_type):
    """Whether `BertModel` runs its last layer at the positions read only: relative position
    scores assume queries at 0..S-1."""
    return (pooled_only or sequence_positions is not None) and position_embedding_type == "absolute"


@dataclasses.dataclass(frozen=True)
class _QueryRows:
    """The rows the last encoder layer computes with `output_positions`."""

    flat: tf.Tensor  # int32 [B*F]: indices into the [B*S] rows, row-major.
    count: object  # F, an int or a scalar Tensor.
    mask: tf.Tensor | None  # [B, F, S]: the attention mask's rows at those positions.

    @classmethod
    def of(cls, output_positions, attention_mask, batch_size, seq_length):
        positions = tf.cast(output_positions, tf.int32)
        count = get_shape_list(positions, expected_rank=2, name="output_positions")[1]
        flat = tf.reshape(positions + tf.expand_dims(tf.range(batch_size) * seq_length, 1), [-1])
        mask = None
        if attention_mask is not None:
            mask = tf.gather(attention_mask, positions, batch_dims=1)
        return cls(flat, count, mask)


def _head_mask_per_layer(head_mask, num_hidden_layers, num_attention_heads):
    """Splits a head mask [L, N] or [N] into a list of L masks [N] (or Nones).

    Raises:
      ValueError: if the mask is not rank 1 or 2 or its static sizes do not match.
    """
    if head_mask is None:
        return [None] * num_hidden_layers
    head_mask = tf.cast(head_mask, tf.float32)
    shape = head_mask.shape.as_list() if head_mask.shape.ndims is not None else None
    expected = (f"[num_hidden_layers, num_attention_heads] = [{num_hidden_layers}, "
                f"{num_attention_heads}] or [{num_attention_heads}]")
    if shape is None or len(shape) not in (1, 2) or shape[-1] not in (None, num_attention_heads):
        raise ValueError(f"head_mask must have shape {expected}, got {shape}.")
    if len(shape) == 1:
        return [head_mask] * num_hidden_layers
    if shape[0] not in (None, num_hidden_layers):
        raise ValueError(f"head_mask must have shape {expected}, got {shape}.")
    return [head_mask[i] for i in range(num_hidden_layers)]


def get_shape_list(tensor, expected_rank=None, name=None):
    """Returns a list of the tensor's dimensions, static ints where known.

    Args:
      tensor: a Tensor.
      expected_rank: optional int or list of ints; raises if the rank differs.
      name: name of the tensor for the error message.

    Returns:
      A list with a Python int for each static dimension and a scalar int32
      Tensor for each dynamic one.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")
    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)
    shape = tensor.shape.as_list()
    non_static_indexes = [i for i, dim in enumerate(shape) if dim is None]
    if not non_static_indexes:
        return shape
    dyn_shape = tf.shape(tensor)
    for index in non_static_indexes:
        shape[index] = dyn_shape[index]
    return shape


def reshape_to_matrix(input_tensor):
    """Reshapes a Tensor of rank >= 2 to a matrix [prod(leading dims), width]."""
    ndims = input_tensor.shape.ndims
    if ndims < 2:
        raise ValueError(f"Input tensor must have at least rank 2. Shape = {input_tensor.shape}")
    if ndims == 2:
        return input_tensor
    width = input_tensor.shape[-1]
    return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
    """Reshapes a matrix [M, width] back to `orig_shape_list[:-1] + [width]`."""
    if len(orig_shape_list) == 2:
        return output_tensor
    output_shape = get_shape_list(output_tensor)
    return tf.reshape(output_tensor, orig_shape_list[0:-1] + [output_shape[-1]])


def assert_rank(tensor, expected_rank, name=None):
    """Raises ValueError naming the tensor if its rank is not `expected_rank`.

    Args:
      tensor: a Tensor.
      expected_rank: int or list of ints.
      name: tensor name for the message.
    """
    if name is None:
        name = getattr(tensor, "name", "tensor")
    expected_rank_dict = {}
    if isinstance(expected_rank, int):
        expected_rank_dict[expected_rank] = True
    else:
        for x in expected_rank:
            expected_rank_dict[x] = True
    actual_rank = tensor.shape.ndims
    if actual_rank not in expected_rank_dict:
        scope_name = tf1.get_variable_scope().name
        raise ValueError(
            f"For the tensor `{name}` in scope `{scope_name}`, the actual rank `{actual_rank}` "
            f"(shape = {tensor.shape}) is not equal to the expected rank `{expected_rank}`")


def _scope_compute_dtype():
    """The dtype variables are read in: the scope's compute dtype under mixed precision.

    The embedding table has no input tensor to take its dtype from, so it asks
    the enclosing `precision.compute_dtype_scope` via a marker on the getter.
    """
    scope = tf1.get_variable_scope()
    getter = scope.custom_getter
    return getattr(getter, "compute_dtype", tf.float32) if getter else tf.float32

