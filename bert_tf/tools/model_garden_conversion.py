"""Converts BERT checkpoints between TensorFlow Model Garden's layout and the Google layout.

Model Garden (tf-models-official, `official.nlp.modeling`) saves its encoders object-based,
`tf.train.Checkpoint(encoder=...).save(...)`: each variable is named by its path through the
Keras objects, e.g. `encoder/_transformer_layers/0/_attention_layer/_query_dense/kernel/
.ATTRIBUTES/VARIABLE_VALUE`. Its two BERT encoders keep the same weights under different
paths (below the encoder; L = num_hidden_layers):

    Google name (bert/...)             BertEncoderV2                  BertEncoder
    embeddings/word_embeddings         _embedding_layer/embeddings    layer_with_weights-0/...
    embeddings/position_embeddings     _position_embedding_layer/...  layer_with_weights-1/...
    embeddings/token_type_embeddings   _type_embedding_layer/...      layer_with_weights-2/...
    embeddings/LayerNorm/{gamma,beta}  _embedding_norm_layer/...      layer_with_weights-3/...
    encoder/layer_{i}/...              _transformer_layers/{i}/...    layer_with_weights-{4+i}/...
    pooler/dense/{kernel,bias}         _pooler_layer/...              layer_with_weights-{4+L}/...

Inside layer i: attention/self/{query,key,value} <-> _attention_layer/_{query,key,value}_dense
(kernel [H, heads, head_size], bias [heads, head_size]: Google's [H, H] and [H] reshaped),
attention/output/dense <-> _attention_layer/_output_dense (kernel [heads, head_size, H]),
attention/output/LayerNorm <-> _attention_layer_norm, intermediate/dense <->
_intermediate_dense, output/dense <-> _output_dense, output/LayerNorm <-> _output_layer_norm.
Every mapping is a reshape (row-major, no transpose), so values travel bit for bit. The
encoder may sit anywhere in the checkpoint (`encoder/`, `model/layer_with_weights-0/` of a
`BertClassifier`, inside the Keras model of a TF Hub SavedModel, whose `variables/` name each
variable by the first path found, e.g. `variables/0`): the reader walks the checkpoint's
object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`, every object's named children) to the object
that has the children of the table, so every other path to the same variables is ignored.

Sizes come from the shapes: vocab, hidden, positions and token types from the tables, layers
from the count of transformer blocks, heads from the attention kernels ([H, heads,
head_size]), intermediate from the first dense kernel. What the shapes do not hold comes from
a bert_config.json (given, or beside the checkpoint), read as every bert_config.json is read
(`gelu` = exact erf); without one the dropouts and initializer range are BERT's and
`hidden_act` is `gelu_new`: Model Garden's default activation (`tf_utils.get_activation
("gelu")`, the tanh form). Layer norm epsilon: 1e-12, Model Garden's default. Encoders built
with `embedding_width` != hidden size or `norm_first=True` are not this layout and are
refused or, for `norm_first`, not detectable from the weights (the sizes match; the outputs
would not).

`convert_tf_to_model_garden` writes one checkpoint that `tf.train.Checkpoint(encoder=
BertEncoderV2(...))` and `tf.train.Checkpoint(encoder=BertEncoder(...))` both restore: the
encoder object holds each weight under both paths of the table (one object, two names). With
the classifier head, `tf.train.Checkpoint(model=BertClassifier(...))` restores it too.

Task head: Model Garden's `BertClassifier` (default `use_encoder_pooler=True`: dropout and
one dense layer on the pooled output) stores `out_proj/kernel` [H, classes] and
`out_proj/bias`; bert_tf's classifier head `output_weights` [classes, H] (transposed) and
`output_bias`.

bert_tf never imports Model Garden: the checkpoints are read and written with TensorFlow.
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf import fileio, modeling
from bert_tf.encoder import settings
from bert_tf.errors import BertTfError
from bert_tf.tools import conversion
from bert_tf.training import checkpoints

CHECKPOINT_NAME = conversion.TF_CHECKPOINT_NAME
# The tensor of an object-based checkpoint that holds its object graph.
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
# Model Garden's default activation (approximate GELU) under its bert_tf name.
DEFAULT_HIDDEN_ACT = "gelu_new"
V2, V1 = "BertEncoderV2", "BertEncoder"
# V1 (a functional Keras model): the weighted layers before the first block.
_V1_FIRST_BLOCK = 4
_V2_EMBEDDINGS = ("_embedding_layer", "_position_embedding_layer", "_type_embedding_layer")
_EMBEDDING_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")
# Google's part of a layer -> Model Garden's, inside the transformer block.
_LAYER_PARTS = {
    "attention/self/query": "_attention_layer/_query_dense",
    "attention/self/key": "_attention_layer/_key_dense",
    "attention/self/value": "_attention_layer/_value_dense",
    "attention/output/dense": "_attention_layer/_output_dense",
    "attention/output/LayerNorm": "_attention_layer_norm",
    "intermediate/dense": "_intermediate_dense",
    "output/dense": "_output_dense",
    "output/LayerNorm": "_output_layer_norm",
}
_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "type_vocab_size")


def model_garden_tasks():
    """The converter `--task` names whose head a BertClassifier holds: the tasks' sequence
    classification heads (bert_tf's top-level output_weights / output_bias)."""
    return tuple(name for name, head in conversion.hf_heads().items()
                 if head.architecture == "BertForSequenceClassification")


def _block_path(kind, index):
    return (f"_transformer_layers/{index}" if kind == V2
            else f"layer_with_weights-{_V1_FIRST_BLOCK + index}")


def _model_garden_path(google, kind, num_layers):
    """The path below the encoder of the Google variable `google` (bert/...) in `kind`."""
    parts = google.split("/")
    if parts[1] == "embeddings" and parts[2] in _EMBEDDING_TABLES:
        index = _EMBEDDING_TABLES.index(parts[2])
        layer = _V2_EMBEDDINGS[index] if kind == V2 else f"layer_with_weights-{index}"
        return f"{layer}/embeddings"
    if parts[1] == "embeddings":  # LayerNorm/{gamma,beta}
        layer = ("_embedding_norm_layer" if kind == V2
                 else f"layer_with_weights-{_V1_FIRST_BLOCK - 1}")
        return f"{layer}/{parts[-1]}"
    if parts[1] == "pooler":
        layer = "_pooler_layer" if kind == V2 else _block_path(V1, num_layers)
        return f"{layer}/{parts[-1]}"
    index = int(parts[2][len("layer_"):])
    return f"{_block_path(kind, index)}/{_LAYER_PARTS['/'.join(parts[3:-1])]}/{parts[-1]}"


def _model_garden_shape(weight, config):
    """Model Garden's shape of a Google `WeightName` (attention kernels split by head)."""
    heads = config.num_attention_heads
    head_size = config.hidden_size // heads
    name = weight.google
    if "/attention/self/" in name:
        return [config.hidden_size, heads, head_size] if name.endswith("kernel") else [
            heads, head_size]
    if "/attention/output/dense/kernel" in name:
        return [heads, head_size, config.hidden_size]
    return weight.shape


def encoder_weights(config):
    """[(`conversion.WeightName`, Model Garden shape)] of the encoder and pooler of `config`."""
    return [(w, _model_garden_shape(w, config)) for w in conversion.weight_names(config)
            if w.group in ("encoder", "pooler")]


def checkpoint_prefix(path):
    """The object-based checkpoint of `path`, or None when it has none.

    Args:
      path: a checkpoint prefix, a directory holding checkpoints (its `checkpoint` state
        file, else `bert_model.ckpt`, else its one `.index` file), or a TF Hub SavedModel
        directory (`saved_model.pb` + `variables/variables.*`).
    """
    if not path:
        return None
    if fileio.is_file(path + ".index"):
        return path
    if not fileio.is_dir(path):
        return None
    saved = os.path.join(path, "variables", "variables")
    if fileio.is_file(os.path.join(path, "saved_model.pb")) and fileio.is_file(saved + ".index"):
        return saved
    latest = tf.train.latest_checkpoint(path)
    if latest is not None:
        return latest
    if fileio.is_file(os.path.join(path, CHECKPOINT_NAME + ".index")):
        return os.path.join(path, CHECKPOINT_NAME)
    indexes = tf.io.gfile.glob(os.path.join(path, "*.index"))
    return indexes[0][:-len(".index")] if len(indexes) == 1 else None


class _ObjectGraph:
    """The objects of an object-based checkpoint and their named children."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.reader = checkpoints.reader_of(prefix)
        if not self.reader.has_tensor(_OBJECT_GRAPH_KEY):
            self.nodes = []
            return
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(self.reader.get_tensor(_OBJECT_GRAPH_KEY))
        self.nodes = list(graph.nodes)

    def child(self, node_id, path):
        """The object at `path` ("a/b/c") below object `node_id`, or None."""
        for name in path.split("/"):
            node_id = next((ref.node_id for ref in self.nodes[node_id].children
                            if ref.local_name == name), None)
            if node_id is None:
                return None
        return node_id

    def variable(self, node_id, path):
        """The checkpoint key of the variable at `path` below object `node_id`, or None."""
        found = self.child(node_id, path)
        if found is None:
            return None
        return next((attribute.checkpoint_key for attribute in self.nodes[found].attributes
                     if attribute.name == "VARIABLE_VALUE"), None)

    def encoders(self):
        """[(kind, object id)] of the Model Garden encoders: objects with a first transformer
        block at BertEncoderV2's path (preferred: a checkpoint of ours has both) or
        BertEncoder's."""
        found = []
        for node_id in range(len(self.nodes)):
            for kind in (V2, V1):
                if self.variable(node_id, f"{_block_path(kind, 0)}/{_FIRST_KERNEL}"):
                    found.append((kind, node_id))
                    break
        return found


# A variable every Model Garden transformer block has (below the block).
_FIRST_KERNEL = "_attention_layer/_query_dense/kernel"


def is_model_garden(path):
    """Whether `path` is a Model Garden BERT encoder checkpoint or TF Hub SavedModel.

    Args:
      path: a checkpoint prefix or directory, or a SavedModel directory (see
        `checkpoint_prefix`).

    Returns:
      True when its object graph holds one Model Garden `BertEncoder` / `BertEncoderV2`
      (object-based names such as `encoder/_transformer_layers/0/...`); False otherwise, also
      for paths that do not exist or cannot be read.
    """
    try:
        prefix = checkpoint_prefix(path)
        return prefix is not None and len(_ObjectGraph(prefix).encoders()) == 1
    except (tf.errors.OpError, ValueError, RuntimeError, OSError):
        return False


class _Source:
    """One Model Garden encoder in a checkpoint: where it is, its layout and its sizes."""

    def __init__(self, path):
        self.prefix = checkpoint_prefix(path)
        if self.prefix is None:
            raise BertTfError(f"--init_checkpoint: '{path}' holds no checkpoint; pass a Model "
                              "Garden checkpoint prefix (e.g. .../ckpt-1), its directory or a "
                              "TF Hub SavedModel directory (saved_model.pb + variables/).")
        try:
            self.graph = _ObjectGraph(self.prefix)
        except (tf.errors.OpError, ValueError) as e:
            raise BertTfError(f"cannot read checkpoint '{self.prefix}' "
                              f"({str(e).splitlines()[0]}); pass a whole checkpoint.") from None
        encoders = self.graph.encoders()
        if len(encoders) != 1:
            what = ("no Model Garden BertEncoder / BertEncoderV2 (variables such as "
                    "'encoder/_transformer_layers/0/_attention_layer/_query_dense/kernel')"
                    if not encoders else f"{len(encoders)} Model Garden encoders")
            raise BertTfError(f"checkpoint '{self.prefix}' has {what}; pass the checkpoint of "
                              "one Model Garden BERT encoder (a Google-layout checkpoint "
                              "needs no conversion).")
        (self.kind, self.node), = encoders
        self.num_layers = 0
        while self.graph.variable(self.node, f"{_block_path(self.kind, self.num_layers)}/"
                                             f"{_FIRST_KERNEL}"):
            self.num_layers += 1
        self.shapes = self.graph.reader.get_variable_to_shape_map()

    def key(self, google):
        """The checkpoint key of the Google variable `google` (bert/...), or None."""
        return self.graph.variable(self.node,
                                   _model_garden_path(google, self.kind, self.num_layers))

    def shape(self, google):
        """The stored shape of the Google variable `google`, or None if absent."""
        key = self.key(google)
        return None if key is None else list(self.shapes[key])

    def sizes(self):
        """{size key of bert_config.json: value} read off the shapes."""
        table = [self.shape(f"bert/embeddings/{name}") for name in _EMBEDDING_TABLES]
        query = self.shape("bert/encoder/layer_0/attention/self/query/kernel")
        inner = self.shape("bert/encoder/layer_0/intermediate/dense/kernel")
        if None in table or inner is None or len(query) != 3:
            raise BertTfError(f"checkpoint '{self.prefix}': its {self.kind} lacks an embedding "
                              "table or a dense kernel at the paths of the BERT layout (an "
                              "embedding projection?); pass the checkpoint of a Model Garden "
                              "BERT encoder whose embedding width is its hidden size.")
        if table[0][1] != query[0]:
            raise BertTfError(f"checkpoint '{self.prefix}': the word embeddings are "
                              f"{table[0][1]} wide but the hidden size is {query[0]} "
                              "(embedding_width); only encoders without an embedding "
                              "projection convert.")
        return {"vocab_size": table[0][0], "hidden_size": query[0],
                "num_hidden_layers": self.num_layers, "num_attention_heads": query[1],
                "intermediate_size": inner[1], "max_position_embeddings": table[1][0],
                "type_vocab_size": table[2][0]}


def _config_of(source, bert_config_file):
    """(`modeling.BertConfig` of `source`, where its other keys came from): the sizes of
    the shapes, the rest from `bert_config_file` (None: a bert_config.json beside the
    checkpoint, else Model Garden's defaults)."""
    sizes = source.sizes()
    flag = "--bert_config_file"
    if bert_config_file:
        fileio.require_file(bert_config_file, flag="bert_config_file", what="BERT config")
    else:
        flag, bert_config_file = conversion.TF_CONFIG_NAME, os.path.join(
            os.path.dirname(source.prefix), conversion.TF_CONFIG_NAME)
        if not fileio.is_file(bert_config_file):
            values = dict(sizes, hidden_act=DEFAULT_HIDDEN_ACT, layer_norm_eps=1e-12)
            return (modeling.BertConfig.from_dict(values),
                    "no bert_config.json: Model Garden's default activation")
    config = modeling.BertConfig.from_json_file(bert_config_file)
    for key in _SIZE_KEYS:
        if getattr(config, key) != sizes[key]:
            raise BertTfError(f"{flag} {bert_config_file}: {key} is {getattr(config, key)} but "
                              f"the Model Garden checkpoint '{source.prefix}' has "
                              f"{sizes[key]}; pass the config of this checkpoint or none (the "
                              "sizes are read from the checkpoint).")
    _check_expressible(config, bert_config_file)
    return config, f"the rest from {bert_config_file}"


def _check_expressible(config, source):
    """Raises for encoder variants Model Garden's BERT encoders do not compute."""
    variant = settings.LayerVariant
    for key in ("position_embedding_type", "layer_norm_type"):
        if getattr(config, key) != getattr(variant, key):
            raise BertTfError(f"{source}: {key} is '{getattr(config, key)}', which Model "
                              "Garden's BertEncoder / BertEncoderV2 do not compute; only "
                              f"'{getattr(variant, key)}' converts.")


def _vocab_and_casing(source):
    """(vocab file or None, do_lower_case or None) stored with the checkpoint."""
    directory = os.path.dirname(source.prefix)
    do_lower_case = None
    if os.path.basename(directory) == "variables":  # A SavedModel: assets/ and a variable.
        directory = os.path.join(os.path.dirname(directory), "assets")
        key = source.graph.variable(0, "do_lower_case")  # An attribute of the root object.
        if key is not None:
            do_lower_case = bool(source.graph.reader.get_tensor(key))
    vocab = os.path.join(directory, conversion.VOCAB_NAME)
    return (vocab if fileio.is_file(vocab) else None), do_lower_case


def _read_encoder(source, config):
    """{Google name: array} of the encoder and pooler of `source` (shapes checked)."""
    tensors = {}
    for weight, shape in encoder_weights(config):
        key = source.key(weight.google)
        if key is None:
            path = _model_garden_path(weight.google, source.kind, source.num_layers)
            raise BertTfError(f"checkpoint '{source.prefix}': its {source.kind} lacks '{path}' "
                              f"('{weight.google}'); pass the whole checkpoint of a Model "
                              "Garden BERT encoder.")
        value = source.graph.reader.get_tensor(key)
        if list(value.shape) != shape:
            raise BertTfError(f"checkpoint '{source.prefix}': '{key}' has shape "
                              f"{list(value.shape)}, not {shape} as the other weights imply; "
                              "pass the checkpoint of a Model Garden BERT encoder.")
        tensors[weight.google] = value.reshape(weight.shape)
    return tensors


def read_model_garden(path, bert_config_file=None):
    """Reads a Model Garden BERT encoder into the Google layout.

    Args:
      path: see `is_model_garden`.
      bert_config_file: optional bert_config.json whose sizes must match the checkpoint's;
        default: the one beside the checkpoint, if any.

    Returns:
      (google_tensors: {Google variable name such as
      `bert/encoder/layer_0/attention/self/query/kernel`: float32 array in Google's shape},
      bert_config: dict of bert_config.json keys, vocab_file: str or None (vocab.txt beside
      the checkpoint, or the SavedModel's assets/vocab.txt), do_lower_case: bool or None (a
      TF Hub SavedModel's `do_lower_case`)).

    Raises:
      BertTfError: in one line, for a path without a Model Garden encoder, sizes that differ
        from `bert_config_file`, or missing weights.
    """
    tensors, config, vocab_file, do_lower_case, _ = _read(path, bert_config_file)
    return tensors, conversion.bert_config_json(config), vocab_file, do_lower_case


def _read(path, bert_config_file):
    """`read_model_garden`'s (tensors, BertConfig, vocab_file, do_lower_case) and a line
    saying what was read (the caller logs it: `checkpoint_sources` says it in its own)."""
    source = _Source(path)
    config, origin = _config_of(source, bert_config_file)
    tensors = _read_encoder(source, config)
    vocab_file, do_lower_case = _vocab_and_casing(source)
    said = (f"Read a Model Garden {source.kind} from {source.prefix}: "
            f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
            f"{config.num_attention_heads} heads (read from the shapes); hidden_act "
            f"{config.hidden_act} ({origin}).")
    return tensors, config, vocab_file, do_lower_case, said


def read_classifier_head(path, hidden_size):
    """{`output_weights` [classes, H], `output_bias` [classes]} of a `BertClassifier` at `path`.

    Raises:
      BertTfError: when the checkpoint has no or several classifier heads, or one with an
        inner dense layer (`use_encoder_pooler=False`), which bert_tf's head does not have.
    """
    source = _Source(path)
    graph = source.graph
    heads = sorted({node_id for node_id in range(len(graph.nodes))
                    if graph.variable(node_id, "out_proj/kernel")})
    if len(heads) != 1:
        raise BertTfError(f"checkpoint '{source.prefix}' has {len(heads)} classifier heads "
                          "(out_proj/kernel); pass the checkpoint of one Model Garden "
                          "BertClassifier, or convert the encoder alone (without --task).")
    if graph.variable(heads[0], "dense/kernel"):
        raise BertTfError(f"checkpoint '{source.prefix}': its classifier head has an inner "
                          "dense layer (use_encoder_pooler=False), which bert_tf's classifier "
                          "head lacks; convert the encoder alone (without --task).")
    kernel = graph.reader.get_tensor(graph.variable(heads[0], "out_proj/kernel"))
    bias = graph.reader.get_tensor(graph.variable(heads[0], "out_proj/bias"))
    if kernel.ndim != 2 or kernel.shape[0] != hidden_size or bias.shape != kernel.shape[1:]:
        raise BertTfError(f"checkpoint '{source.prefix}': the classifier head's kernel has "
                          f"shape {list(kernel.shape)}, not [{hidden_size}, classes]; pass a "
                          "BertClassifier checkpoint.")
    return {"output_weights": np.ascontiguousarray(kernel.T), "output_bias": bias}


def _head(task):
    """The `HfHead` of a `--task` a BertClassifier expresses."""
    if task not in model_garden_tasks():
        raise BertTfError(f"--task={task}: Model Garden's counterpart is BertClassifier, which "
                          f"has the head of {', '.join(model_garden_tasks())} only; convert the "
                          "encoder alone (without --task).")
    return conversion.task_head(task)


def convert_model_garden_to_tf(path, output_dir, bert_config_file=None, vocab_file=None,
                               task=None):
    """Converts a Model Garden encoder (or BertClassifier) into a Google BERT directory.

    Writes `output_dir/bert_model.ckpt.*`, `bert_config.json` (`hidden_act` as the source
    computes it; see the module docstring) and `vocab.txt` (`vocab_file`, else the one stored
    with the checkpoint). With `task` (see `model_garden_tasks`) the BertClassifier head too,
    and the directory becomes a model directory as `conversion.convert_hf_to_tf` makes one.

    Args:
      path: see `is_model_garden`.
      output_dir: directory to write (created if needed).
      bert_config_file: optional config the checkpoint's sizes must match.
      vocab_file: optional vocab.txt to copy.
      task: None or one of `model_garden_tasks()`.

    Returns:
      The checkpoint prefix written.
    """
    fileio.require_local(output_dir, "output_dir", "convert_checkpoint.py writes")
    head = None if task is None else _head(task)
    tensors, config, stored_vocab, _, said = _read(path, bert_config_file)
    logging.info("%s", said)
    if head is not None:
        tensors.update(read_classifier_head(path, config.hidden_size))
        conversion.make_model_dir(tensors, config, {}, head, output_dir)
    prefix = os.path.join(output_dir, CHECKPOINT_NAME)
    checkpoints.write_tf_checkpoint(tensors, prefix)
    if head is not None:
        checkpoints.write_state(output_dir, CHECKPOINT_NAME)
    conversion.write_json(conversion.bert_config_json(config),
                          os.path.join(output_dir, conversion.TF_CONFIG_NAME))
    conversion.copy_if_present(_given_vocab(vocab_file) or stored_vocab,
                               os.path.join(output_dir, conversion.VOCAB_NAME))
    logging.info("Wrote %d variables to %s", len(tensors), prefix)
    return prefix


def _given_vocab(vocab_file):
    if vocab_file and not fileio.is_file(vocab_file):
        raise BertTfError(f"--vocab_file: '{vocab_file}' does not exist; pass the checkpoint's "
                          "vocab.txt or leave the flag out.")
    return vocab_file


class _Node(tf.Module):
    """One object of the written checkpoint; its attributes are its children's names."""


def _object_graph(tensors, config):
    """The encoder object whose variables lie at both encoders' paths (see the module
    docstring), from Google-layout `tensors`."""
    encoder, nodes = _Node(), {}

    def node(path):
        if path not in nodes:
            parent, _, name = path.rpartition("/")
            nodes[path] = _Node()
            setattr(node(parent) if parent else encoder, name, nodes[path])
        return nodes[path]

    for weight, shape in encoder_weights(config):
        path = _model_garden_path(weight.google, V2, config.num_hidden_layers)
        parent, _, name = path.rpartition("/")
        setattr(node(parent), name, tf.Variable(tensors[weight.google].reshape(shape)))
    # The same objects under BertEncoder's names: its weighted layers in order.
    layers = list(_V2_EMBEDDINGS) + ["_embedding_norm_layer"]
    layers += [_block_path(V2, i) for i in range(config.num_hidden_layers)] + ["_pooler_layer"]
    for index, path in enumerate(layers):
        setattr(encoder, f"layer_with_weights-{index}", node(path))
    return encoder


def convert_tf_to_model_garden(bert_config_file, init_checkpoint, output_dir, vocab_file=None,
                               task=None):
    """Converts a Google BERT checkpoint into a Model Garden checkpoint.

    Writes `output_dir/bert_model.ckpt.*` (object-based, with a `checkpoint` state file),
    which `tf.train.Checkpoint(encoder=BertEncoderV2(...))` and `tf.train.Checkpoint(encoder=
    BertEncoder(...))` restore, and with `task` also `tf.train.Checkpoint(model=
    BertClassifier(...))`; beside it `bert_config.json` (the source's, unchanged) and
    `vocab.txt`. Build the Model Garden encoder with the config's sizes and its activation
    (Model Garden's default is tanh GELU, bert_tf's `gelu_new`; `gelu` is the exact erf form).

    Args:
      bert_config_file: the checkpoint's bert_config.json.
      init_checkpoint: checkpoint prefix or directory (its latest checkpoint).
      output_dir: directory to write (created if needed).
      vocab_file: optional vocab.txt to copy (default: vocab.txt beside the config).
      task: None or one of `model_garden_tasks()`.

    Returns:
      The checkpoint prefix written.
    """
    fileio.require_local(output_dir, "output_dir", "convert_checkpoint.py writes")
    head = None if task is None else _head(task)
    config = modeling.BertConfig.from_json_file(bert_config_file)
    _check_expressible(config, f"--bert_config_file {bert_config_file}")
    if is_model_garden(init_checkpoint):
        raise BertTfError(f"--init_checkpoint: '{init_checkpoint}' is a Model Garden checkpoint "
                          "already; convert it with --direction=model_garden_to_tf.")
    names = [weight.google for weight, _ in encoder_weights(config)]
    extra = ["output_weights", "output_bias"] if head is not None else []
    tensors = checkpoints.read_tf_checkpoint(init_checkpoint, names + extra)
    conversion.check_google_weights(tensors, config, f"checkpoint '{init_checkpoint}'",
                                    groups=("encoder", "pooler"))
    encoder = _object_graph(tensors, config)
    root = {"encoder": encoder}
    if head is not None:
        root["model"] = _classifier_node(tensors, encoder, config, init_checkpoint, task)
    os.makedirs(output_dir, exist_ok=True)
    prefix = os.path.join(output_dir, CHECKPOINT_NAME)
    tf.train.Checkpoint(**root).write(prefix)
    checkpoints.write_state(output_dir, CHECKPOINT_NAME)
    conversion.write_json(conversion.bert_config_json(config),
                          os.path.join(output_dir, conversion.TF_CONFIG_NAME))
    vocab_file = _given_vocab(vocab_file) or os.path.join(os.path.dirname(bert_config_file),
                                                          conversion.VOCAB_NAME)
    conversion.copy_if_present(vocab_file, os.path.join(output_dir, conversion.VOCAB_NAME))
    logging.info("Wrote a Model Garden checkpoint (BertEncoderV2 and BertEncoder names%s) to "
                 "%s; build the encoder with hidden_act %s.", ", BertClassifier" if head else "",
                 prefix, config.hidden_act)
    return prefix


def _classifier_node(tensors, encoder, config, init_checkpoint, task):
    """The BertClassifier object: the encoder, and the head from output_weights/_bias."""
    for name in ("output_weights", "output_bias"):
        if name not in tensors:
            raise BertTfError(f"checkpoint '{init_checkpoint}' lacks '{name}'; pass the "
                              f"checkpoint of a run of this task (--task={task}) or convert "
                              "the encoder alone.")
    weights = tensors["output_weights"]
    if weights.ndim != 2 or weights.shape[1] != config.hidden_size:
        raise BertTfError(f"checkpoint '{init_checkpoint}': 'output_weights' has shape "
                          f"{list(weights.shape)}, not [classes, {config.hidden_size}]; pick "
                          "the task it was fine-tuned for.")
    head, projection, model = _Node(), _Node(), _Node()
    projection.kernel = tf.Variable(np.ascontiguousarray(weights.T))
    projection.bias = tf.Variable(tensors["output_bias"])
    head.out_proj = projection
    setattr(model, "layer_with_weights-0", encoder)
    setattr(model, "layer_with_weights-1", head)
    model.classifier = head
    return model
