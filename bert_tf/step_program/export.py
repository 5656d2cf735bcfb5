"""A task's real training step as one StableHLO module (scripts/export_step.py).

The step is the model_fn run_squad.py, run_classifier.py and run_pretraining.py train with
(`benchmark_step`'s task model_fns with the run's `TrainingStep`): the encoder and head, the
loss, AdamW or LAMB with warmup and linear decay, clipping at global norm 1.0, dropout, and
global_step + 1. `tf.compat.v1.wrap_function` builds it as the Estimator would, with lifted
variables; a `tf.function(jit_compile=True)` over it lowers to StableHLO, where the variables
become arguments (in the order of its captured inputs) and their new values results.

Dropout: the whole model is built in a `modeling.dropout_key_scope` keyed by
`stateless_fold_in(seed, global_step)`, with `seed` an argument of the module, so every mask
is a stateless Philox draw of (seed, step): TensorFlow, XLA and any other runtime of the
module draw the same masks.
"""

import dataclasses
import os
import re
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import modeling, precision, tf2
from bert_tf.errors import BertTfError
from bert_tf.step_program import features as features_lib
from bert_tf.step_program import manifest as manifest_lib
from bert_tf.step_program import tensor_files
from bert_tf.tasks import model_fn_parts
from bert_tf.tools import benchmark_step
from bert_tf.training import estimator as estimator_lib
from bert_tf.training.training_step import TrainingStep

tf1 = tf.compat.v1

TASKS = benchmark_step.TASKS
PRECISIONS = ("fp32", "bf16")


@dataclasses.dataclass
class BuiltStep:
    """A training step built in TensorFlow, ready to run or lower.

    Attributes:
      function: `tf.function(jit_compile=True)` of the feature tensors and the seed (in
        `feature_specs` order, then the seed) -> [loss, *metrics].
      feature_specs: list of (name, tf.TensorSpec).
      variables: the state in the module's argument order (its captured inputs).
      initializers: Google name -> `Entry.init` dict of the variables built with one.
      metric_names: names of the results after the loss.
    """

    function: object
    feature_specs: list
    variables: list
    initializers: dict
    metric_names: list

    def example_arguments(self):
        """Zeros of the feature and seed arguments (what tracing and lowering need)."""
        return [np.zeros(spec.shape, spec.dtype.as_numpy_dtype)
                for _, spec in self.feature_specs] + [np.zeros([2], np.int32)]


def task_model_fn(options, bert_config, static_shapes=True):
    """The task's model_fn with the export's training settings.

    Args:
      options: `options.ExportStepOptions`.
      static_shapes: dense gradients only (a compiled step); False is the graph-mode step
        that run_*.py builds.
    """
    compute_dtype = precision.compute_dtype_from_name(options.precision)
    encoder = model_fn_parts.Encoder(bert_config, compute_dtype=compute_dtype,
                                     recompute_grad=options.recompute_grad)
    training = TrainingStep(learning_rate=options.learning_rate,
                            num_train_steps=options.num_train_steps,
                            num_warmup_steps=options.num_warmup_steps,
                            optimizer=options.optimizer, compute_dtype=compute_dtype,
                            static_shapes=static_shapes)
    return benchmark_step.step_task(options.task).step_model_fn(encoder, training,
                                                                options.num_labels)


def dropout_key(seed, global_step):
    """int32 [2]: the key of every dropout mask of the step at `global_step`."""
    return tf.random.experimental.stateless_fold_in(seed, tf.cast(global_step, tf.int32))


def training_outputs(model_fn, features, seed):
    """The TRAIN spec of `model_fn` on `features`, its dropout keyed by (seed, global_step).

    Returns:
      (EstimatorSpec, global_step variable).
    """
    global_step = tf1.train.get_or_create_global_step()
    with modeling.dropout_key_scope(dropout_key(seed, global_step)):
        spec = model_fn(features, None, estimator_lib.ModeKeys.TRAIN, {})
    return spec, global_step


def build_step(options, bert_config):
    """Builds the task's training step (see the module docstring).

    Returns:
      A `BuiltStep`.
    """
    feature_specs = features_lib.feature_specs(options)
    names = [name for name, _ in feature_specs]
    model_fn = task_model_fn(options, bert_config)
    initializers, created, metric_names = {}, [], []

    def record_initializer(getter, name, *args, **kwargs):
        initializer = kwargs.get("initializer")
        if initializer is not None and name not in initializers:
            initializers[name] = _init_spec(initializer, name)
        return getter(name, *args, **kwargs)

    def step(*arguments):
        features = dict(zip(names, arguments[:-1], strict=True))
        with tf1.variable_scope(tf1.get_variable_scope(), custom_getter=record_initializer):
            spec, _ = training_outputs(model_fn, features, arguments[-1])
        metrics = dict(sorted((spec.training_metrics or {}).items()))
        metric_names.extend(metrics)
        created.extend(tf1.global_variables() + tf1.local_variables())
        with tf.control_dependencies([spec.train_op]):
            return [tf.identity(spec.loss)] + [tf.identity(tf.cast(value, tf.float32))
                                               for value in metrics.values()]

    signature = [spec for _, spec in feature_specs] + [tf.TensorSpec([2], tf.int32)]
    tf.random.set_seed(options.random_seed)
    with modeling.variables_owned_by_caller():
        wrapped = tf1.wrap_function(step, signature)
    function = tf.function(lambda *arguments: wrapped(*arguments), jit_compile=True,
                           autograph=False)
    concrete = function.get_concrete_function(*signature)
    by_handle = {id(variable.handle): variable for variable in created}
    try:
        variables = [by_handle[id(handle)] for handle in concrete.captured_inputs]
    except KeyError:
        raise BertTfError(f"--task={options.task}: the step captures a tensor that is not a "
                          "variable; it cannot be exported.") from None
    return BuiltStep(function, feature_specs, variables, initializers, metric_names)


def variable_name(variable):
    return variable.name[:-2] if variable.name.endswith(":0") else variable.name


def _init_spec(initializer, name):
    """`Entry.init` of a Keras / TF1 initializer object."""
    kind = type(initializer).__name__.lower()
    config = initializer.get_config() if hasattr(initializer, "get_config") else {}
    if kind == "truncatednormal" and not config.get("mean"):
        return {"kind": "truncated_normal", "stddev": float(config["stddev"])}
    if kind == "zeros":
        return {"kind": "zeros"}
    if kind == "ones":
        return {"kind": "ones"}
    if kind == "constant" and np.ndim(config.get("value", 0)) == 0:
        return {"kind": "constant", "value": float(config.get("value", 0))}
    raise BertTfError(f"variable '{name}': its initializer {type(initializer).__name__} "
                      "cannot be described for --random_init.")


def _role(name):
    if name in ("global_step", "lamb_step"):
        return manifest_lib.STEP
    if name.endswith(("/adam_m", "/adam_v")):
        return manifest_lib.SLOT
    return manifest_lib.WEIGHT


def lower(built):
    """(serialized module bytes, module text) of the step."""
    compiler_ir = built.function.experimental_get_compiler_ir(*built.example_arguments())
    return compiler_ir(stage="stablehlo_serialized"), compiler_ir(stage="stablehlo")


def main_signature(module_text):
    """(argument types, result types) of the module's main, as MLIR type strings."""
    line = next(line for line in module_text.splitlines() if "func.func @main(" in line
                or "func.func public @main(" in line)
    arguments_text, _, results_text = line.partition(") -> ")
    return (re.findall(r"%arg\d+: (tensor<[^>]*>)", arguments_text),
            re.findall(r"tensor<[^>]*>", results_text))


def output_aliases(module_text):
    """{result index: argument index} of the module's `mhlo.input_output_alias`."""
    return {int(output): int(parameter) for parameter, output in re.findall(
        r"parameter_number = (\d+) : i64\}, output_index = array<i64: (\d+)>", module_text)}


def foreign_ops(module_text):
    """Custom calls and host transfers in the module: what another XLA client may not run."""
    found = set(re.findall(r"stablehlo\.custom_call @([\w.]+)", module_text))
    found |= {op for op in ("stablehlo.send", "stablehlo.recv", "stablehlo.infeed",
                            "stablehlo.outfeed") if op in module_text}
    if "stablehlo.set_dimension_size" in module_text or "bounds = [" in module_text:
        found.add("dynamic shapes (stablehlo.set_dimension_size)")
    return sorted(found)


def make_manifest(options, bert_config, built, module_text, module_bytes, feature_files):
    """The `Manifest` of a lowered step."""
    argument_types, result_types = main_signature(module_text)
    arguments = []
    value_ranges = features_lib.value_ranges(options, bert_config)
    for name, spec in built.feature_specs:
        arguments.append(manifest_lib.Entry(name, spec.shape.as_list(), spec.dtype.name,
                                            manifest_lib.FEATURE, values=value_ranges[name]))
    arguments.append(manifest_lib.Entry("seed", [2], "int32", manifest_lib.SEED))
    for variable in built.variables:
        name = variable_name(variable)
        arguments.append(manifest_lib.Entry(
            name, variable.shape.as_list(), variable.dtype.name, _role(name),
            init=built.initializers.get(name, {"kind": "zeros"})))
    aliases = output_aliases(module_text)
    results = []
    for index, type_text in enumerate(result_types):
        shape, dtype = manifest_lib.parse_tensor_type(type_text)
        if index == 0:
            results.append(manifest_lib.Entry("loss", shape, dtype, manifest_lib.LOSS))
        elif index <= len(built.metric_names):
            results.append(manifest_lib.Entry(built.metric_names[index - 1], shape, dtype,
                                              manifest_lib.METRIC))
        elif index in aliases:
            target = arguments[aliases[index]]
            results.append(manifest_lib.Entry(target.name, shape, dtype, target.role,
                                              updates=aliases[index]))
        else:
            raise BertTfError(f"the lowered step's result {index} is neither a metric nor a "
                              "variable update; it cannot be exported.")
    manifest = manifest_lib.Manifest(
        task=options.task, bert_config=bert_config.to_dict(),
        settings=_settings(options), arguments=arguments, results=results,
        module_sha256=manifest_lib.sha256(module_bytes), producer=f"TensorFlow {tf.__version__}",
        model_flops_per_step=benchmark_step.count_flops(
            bert_config, options.task, "train", options.train_batch_size,
            options.max_seq_length, options.max_predictions_per_seq, options.num_labels),
        feature_files=feature_files, foreign_ops=foreign_ops(module_text))
    manifest_lib.check_signature(manifest, argument_types, result_types, "the lowered module")
    return manifest


def _settings(options):
    keys = ("train_batch_size", "max_seq_length", "precision", "optimizer", "learning_rate",
            "num_train_steps", "num_warmup_steps", "recompute_grad", "max_predictions_per_seq",
            "num_labels", "init_checkpoint")
    return {key: getattr(options, key) for key in keys}


def initial_state(built, init_checkpoint):
    """name -> numpy value of every state argument: the initializers' draws, with the
    same-named weights of `init_checkpoint` (as `--init_checkpoint` of run_*.py) over them."""
    weights = {variable_name(v): v for v in built.variables
               if _role(variable_name(v)) == manifest_lib.WEIGHT}
    if init_checkpoint:
        missing = tf2.load_variables(weights, init_checkpoint, allow_missing=True)
        if len(missing) == len(weights):
            raise BertTfError(f"--init_checkpoint: '{init_checkpoint}' has none of the model's "
                              "variables; pass a BERT checkpoint of this config.")
    return {variable_name(v): v.numpy() for v in built.variables}


def check_options(options, bert_config):
    """Raises BertTfError naming the first bad flag."""
    benchmark_step.step_task(options.task)
    if options.precision not in PRECISIONS:
        raise BertTfError(f"--precision: '{options.precision}' cannot be exported; use one of "
                          f"{', '.join(PRECISIONS)} (fp16's dynamic loss scale skips steps "
                          "with a data-dependent branch).")
    for name in ("train_batch_size", "max_seq_length", "num_train_steps"):
        if getattr(options, name) < 1:
            raise BertTfError(f"--{name}: got {getattr(options, name)}; pass a positive number.")
    if options.max_seq_length > bert_config.max_position_embeddings:
        raise BertTfError(f"--max_seq_length={options.max_seq_length} is longer than "
                          f"max_position_embeddings ({bert_config.max_position_embeddings}) of "
                          "--bert_config_file; use at most that.")
    if not options.output_dir:
        raise BertTfError("--output_dir: required; pass the directory to write the step to.")


def export_step(options):
    """Builds, lowers and writes the step (see `manifest`'s module docstring for the files).

    Returns:
      The `Manifest` written.
    """
    bert_config = tf2.load_bert_config(options.bert_config_file)
    check_options(options, bert_config)
    built = build_step(options, bert_config)
    logging.info("Built the %s step: %d state tensors, %d features.", options.task,
                 len(built.variables), len(built.feature_specs))
    module_bytes, module_text = lower(built)
    state = initial_state(built, options.init_checkpoint)
    with tempfile.TemporaryDirectory(prefix="bert_tf_step_") as staging:
        feature_files = []
        if options.train_file:
            feature_files = features_lib.write_feature_shards(
                options, built.feature_specs, staging)
        manifest = make_manifest(options, bert_config, built, module_text, module_bytes,
                                 feature_files)
        with open(os.path.join(staging, manifest_lib.MODULE_FILE), "wb") as f:
            f.write(module_bytes)
        tensor_files.save(state, os.path.join(staging, manifest_lib.STATE_FILE))
        manifest_lib.write(staging, manifest, _write_text)
        _publish(staging, options.output_dir)
    if manifest.foreign_ops:
        logging.warning("The module holds ops another XLA client may not run: %s.",
                        ", ".join(manifest.foreign_ops))
    logging.info("Wrote the %s step to %s: module %.1f MB, state %.1f MB, %d feature shards.",
                 options.task, options.output_dir, len(module_bytes) / 1e6,
                 sum(v.nbytes for v in state.values()) / 1e6, len(feature_files))
    return manifest


def _write_text(path, text):
    with open(path, "w") as f:
        f.write(text)


def _publish(staging, output_dir):
    """Copies the staged files to `output_dir` (local or remote), step.json last, so a
    directory with a manifest is whole."""
    tf.io.gfile.makedirs(output_dir)
    names = sorted(os.listdir(staging), key=lambda name: name == manifest_lib.MANIFEST_FILE)
    for name in names:
        tf.io.gfile.copy(os.path.join(staging, name), os.path.join(output_dir, name),
                         overwrite=True)
