"""step.json: what each argument and result of an exported step is, and the checks that a
step directory's module, manifest and state belong together.

A step directory (scripts/export_step.py --output_dir) holds

    step.mlirbc                 the StableHLO module (a portable, versioned artifact)
    step.json                   this manifest
    state.safetensors           the starting state, one tensor per state argument
    features-NNNNN.safetensors  optional: fixed-shape batches of the task's features

The module's arguments are the input features, the dropout seed and then the state (weights,
optimizer slots, step counters); its results are the loss and the training metrics, then the
new value of each state argument that the step changes (`Entry.updates`). No TensorFlow here:
runtime.py reads it where only JAX is installed.
"""

import dataclasses
import hashlib
import json
import os
import re

from bert_tf.errors import BertTfError

FORMAT = "bert_tf.step_program/1"
MANIFEST_FILE = "step.json"
MODULE_FILE = "step.mlirbc"
STATE_FILE = "state.safetensors"

# Roles of arguments and results.
WEIGHT = "weight"  # A model variable (Google's name).
SLOT = "optimizer_slot"  # An optimizer slot (`<var>/adam_m`, `<var>/adam_v`).
STEP = "step"  # global_step, LAMB's lamb_step.
FEATURE = "input_feature"  # A feature of the task's TFRecords, [B, ...].
SEED = "seed"  # int32 [2]: the dropout masks are a function of it and global_step.
LOSS = "loss"
METRIC = "metric"
STATE_ROLES = (WEIGHT, SLOT, STEP)

# dtype names as in safetensors / numpy.
_MLIR_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64",
                "i32": "int32", "i64": "int64", "i1": "bool", "ui32": "uint32",
                "i8": "int8", "ui8": "uint8"}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One argument or result of the module.

    Attributes:
      name: Google's variable name for state ("bert/encoder/layer_0/attention/self/query/kernel",
        "global_step"), the feature key for features, "seed", "loss" or a metric's name.
      shape: list of ints (static).
      dtype: numpy dtype name ("float32", "int32", "int64", ...).
      role: one of the roles above.
      updates: for a result, the index of the argument it is the new value of (None: none).
      init: for a state argument, how `--random_init` draws it: {"kind": "truncated_normal",
        "stddev": s} (cut at two deviations, as TensorFlow's), {"kind": "zeros"}, {"kind":
        "ones"} or {"kind": "constant", "value": v}.
      values: for a feature, what random features hold: {"max": m} (uniform ints in [0, m))
        or {"fill": v}.
    """

    name: str
    shape: list
    dtype: str
    role: str
    updates: int | None = None
    init: dict | None = None
    values: dict | None = None

    def to_json(self):
        return {key: value for key, value in dataclasses.asdict(self).items()
                if value is not None}


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The contents of step.json (see the module docstring)."""

    task: str
    bert_config: dict
    settings: dict  # The export's flags: batch size, length, precision, optimizer, schedule.
    arguments: list  # of Entry, in the module's argument order.
    results: list  # of Entry, in the module's result order.
    module_sha256: str
    producer: str  # e.g. "TensorFlow 2.21.0".
    model_flops_per_step: int  # Counted as scripts/benchmark.py counts them.
    feature_files: list = dataclasses.field(default_factory=list)
    # Custom calls and host callbacks in the module, which another XLA client may not run.
    foreign_ops: list = dataclasses.field(default_factory=list)

    @property
    def batch_size(self):
        return self.settings["train_batch_size"]

    def state_arguments(self):
        """(index, Entry) of the state arguments, in order."""
        return [(i, entry) for i, entry in enumerate(self.arguments)
                if entry.role in STATE_ROLES]

    def feature_arguments(self):
        """(index, Entry) of the feature arguments, in order."""
        return [(i, entry) for i, entry in enumerate(self.arguments) if entry.role == FEATURE]

    def seed_index(self):
        return next(i for i, entry in enumerate(self.arguments) if entry.role == SEED)

    def global_step_index(self):
        return next(i for i, entry in enumerate(self.arguments) if entry.name == "global_step")

    def to_json(self):
        return {"format": FORMAT, "task": self.task, "producer": self.producer,
                "module": {"file": MODULE_FILE, "sha256": self.module_sha256},
                "state_file": STATE_FILE, "feature_files": list(self.feature_files),
                "settings": self.settings, "bert_config": self.bert_config,
                "model_flops_per_step": self.model_flops_per_step,
                "foreign_ops": list(self.foreign_ops),
                "arguments": [entry.to_json() for entry in self.arguments],
                "results": [entry.to_json() for entry in self.results]}

    @classmethod
    def from_json(cls, data, path):
        try:
            if data.get("format") != FORMAT:
                raise BertTfError(f"{path}: format {data.get('format')!r} is not {FORMAT!r}; "
                                  "export the step again with this bert_tf "
                                  "(scripts/export_step.py).")
            return cls(task=data["task"], bert_config=data["bert_config"],
                       settings=data["settings"],
                       arguments=[Entry(**entry) for entry in data["arguments"]],
                       results=[Entry(**entry) for entry in data["results"]],
                       module_sha256=data["module"]["sha256"], producer=data["producer"],
                       model_flops_per_step=data["model_flops_per_step"],
                       feature_files=data.get("feature_files", []),
                       foreign_ops=data.get("foreign_ops", []))
        except (KeyError, TypeError, AttributeError) as e:
            raise BertTfError(f"{path}: not a step manifest ({type(e).__name__}: {e}); pass a "
                              "directory written by scripts/export_step.py.") from None


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def write(step_dir, manifest, write_text):
    """Writes step.json with `write_text(path, text)` (the exporter's atomic writer)."""
    write_text(os.path.join(step_dir, MANIFEST_FILE),
               json.dumps(manifest.to_json(), indent=1) + "\n")


def load(step_dir):
    """The `Manifest` of `step_dir`.

    Raises:
      BertTfError: naming step.json when it is missing or not a manifest.
    """
    path = os.path.join(step_dir, MANIFEST_FILE)
    if not os.path.isfile(path):
        raise BertTfError(f"--step_dir: '{step_dir}' has no {MANIFEST_FILE}; pass a directory "
                          "written by scripts/export_step.py.")
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise BertTfError(f"{path}: not valid JSON ({e}); export the step again.") from None
    return Manifest.from_json(data, path)


def read_module(step_dir, manifest):
    """The module's bytes, checked against the manifest's hash.

    Raises:
      BertTfError: naming step.mlirbc when it is missing or from another export.
    """
    path = os.path.join(step_dir, MODULE_FILE)
    if not os.path.isfile(path):
        raise BertTfError(f"{path}: missing; export the step again (scripts/export_step.py).")
    with open(path, "rb") as f:
        data = f.read()
    if sha256(data) != manifest.module_sha256:
        raise BertTfError(f"{path}: not the module step.json was written with (its sha256 "
                          "differs: a module from another export?); keep the files of one "
                          "export together, or export again.")
    return data


def parse_tensor_type(text):
    """(shape, dtype name) of an MLIR tensor type such as "tensor<2x16xi32>" or "tensor<f32>"."""
    match = re.fullmatch(r"tensor<(?:([0-9x]*)x)?([a-z]+[0-9]*)>", text.strip())
    if match is None:
        raise ValueError(f"not a static tensor type: {text}")
    dims, element = match.groups()
    shape = [int(d) for d in dims.split("x")] if dims else []
    return shape, _MLIR_DTYPES.get(element, element)


def check_signature(manifest, input_types, result_types, module_path):
    """Checks the manifest's entries against the module's own signature.

    Args:
      input_types, result_types: lists of MLIR tensor type strings of the module's main.

    Raises:
      BertTfError: naming the file and the first tensor that differs.
    """
    for kind, entries, types in (("argument", manifest.arguments, input_types),
                                 ("result", manifest.results, result_types)):
        if len(entries) != len(types):
            raise BertTfError(f"{module_path}: the module has {len(types)} {kind}s but "
                              f"step.json lists {len(entries)}; keep the files of one export "
                              "together, or export again.")
        for entry, type_text in zip(entries, types, strict=True):
            shape, dtype = parse_tensor_type(type_text)
            if shape != list(entry.shape) or dtype != entry.dtype:
                raise BertTfError(
                    f"step.json: {kind} '{entry.name}' is {entry.dtype} {list(entry.shape)} but "
                    f"{os.path.basename(module_path)} has {dtype} {shape}; the manifest was "
                    "edited or comes from another export: export the step again.")


def check_state(manifest, arrays, path):
    """Checks that `arrays` (name -> array) holds every state argument in its shape and dtype.

    Raises:
      BertTfError: naming `path` and the first tensor that is missing or differs.
    """
    for _, entry in manifest.state_arguments():
        if entry.name not in arrays:
            raise BertTfError(f"{path}: tensor '{entry.name}' is missing (step.json lists it); "
                              "pass the state of this export, or --random_init.")
        array = arrays[entry.name]
        if list(array.shape) != list(entry.shape) or str(array.dtype) != entry.dtype:
            raise BertTfError(
                f"{path}: tensor '{entry.name}' is {array.dtype} {list(array.shape)} but "
                f"step.json says {entry.dtype} {list(entry.shape)}; the state and the manifest "
                "come from different exports (or one was edited): export the step again.")


def check_features(manifest, arrays, path):
    """Checks one feature shard: every feature argument as [N, *shape] in its dtype.

    Returns:
      N, the number of batches in the shard.

    Raises:
      BertTfError: naming `path` and the first feature that is missing or differs.
    """
    count = None
    for _, entry in manifest.feature_arguments():
        if entry.name not in arrays:
            raise BertTfError(f"{path}: feature '{entry.name}' is missing (step.json lists "
                              "it); export the features again, or pass --random_features.")
        array = arrays[entry.name]
        if list(array.shape[1:]) != list(entry.shape) or str(array.dtype) != entry.dtype:
            raise BertTfError(
                f"{path}: feature '{entry.name}' is {array.dtype} batches of "
                f"{list(array.shape[1:])} but step.json says {entry.dtype} {list(entry.shape)}; "
                "export the features with the step.")
        if count is not None and array.shape[0] != count:
            raise BertTfError(f"{path}: feature '{entry.name}' has {array.shape[0]} batches, "
                              f"the others {count}; export the features again.")
        count = array.shape[0]
    return count or 0
