"""Initializing a graph's variables from a pre-trained checkpoint by name (`--init_checkpoint`),
and the one log line that says what was read."""

import collections
import re

import tensorflow as tf
from absl import logging

from bert_tf import table_growth
from bert_tf.encoder import albert
from bert_tf.errors import BertTfError

tf1 = tf.compat.v1


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
      BertTfError: if the checkpoint cannot be read, its encoder layers are ALBERT's and the
        model's BERT's (or the other way round), or a variable present in
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
    albert.check_layout(list(name_to_variable), [name for name, _ in init_vars], init_checkpoint)

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
