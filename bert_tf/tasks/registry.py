"""Every task found by its name: the one place that maps "classifier", "squad", ... to a class.

A task class registers itself with `@registry.register` in its own module; `get(name)` returns
it (importing the built-in task modules first), so an export's `predict_config.json`, which
records the name, finds the class that trained it. A task outside bert_tf is found once its
module is imported; exports record that module (`module_of`) so `get` can import it.
"""

import importlib

from bert_tf.errors import BertTfError

# The modules of the built-in tasks, imported by the first lookup.
BUILTIN_MODULES = ("bert_tf.tasks.classification", "bert_tf.tasks.squad", "bert_tf.tasks.ner",
                   "bert_tf.tasks.multiple_choice", "bert_tf.tasks.pretraining",
                   "bert_tf.tasks.encoder")

_TASKS = {}
_builtins_loaded = False


def register(task_class):
    """Adds `task_class` under its `name`; a class decorator. Raises BertTfError when another
    class holds that name already."""
    name = task_class.name
    if not name:
        raise BertTfError(f"{task_class.__qualname__}: a registered task needs a `name`.")
    known = _TASKS.get(name)
    if known is not None and known.__qualname__ != task_class.__qualname__:
        raise BertTfError(f"task '{name}': registered twice ({known.__module__}."
                          f"{known.__qualname__} and {task_class.__module__}."
                          f"{task_class.__qualname__}); give one another name.")
    _TASKS[name] = task_class
    return task_class


def _load_builtins():
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)


def get(name, module=None):
    """The task class registered as `name`, importing `module` first when given (an export's
    record of where its task lives).

    Raises:
      BertTfError: one line naming the known tasks when none is registered as `name`.
    """
    _load_builtins()
    if name not in _TASKS and module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise BertTfError(f"task '{name}': its module {module} cannot be imported ({e}); "
                              "put it on PYTHONPATH.") from None
    if name not in _TASKS:
        raise BertTfError(f"unknown task {name!r}; known tasks: {', '.join(names())}.")
    return _TASKS[name]


def _in_order():
    """(name, class) of every task: the built-in ones in the order of BUILTIN_MODULES (so flag
    choices do not depend on which module some caller imported first), then the others in
    registration order."""
    _load_builtins()
    rank = {module: index for index, module in enumerate(BUILTIN_MODULES)}
    entries = list(_TASKS.items())
    return sorted(entries, key=lambda entry: (
        rank.get(entry[1].__module__, len(rank)), entries.index(entry)))


def names(where=None):
    """The registered task names (see `_in_order`); `where(task_class)` filters them."""
    return tuple(name for name, task_class in _in_order()
                 if where is None or where(task_class))


def known(name):
    """Whether a task is registered as `name` (the built-in ones loaded first)."""
    _load_builtins()
    return name in _TASKS


def classes():
    """The registered task classes (see `_in_order`)."""
    return tuple(task_class for _, task_class in _in_order())


def module_of(task_class):
    """The module an export records for `task_class`: None for a built-in task."""
    module = task_class.__module__
    return None if module in BUILTIN_MODULES else module
