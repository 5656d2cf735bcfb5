"""absl flags generated from the fields of the options dataclasses (`bert_tf.options`).

A field made with `options.flag_field` carries its flag's help, kind and choices; the flag
groups of `bert_tf.cli.flags`, `tool_flags` and `step_flags` call `define_fields` with the
options class and the names of the fields they define, so each flag's name, type, default,
choices and help are written once, on the field. Imports neither TensorFlow nor the modules
that do, so scripts/run_step.py defines its flags where TensorFlow is not installed.
"""

import dataclasses
import importlib
import sys
import typing

from absl import flags

from bert_tf import fileio

FLAGS = flags.FLAGS


class _PathParser(flags.ArgumentParser):
    """A path, or a comma-separated list of paths and globs, as people type them: `~` is
    expanded (the shell does not expand it after `--flag=`); relative paths stay relative to
    the working directory; remote ones (gs://, ...) are kept as given."""

    syntactic_help = "a path (relative, absolute, ~/..., or a TensorFlow filesystem URL)"

    def parse(self, argument):
        if argument is None:
            return None
        return ",".join(fileio.user_path(part) for part in str(argument).split(","))

    def flag_type(self):
        return "string"


def define_path(name, default, help_text, flag_values=FLAGS, module_name=None):
    """Defines the string flag `--name` holding a path (see `_PathParser`)."""
    flags.DEFINE(_PathParser(), name, default, help_text, flag_values=flag_values,
                 serializer=flags.ArgumentSerializer(),
                 module_name=module_name or _calling_module())


def _define_enum(name, default, help_text, choices, **kwargs):
    flags.DEFINE_enum(name, default, choices, help_text, **kwargs)


_DEFINERS = {
    "string": flags.DEFINE_string,
    "int": flags.DEFINE_integer,
    "float": flags.DEFINE_float,
    "bool": flags.DEFINE_bool,
    "list": flags.DEFINE_list,
    "path": define_path,
}
_KINDS_OF_TYPES = {str: "string", int: "int", float: "float", bool: "bool"}


def _calling_module():
    """The name of the first module up the stack that is not this one: the flag group's, so
    --helpfull lists a flag under the module of its group."""
    frame = sys._getframe(1)
    while frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    name = frame.f_globals.get("__name__")
    # As absl names a script's own flags' module.
    return sys.argv[0] if name == "__main__" else name


def kind_of(field):
    """The flag kind of a dataclass field: its `kind` metadata, "enum" with `choices`, else
    from its annotation (str, int, float, bool, list[str], each optionally `| None`)."""
    if field.metadata.get("kind"):
        return field.metadata["kind"]
    if field.metadata.get("choices"):
        return "enum"
    types = [t for t in typing.get_args(field.type) if t is not type(None)] or [field.type]
    (annotation,) = types
    if typing.get_origin(annotation) is list:
        return "list"
    return _KINDS_OF_TYPES[annotation]


def choices_of(field):
    """The field's choices: a list, or "package.module:NAME" for a sequence defined in a module
    that imports TensorFlow (imported when the flag is defined, not with the options)."""
    choices = field.metadata["choices"]
    if isinstance(choices, str):
        module, name = choices.split(":")
        choices = getattr(importlib.import_module(module), name)
    return list(choices)


def flag_field_names(options_class):
    """The names of the fields of `options_class` that carry flag metadata, in order."""
    return [field.name for field in dataclasses.fields(options_class) if "help" in field.metadata]


def define_fields(options_class, names=None, defaults=None, flag_values=FLAGS):
    """Defines the flags of the fields `names` of `options_class`, in that order.

    Args:
      options_class: an options dataclass whose fields carry flag metadata (`flag_field`).
      names: field names, each the name of its flag (None: every field with flag metadata;
        the others are read from flags another class's fields define).
      defaults: an instance of `options_class` holding the script's defaults (None: the
        fields' own).
      flag_values: where to define them.
    """
    fields = {field.name: field for field in dataclasses.fields(options_class)}
    module_name = _calling_module()
    for name in flag_field_names(options_class) if names is None else names:
        field = fields[name]
        if "help" not in field.metadata:
            raise ValueError(f"{options_class.__name__}.{name} is not a flag field")
        default = field.default if defaults is None else getattr(defaults, name)
        kwargs = {"flag_values": flag_values, "module_name": module_name}
        if field.metadata.get("lower_bound") is not None:
            kwargs["lower_bound"] = field.metadata["lower_bound"]
        kind = kind_of(field)
        if kind == "enum":
            _define_enum(name, default, field.metadata["help"], choices_of(field), **kwargs)
        else:
            _DEFINERS[kind](name, default, field.metadata["help"], **kwargs)
