"""Optimizers and the training op: AdamW / LAMB, warmup + linear decay, clipping,
gradient accumulation and loss scaling.

A drop-in for the original Google `optimization.py`: `create_optimizer` keeps
its positional arguments and its numbers (linear warmup, linear decay to 0,
global-norm clipping at 1.0, AdamW without bias correction, decoupled weight
decay 0.01 not applied to LayerNorm or bias, Adam slots named `<var>/adam_m`
and `<var>/adam_v`), so Google checkpoints that carry optimizer slots restore.

Both optimizers derive from `tf.compat.v1.train.Optimizer` and implement the
per-variable hooks, so the base class's `apply_gradients` does the cross-replica
all-reduce (a SUM) under a `tf.distribute` strategy. `create_optimizer` instead
all-reduces in the replica context itself, so that clipping, the gradient-norm
summary and the loss-scale overflow check see the global gradient (the same
numbers as on one device); it then applies the reduced gradients without a
second all-reduce.

Updates, steps and windows: one `session.run` of the train op consumes one
micro-batch; with `num_accumulation_steps=N` every N-th run applies the mean of
the N micro-batch gradients. `global_step` counts applied updates, so the
learning-rate schedule, `num_train_steps` and checkpoint steps are in updates.
"""

import dataclasses
import re

import tensorflow as tf
from absl import logging

from bert_tf.errors import BertTfError
from bert_tf.options import TrainOptions  # The optimizer's defaults: the flags'.

tf1 = tf.compat.v1

# Variables whose name matches one of these regexes get no weight decay.
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
# Dynamic loss scaling as in NVIDIA's BERT: start at 2**15, halve on overflow,
# double after this many updates in a row with finite gradients.
INITIAL_DYNAMIC_LOSS_SCALE = 2.0**15
DYNAMIC_LOSS_SCALE_PERIOD = 2000


def learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps, global_step):
    """The original BERT learning rate: linear warmup, then linear decay to 0.

    Exactly the original formula: a linear (power 1) polynomial decay from
    `init_lr` at step 0 to 0 at `num_train_steps` (constant 0 afterwards), and
    for `global_step < num_warmup_steps` instead `init_lr * global_step /
    num_warmup_steps`. The decay starts at step 0, so right after warmup the
    rate is `init_lr * (1 - num_warmup_steps / num_train_steps)`.

    Args:
      init_lr: peak learning rate (Python float).
      num_train_steps: optimizer updates until the rate reaches 0 (> 0).
      num_warmup_steps: updates of linear warmup (0 or None: no warmup).
      global_step: scalar integer tensor or variable, updates done so far.

    Returns:
      A scalar float32 tensor.
    """
    step = tf.cast(global_step, tf.float32)
    # tf.compat.v1.train.polynomial_decay(init_lr, step, num_train_steps, 0.0,
    # power=1.0, cycle=False), written out: that function lives in TF's legacy Keras.
    decay_fraction = tf.minimum(step, float(num_train_steps)) / float(num_train_steps)
    learning_rate = init_lr * (1.0 - decay_fraction)
    if num_warmup_steps:
        warmup_learning_rate = init_lr * step / float(num_warmup_steps)
        is_warmup = tf.cast(step < float(num_warmup_steps), tf.float32)
        learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate
    return learning_rate


class _DecoupledDecayOptimizer(tf1.train.Optimizer):
    """Shared plumbing of AdamW and LAMB: slots, weight-decay exclusion, masking.

    Subclasses implement `_updates(grad, var, m, v)` -> new (var, m, v) values.
    While `_condition` (a scalar bool tensor) is set, every write keeps the old
    value where the condition is false; that is how accumulation windows and
    skipped (non-finite) steps leave the variables untouched without a
    `tf.cond`, which cannot contain a cross-replica merge.
    """

    def __init__(self,
                 learning_rate,
                 weight_decay_rate=0.0,
                 beta_1=0.9,
                 beta_2=0.999,
                 epsilon=1e-6,
                 exclude_from_weight_decay=None,
                 name=None):
        # The original's signature and defaults; `name` defaults to the class name.
        super().__init__(use_locking=False, name=name or type(self).__name__)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay
        self._condition = None
        # True when the gradients handed to apply_gradients are already summed over replicas.
        self._gradients_are_reduced = False

    def apply_gradients_where(self, condition, grads_and_vars, name=None):
        """`apply_gradients` whose writes take effect only where `condition` is true.

        Does not touch any global step: the caller counts updates.

        Args:
          condition: scalar bool tensor, the same on every replica.
          grads_and_vars: list of (gradient, variable) pairs.
          name: optional name of the returned op.

        Returns:
          The update op.
        """
        self._condition = condition
        try:
            # Under a strategy the merge (and so `_resource_apply_dense`) runs
            # inside this call, while `_condition` is still set.
            return self.apply_gradients(grads_and_vars, name=name)
        finally:
            self._condition = None

    def _distributed_apply(self, distribution, grads_and_vars, global_step=None, name=None):
        """The base class's cross-replica apply, minus the all-reduce when already done."""
        if not self._gradients_are_reduced:
            return super()._distributed_apply(distribution, grads_and_vars, global_step, name)
        grads_and_vars = list(grads_and_vars)
        var_list = [var for _, var in grads_and_vars]
        with tf.init_scope():
            self._create_slots(var_list)
        with tf1.name_scope(name, self._name) as name:
            self._prepare()
            update_ops = []
            for grad, var in grads_and_vars:
                # `grad` holds one (identical) copy per replica; each device applies its own.
                update_ops.extend(distribution.extended.update(
                    var, lambda var, grad: self._resource_apply_dense(grad, var), args=(grad,),
                    group=False))
            finish_ops = distribution.extended.update_non_slot(
                distribution.extended.non_slot_devices(var_list),
                lambda: self._finish(update_ops, "update"), group=False)
            if global_step is None:
                return distribution.group(finish_ops, name=name)
            with tf.control_dependencies(finish_ops):
                return distribution.group(distribution.extended.update(
                    global_step, lambda step: step.assign_add(1, read_value=False)), name=name)

    def _create_slots(self, var_list):
        for var in var_list:
            self._zeros_slot(var, "adam_m", "adam_m")
            self._zeros_slot(var, "adam_v", "adam_v")

    def _do_use_weight_decay(self, param_name):
        """Whether to use L2 weight decay for `param_name`."""
        if not self.weight_decay_rate:
            return False
        for pattern in self.exclude_from_weight_decay or ():
            if re.search(pattern, param_name) is not None:
                return False
        return True

    def _get_variable_name(self, param_name):
        """Gets the variable name from the tensor name ("a/b:0" -> "a/b")."""
        match = re.match("^(.*):\\d+$", param_name)
        return match.group(1) if match is not None else param_name

    def _masked_assign(self, var, new_value):
        if self._condition is not None:
            new_value = tf.where(self._condition, new_value, tf.convert_to_tensor(var))
        return var.assign(new_value, use_locking=self._use_locking, read_value=False)

    def _resource_apply_dense(self, grad, var):
        m = self.get_slot(var, "adam_m")
        v = self.get_slot(var, "adam_v")
        grad = tf.cast(grad, var.dtype.base_dtype)
        next_param, next_m, next_v = self._updates(grad, var, m, v)
        return tf.group(self._masked_assign(var, next_param),
                        self._masked_assign(m, next_m),
                        self._masked_assign(v, next_v))

    def _resource_apply_sparse(self, grad, var, indices):
        # The dense moments decay every row anyway, so apply the gradient dense
        # (as the original did implicitly).
        dense_grad = tf.math.unsorted_segment_sum(grad, indices, tf.shape(var)[0])
        return self._resource_apply_dense(dense_grad, var)

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices):
        # The dense sum above adds duplicate rows up itself; no second deduplication.
        return self._resource_apply_sparse(grad, handle, indices)

    # Reference (non-resource) variables, e.g. under tf.compat.v1.disable_v2_behavior().
    def _apply_dense(self, grad, var):
        return self._resource_apply_dense(grad, var)

    def _apply_sparse(self, grad, var):
        return self._resource_apply_dense(tf.convert_to_tensor(grad), var)

    def _learning_rate(self, dtype):
        return tf.cast(self._call_if_callable(self.learning_rate), dtype)

    def _decays(self, var):
        """Whether `var` gets the decoupled weight decay."""
        return self._do_use_weight_decay(self._get_variable_name(var.name))

    def _decayed_update(self, update, var):
        """Adds the decoupled weight decay `weight_decay_rate * var` to `update`."""
        if self._decays(var):
            update += self.weight_decay_rate * tf.convert_to_tensor(var)
        return update

    def _updates(self, grad, var, m, v):
        raise NotImplementedError


class AdamWeightDecayOptimizer(_DecoupledDecayOptimizer):
    """Adam with decoupled weight decay, as in the original BERT (no bias correction).

        m <- beta_1 m + (1 - beta_1) g
        v <- beta_2 v + (1 - beta_2) g^2
        w <- w - lr (m / (sqrt(v) + epsilon) + weight_decay_rate w)

    The decay term is left out for variables matching
    `exclude_from_weight_decay`. Slots: `<var>/adam_m`, `<var>/adam_v`.
    The betas are held in the variables' dtype and 1 - beta is computed in it, as TF's fused
    Adam kernel (used whenever every write applies) does; the original computed 1 - beta_2 in
    float64, a 4.7e-5 relative difference in the weight of g^2 for beta_2 = 0.999.
    Unlike the original, `apply_gradients(..., global_step=gs)` increments `gs`
    (the base-class contract); `create_optimizer` relies on it.
    """

    def _updates(self, grad, var, m, v):
        # The betas as the fused kernel sees them: in the variables' dtype, 1 - beta computed
        # in it too (for 0.999 in float32, 1 - beta_2 = 0.00100004673), so both paths agree.
        dtype = var.dtype.base_dtype.as_numpy_dtype
        beta_1, beta_2 = dtype(self.beta_1), dtype(self.beta_2)
        next_m = beta_1 * m + (dtype(1) - beta_1) * grad
        next_v = beta_2 * v + (dtype(1) - beta_2) * tf.square(grad)
        update = self._decayed_update(next_m / (tf.sqrt(next_v) + self.epsilon), var)
        next_param = var - self._learning_rate(var.dtype.base_dtype) * update
        return next_param, next_m, next_v

    def _prepare(self):
        super()._prepare()
        self._fused_scalars_cache = {}  # (dtype, device) -> `_fused_scalars`

    def _fused_scalars(self, var):
        """The scalar inputs the fused updates of `var`'s dtype and device share, built once
        per apply (not once per variable: five ops fewer per variable to build, ~500 for
        MiniLM).

        Returns:
          dict of scalars in `var`'s dtype: learning_rate, decay_keep (1 - learning_rate
          times weight_decay_rate: what the decay keeps of a weight), beta_1, beta_2,
          epsilon, and zero (the beta powers).
        """
        dtype = var.dtype.base_dtype
        scalars = self._fused_scalars_cache.get((dtype, var.device))
        if scalars is None:
            # On the variable's device, not colocated with it: they serve its neighbours too.
            graph = tf1.get_default_graph()
            with graph.colocate_with(None, ignore_existing=True), tf.device(var.device):
                learning_rate = self._learning_rate(dtype)
                scalars = dict(learning_rate=learning_rate,
                               decay_keep=1.0 - learning_rate * self.weight_decay_rate,
                               beta_1=tf.constant(self.beta_1, dtype),
                               beta_2=tf.constant(self.beta_2, dtype),
                               epsilon=tf.constant(self.epsilon, dtype),
                               zero=tf.constant(0.0, dtype))
            self._fused_scalars_cache[(dtype, var.device)] = scalars
        return scalars

    def _resource_apply_dense(self, grad, var):
        """The same update through TF's fused Adam kernel when every write applies.

        The element-wise graph above reads and writes the 110M BERT-base weights and moments
        several times per step; `ResourceApplyAdam` does it in one pass, a faster update on
        CPU (docs/benchmarks-history.md has the measurement). With beta powers of 0 its bias
        correction is 1, as in the original, and the decoupled decay is applied first from the
        same pre-update weights.
        """
        if self._condition is not None or not hasattr(var, "handle"):  # masked or ref variable
            return super()._resource_apply_dense(grad, var)
        dtype = var.dtype.base_dtype
        scalars = self._fused_scalars(var)
        grad = tf.cast(grad, dtype)
        decay = []
        if self._decays(var):
            # Only once the gradient exists, i.e. after the forward and backward passes read
            # `var`: nothing else orders this write after them, so it could run at the start of
            # the step (the forward pass might then see decayed weights: runs differ by ~1e-6
            # and a resumed run cannot be exact; and TF copies the weights to keep an earlier
            # read intact: a copy of [V, H] per step for BERT's word embeddings).
            with tf.control_dependencies([grad]):
                # w * (1 - lr wd) is w - lr wd w to rounding; a plain assign takes the product's
                # buffer, where assign_sub reads the weights a second time.
                decay.append(var.assign(tf.convert_to_tensor(var) * scalars["decay_keep"],
                                        read_value=False))
        with tf.control_dependencies(decay):
            return tf.raw_ops.ResourceApplyAdam(
                var=var.handle, m=self.get_slot(var, "adam_m").handle,
                v=self.get_slot(var, "adam_v").handle, beta1_power=scalars["zero"],
                beta2_power=scalars["zero"], lr=scalars["learning_rate"],
                beta1=scalars["beta_1"], beta2=scalars["beta_2"], epsilon=scalars["epsilon"],
                grad=grad, use_locking=self._use_locking)


class LAMBOptimizer(_DecoupledDecayOptimizer):
    """LAMB (You et al., 2019): bias-corrected Adam direction scaled per variable.

        m <- beta_1 m + (1 - beta_1) g,   v <- beta_2 v + (1 - beta_2) g^2
        u = m / (1 - beta_1^t) / (sqrt(v / (1 - beta_2^t)) + epsilon) + weight_decay_rate w
        w <- w - lr * (||w|| / ||u||) * u      (ratio 1 where either norm is 0)

    `t` counts this optimizer's applied updates (a variable `lamb_step`, so it
    survives checkpoints). Weight decay exclusion as in AdamW; the trust ratio
    applies to every variable.
    """

    def _create_slots(self, var_list):
        super()._create_slots(var_list)
        first_var = min(var_list, key=lambda var: var.name)
        self._create_non_slot_variable(initial_value=0.0, name="lamb_step",
                                       colocate_with=first_var)

    def _step_variable(self):
        # The base class keys non-slot variables as it made them: by graph, or None in a
        # program that runs eagerly outside its functions (a `tf.compat.v1.wrap_function`).
        graph = None if tf1.executing_eagerly_outside_functions() else tf1.get_default_graph()
        return self._get_non_slot_variable("lamb_step", graph=graph)

    def _updates(self, grad, var, m, v):
        dtype = var.dtype.base_dtype
        step = tf.cast(self._step_variable(), dtype) + 1.0
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        m_hat = next_m / (1.0 - tf.pow(tf.cast(self.beta_1, dtype), step))
        v_hat = next_v / (1.0 - tf.pow(tf.cast(self.beta_2, dtype), step))
        update = self._decayed_update(m_hat / (tf.sqrt(v_hat) + self.epsilon), var)
        param_norm = tf.norm(var)
        update_norm = tf.norm(update)
        trust_ratio = tf.where((param_norm > 0.0) & (update_norm > 0.0),
                               param_norm / tf.maximum(update_norm, 1e-30), 1.0)
        next_param = var - self._learning_rate(dtype) * trust_ratio * update
        return next_param, next_m, next_v

    def _finish(self, update_ops, name_scope):
        step = self._step_variable()
        with tf.control_dependencies(update_ops):
            increment = 1.0 if self._condition is None else tf.cast(self._condition, step.dtype)
            update_step = step.assign_add(increment, use_locking=self._use_locking,
                                          read_value=False)
        return tf.group(*update_ops, update_step, name=name_scope)


_OPTIMIZERS = {"adamw": AdamWeightDecayOptimizer, "lamb": LAMBOptimizer}


def _state_variable(name, initial_value, dtype, local):
    """A non-trainable scalar the train op keeps between runs.

    `local` ones (accumulation window state) go to LOCAL_VARIABLES, are not
    checkpointed, and are per replica (ON_READ); the others (loss scale) are
    saved and identical on every replica.
    """
    if local:
        return tf1.get_variable(
            name, shape=[], dtype=dtype, initializer=tf1.constant_initializer(initial_value),
            trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES],
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    return tf1.get_variable(
        name, shape=[], dtype=dtype, initializer=tf1.constant_initializer(initial_value),
        trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def _check_arguments(init_lr, num_train_steps, num_warmup_steps, optimizer,
                     num_accumulation_steps, loss_scale):
    if optimizer not in _OPTIMIZERS:
        raise BertTfError(f"--optimizer: unknown optimizer '{optimizer}'; use one of "
                          f"{', '.join(_OPTIMIZERS)}.")
    if not num_train_steps or num_train_steps < 1:
        raise BertTfError(f"--num_train_steps: got {num_train_steps}; pass a positive number "
                          "of optimizer updates.")
    if num_warmup_steps is not None and num_warmup_steps < 0:
        raise BertTfError(f"--num_warmup_steps: got {num_warmup_steps}; pass 0 or more.")
    if init_lr <= 0:
        raise BertTfError(f"--learning_rate: got {init_lr}; pass a positive learning rate.")
    if int(num_accumulation_steps) != num_accumulation_steps or num_accumulation_steps < 1:
        raise BertTfError(f"--num_accumulation_steps: got {num_accumulation_steps}; pass a "
                          "whole number >= 1 (1 = no accumulation).")
    if not (loss_scale is None or loss_scale == "dynamic"
            or (isinstance(loss_scale, (int, float)) and loss_scale > 0)):
        raise BertTfError(f"--loss_scale: got {loss_scale!r}; pass a positive number, "
                          "'dynamic', or nothing.")


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu=False,
                     optimizer=TrainOptions.optimizer,
                     num_accumulation_steps=TrainOptions.num_accumulation_steps, clip_norm=1.0,
                     weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                     loss_scale=None, tvars=None, trainable=None, static_shapes=False):
    """Creates the training op: one run consumes one micro-batch.

    Call it where the loss is built; inside a `tf.distribute` replica function
    that is once per replica: `loss` is then this replica's mean loss, divided
    here by the number of replicas so the summed all-reduce yields the mean
    over the global batch.

    Args:
      loss: scalar loss tensor, the mean over this (micro-)batch.
      init_lr: peak learning rate.
      num_train_steps: optimizer updates of the decay schedule (updates, not
        micro-batches).
      num_warmup_steps: updates of linear warmup.
      use_tpu: accepted for compatibility and ignored (the TPU
        CrossShardOptimizer is gone; strategies all-reduce in apply_gradients).
      optimizer: "adamw" (the original) or "lamb".
      num_accumulation_steps: N; every N-th run applies the mean of the last N
        micro-batch gradients, the same update as one batch N times as large.
      clip_norm: the mean gradient (over the global batch and the window) is
        clipped to this global norm before the update.
      weight_decay_rate: decoupled weight decay; not for LayerNorm / bias.
      beta_1, beta_2, epsilon: Adam's first- and second-moment decays and its
        denominator epsilon.
      loss_scale: None (no scaling); a number (static scale: the loss is
        multiplied by it and the gradients divided back); or "dynamic": start
        at 2**15, and on non-finite gradients skip the update (variables,
        slots and `global_step` untouched, the accumulation window is
        discarded) and halve the scale (not below 1); double it after 2000
        applied updates in a row. The scale is the saved variable `loss_scale`.
      tvars: variables to train (default: all trainable variables).
      trainable: a `TrainableSelection` narrowing `tvars` (frozen variables get no update
        and no optimizer slots).
      static_shapes: keep every gradient dense, so that the step has no op of data-dependent
        shape (the rows of a lookup's gradient are deduplicated with `tf.unique` otherwise):
        for a step compiled whole (`bert_tf.step_program`).

    Returns:
      The train op. Summaries "learning_rate" and "global_gradient_norm" (the
      norm before clipping of the gradient being applied; with accumulation,
      of the last applied one) are added to the default summary collection.
    """
    del use_tpu  # CrossShardOptimizer is gone; a strategy's replica context does its job.
    _check_arguments(init_lr, num_train_steps, num_warmup_steps, optimizer,
                     num_accumulation_steps, loss_scale)
    num_accumulation_steps = int(num_accumulation_steps)
    global_step = tf1.train.get_or_create_global_step()
    opt = _scheduled_optimizer(optimizer, init_lr, num_train_steps, num_warmup_steps,
                               global_step, weight_decay_rate, beta_1, beta_2, epsilon)
    tvars = _variables_to_train(tvars, trainable)
    replica_context = tf.distribute.get_replica_context()
    num_replicas = replica_context.num_replicas_in_sync if replica_context else 1
    # The original path: every run applies its own gradient, no window and no overflow check.
    applies_every_run = num_accumulation_steps == 1 and loss_scale != "dynamic"
    # Only there, on one replica, does a lookup's gradient stay sparse up to the update:
    # accumulation and the all-reduce want one dense tensor per variable.
    keep_sparse = applies_every_run and num_replicas == 1 and not static_shapes
    grads, tvars, scaling = _unscaled_gradients(loss, tvars, loss_scale, num_replicas,
                                                keep_sparse)
    grads, window = _accumulation_window(grads, tvars, num_accumulation_steps, opt)
    grads, gradient_norm = _clipped_global_gradients(grads, clip_norm, replica_context, opt)
    if applies_every_run:
        # apply_gradients increments global_step.
        tf1.summary.scalar("global_gradient_norm", gradient_norm)
        return opt.apply_gradients(zip(grads, tvars, strict=True), global_step=global_step)
    return _masked_train_op(opt, grads, tvars, gradient_norm, global_step, window, scaling)


def _scheduled_optimizer(optimizer, init_lr, num_train_steps, num_warmup_steps, global_step,
                         weight_decay_rate, beta_1, beta_2, epsilon):
    """The "adamw" / "lamb" optimizer on `learning_rate_schedule`, whose rate it summarises
    as "learning_rate"; LayerNorm and bias variables get no weight decay."""
    learning_rate = learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps,
                                           global_step)
    tf1.summary.scalar("learning_rate", learning_rate)
    return _OPTIMIZERS[optimizer](learning_rate=learning_rate,
                                  weight_decay_rate=weight_decay_rate,
                                  beta_1=beta_1,
                                  beta_2=beta_2,
                                  epsilon=epsilon,
                                  exclude_from_weight_decay=list(EXCLUDE_FROM_WEIGHT_DECAY))


def _variables_to_train(tvars, trainable):
    """`tvars` (default: every trainable variable) narrowed by `trainable`, if given."""
    if tvars is None:
        tvars = tf1.trainable_variables()
    if trainable is not None:
        tvars = trainable.select(tvars)
    return tvars


@dataclasses.dataclass(frozen=True)
class _LossScaling:
    """How one train op scales its loss.

    Attributes:
      value: scalar float32 tensor the loss is multiplied by and the gradients divided by;
        None: no scaling.
      scale: the dynamic scale's saved variable `loss_scale` (None unless dynamic).
      good_steps: int64 variable, finite updates in a row since the dynamic scale last
        changed (None unless dynamic).
    """

    value: object = None
    scale: object = None
    good_steps: object = None

    @property
    def dynamic(self):
        """Whether the scale adapts (`loss_scale="dynamic"`)."""
        return self.scale is not None


def _loss_scaling(loss_scale):
    """The `_LossScaling` of `create_optimizer`'s `loss_scale` (its variables made here)."""
    if loss_scale == "dynamic":
        scale = _state_variable("loss_scale", INITIAL_DYNAMIC_LOSS_SCALE, tf.float32,
                                local=False)
        good_steps = _state_variable("loss_scale_good_steps", 0, tf.int64, local=False)
        return _LossScaling(tf.convert_to_tensor(scale), scale, good_steps)
    if loss_scale is not None:
        return _LossScaling(tf.constant(float(loss_scale)))
    return _LossScaling()


def _unscaled_gradients(loss, tvars, loss_scale, num_replicas, keep_sparse):
    """This replica's share of the gradient of `loss`, computed on the scaled loss and divided
    back.

    Args:
      loss: scalar loss tensor, this replica's mean; divided by `num_replicas` here.
      tvars: the variables to train.
      loss_scale: as in `create_optimizer`.
      num_replicas: replicas in sync (1 without a strategy).
      keep_sparse: leave a lookup's gradient as IndexedSlices (rows deduplicated); else
        every gradient is a dense tensor of its variable's shape.

    Returns:
      (grads, tvars, scaling): the gradients of the variables the loss depends on, those
      variables (in `tvars`' order), and the `_LossScaling`.

    Raises:
      BertTfError: the loss depends on none of `tvars`.
    """
    loss = tf.cast(loss, tf.float32)
    if num_replicas > 1:
        loss = loss / float(num_replicas)
    scaling = _loss_scaling(loss_scale)
    scale_value = scaling.value
    grads = tf.gradients(loss if scale_value is None else loss * scale_value, tvars)
    pairs = [(_deduplicated(grad) if keep_sparse else _dense(grad), var)
             for grad, var in zip(grads, tvars, strict=True) if grad is not None]
    if not pairs:
        raise BertTfError("create_optimizer: the loss does not depend on any trainable "
                          "variable; check `tvars` and the model graph.")
    grads, tvars = [grad for grad, _ in pairs], [var for _, var in pairs]
    if scale_value is not None:
        grads = [_map_values(grad, lambda values: values / scale_value) for grad in grads]
    return grads, tvars, scaling


def _clipped_global_gradients(grads, clip_norm, replica_context, opt):
    """`grads` summed over the replicas in sync, then clipped to the global norm `clip_norm`.

    Returns:
      (grads, gradient_norm): the clipped gradients and their global norm before clipping
      (a scalar float32 tensor).
    """
    if replica_context and replica_context.num_replicas_in_sync > 1:
        # Every replica now holds the global mean gradient (see the module docstring).
        grads = _sum_over_replicas(replica_context, grads)
        opt._gradients_are_reduced = True
    return tf.clip_by_global_norm(grads, clip_norm)


@dataclasses.dataclass(frozen=True)
class _Window:
    """The accumulation window one run of the train op is in.

    Attributes:
      end: scalar bool tensor, whether this run completes a window (always true without
        accumulation).
      sums: (accumulator variable, its value after adding this micro-batch) per variable:
        the window's sum of gradients, of the variable's shape (empty without accumulation).
      micro_step: int64 variable, micro-batches seen in the window, 0 .. N-1 between runs
        (None without accumulation).
      micro_steps_done: scalar int64 tensor, `micro_step` counting this run.
    """

    end: object
    sums: tuple = ()
    micro_step: object = None
    micro_steps_done: object = None

    @property
    def accumulates(self):
        """Whether runs accumulate gradients (`num_accumulation_steps` > 1)."""
        return self.micro_step is not None


def _accumulation_window(grads, tvars, num_accumulation_steps, opt):
    """Adds this micro-batch's gradients to the window's sums (with N > 1 micro-batches).

    Returns:
      (grads, window): the window's mean gradients so far (sums / N; `grads` unchanged
      without accumulation) and the `_Window`.
    """
    if num_accumulation_steps == 1:
        return grads, _Window(end=tf.constant(True))
    # Sums of this window's micro-batch gradients, one per variable (per replica).
    sums = []
    for grad, var in zip(grads, tvars, strict=True):
        accumulator = tf1.get_variable(
            opt._get_variable_name(var.name) + "/accum_grad", shape=var.shape,
            dtype=grad.dtype, initializer=tf1.zeros_initializer(), trainable=False,
            collections=[tf1.GraphKeys.LOCAL_VARIABLES],
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM)
        sums.append((accumulator, tf.convert_to_tensor(accumulator.assign_add(grad))))
    micro_step = _state_variable("accum_micro_step", 0, tf.int64, local=True)
    micro_steps_done = tf.convert_to_tensor(micro_step.assign_add(1))
    end_of_window = micro_steps_done >= num_accumulation_steps
    grads = [total / float(num_accumulation_steps) for _, total in sums]
    return grads, _Window(end_of_window, tuple(sums), micro_step, micro_steps_done)


def _masked_train_op(opt, grads, tvars, gradient_norm, global_step, window, scaling):
    """The train op of runs that do not all apply: it writes the update only at the end of a
    window and (dynamic scaling) where the gradients are finite.

    Every run computes the optimizer step and writes it only where it applies (no `tf.cond`,
    which cannot hold a cross-replica merge); under a strategy every run also all-reduces.
    After the update the op counts `global_step` up, empties a finished window and moves the
    dynamic loss scale.

    Args:
      opt: the `_DecoupledDecayOptimizer`.
      grads, tvars: the clipped gradients and their variables.
      gradient_norm: scalar float32 tensor, the global norm of `grads` before clipping.
      global_step: the global step variable (counts applied updates).
      window: the `_Window` of this run.
      scaling: the `_LossScaling`.

    Returns:
      The train op (a group named "train_op").
    """
    apply_now = window.end
    if scaling.dynamic:
        # A non-finite gradient anywhere makes the global norm non-finite.
        finite = tf.math.is_finite(gradient_norm)
        apply_now = tf.logical_and(apply_now, finite)

    # The summary shows the last applied gradient, not a partial window.
    applied_norm = _state_variable("last_applied_gradient_norm", 0.0, tf.float32, local=True)
    applied_norm_value = tf.where(apply_now, gradient_norm, tf.convert_to_tensor(applied_norm))
    tf1.summary.scalar("global_gradient_norm", applied_norm_value)

    update_op = opt.apply_gradients_where(apply_now, list(zip(grads, tvars, strict=True)))
    after_update = [applied_norm.assign(applied_norm_value, read_value=False)]
    with tf.control_dependencies([update_op]):
        after_update.append(global_step.assign_add(tf.cast(apply_now, global_step.dtype),
                                                   read_value=False))
        if window.accumulates:
            after_update.extend(_reset_finished_window(window))
        if scaling.dynamic:
            after_update.extend(_update_dynamic_scale(scaling.scale, scaling.good_steps,
                                                      window.end, finite))
    return tf.group(update_op, *after_update, name="train_op")


def _reset_finished_window(window):
    """Ops that zero the sums and the micro-step count at the end of a window."""
    resets = [accumulator.assign(tf.where(window.end, tf.zeros_like(total), total),
                                 read_value=False)
              for accumulator, total in window.sums]
    resets.append(window.micro_step.assign(
        tf.where(window.end, tf.zeros_like(window.micro_steps_done), window.micro_steps_done),
        read_value=False))
    return resets


def _update_dynamic_scale(scale, good_steps, end_of_window, finite):
    """Ops that halve the scale after an overflow and double it after a good run."""
    good = tf.convert_to_tensor(good_steps)
    old_scale = tf.convert_to_tensor(scale)
    next_good = tf.where(finite, good + 1, tf.zeros_like(good))
    grow = next_good >= DYNAMIC_LOSS_SCALE_PERIOD
    next_scale = tf.where(finite, tf.where(grow, old_scale * 2.0, old_scale),
                          tf.maximum(old_scale / 2.0, 1.0))
    next_good = tf.where(grow, tf.zeros_like(next_good), next_good)
    # Between windows (accumulating micro-batches) nothing changes.
    return [scale.assign(tf.where(end_of_window, next_scale, old_scale), read_value=False),
            good_steps.assign(tf.where(end_of_window, next_good, good), read_value=False)]


def _sum_over_replicas(replica_context, tensors):
    """All-reduces (sums) `tensors` from a replica context; each replica gets the sum.

    `ReplicaContext.all_reduce` would also do, but it wraps the merge in a
    custom gradient that fails on mirrored variables in graph mode.
    """
    def batch_sum(strategy, *per_replica_tensors):
        return strategy.extended.batch_reduce_to(
            tf.distribute.ReduceOp.SUM, [(value, value) for value in per_replica_tensors])
    return list(replica_context.merge_call(batch_sum, args=tuple(tensors)))


def _dense(grad):
    """Gradients of gathers arrive as IndexedSlices; accumulation and all-reduce want dense."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def _deduplicated(grad):
    """A gather's gradient (IndexedSlices, a row per lookup) with each row once, duplicates
    summed; other gradients as they are.

    The global norm and the clip then read and scale the rows a batch touched (at most
    batch x seq of them) instead of the whole [V, H] table, and the norm of the values is
    the dense gradient's. The update still densifies it (`_resource_apply_sparse`).
    """
    if not isinstance(grad, tf.IndexedSlices):
        return grad
    rows, positions = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, positions, tf.shape(rows)[0])
    return tf.IndexedSlices(values, rows, grad.dense_shape)


def _map_values(grad, function):
    """`function` applied to a dense gradient, or to an IndexedSlices gradient's values."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(function(grad.values), grad.indices, grad.dense_shape)
    return function(grad)


# Checkpoint variables that hold optimizer state rather than model weights (the AdamW / LAMB
# slots and step count, the dynamic loss scale, the step counter).
_OPTIMIZER_STATE_SUFFIXES = ("/adam_m", "/adam_v")
_OPTIMIZER_STATE_NAMES = ("global_step", "lamb_step", "loss_scale", "loss_scale_good_steps")


def is_optimizer_state(name):
    """Whether checkpoint variable `name` is optimizer state, not part of the model."""
    return name.endswith(_OPTIMIZER_STATE_SUFFIXES) or name.split("/")[-1] in (
        _OPTIMIZER_STATE_NAMES)


@dataclasses.dataclass(frozen=True)
class TrainableSelection:
    """Which variables train (`--trainable_scopes`, `--freeze_scopes`, `--freeze_layers`).

    Scopes are variable name prefixes ("bert/embeddings", "bert/encoder/layer_0"); a variable
    trains if it is under a trainable scope (when any are given) and under no frozen one.
    `freeze_layers=K` freezes bert/embeddings and bert/encoder/layer_0 .. layer_{K-1}.
    """

    trainable_scopes: tuple = ()
    freeze_scopes: tuple = ()
    freeze_layers: int | None = None

    def select(self, tvars):
        """The variables of `tvars` that train; logs how many parameters train.

        Raises:
          BertTfError: a scope that matches no variable, or more frozen layers than the model
            has, naming the flag.
        """
        frozen_scopes = list(self.freeze_scopes)
        if self.freeze_layers:
            layers = {name.split("/")[2] for name in (v.op.name for v in tvars)
                      if name.startswith("bert/encoder/layer_")}
            if self.freeze_layers > len(layers):
                raise BertTfError(f"--freeze_layers={self.freeze_layers}: the model has "
                                  f"{len(layers)} encoder layers; pass at most {len(layers)}.")
            frozen_scopes += ["bert/embeddings"] + [f"bert/encoder/layer_{i}"
                                                    for i in range(self.freeze_layers)]
        for flag, scopes in (("trainable_scopes", self.trainable_scopes),
                             ("freeze_scopes", self.freeze_scopes)):
            for scope in scopes:
                if not any(_under(v.op.name, scope) for v in tvars):
                    raise BertTfError(
                        f"--{flag}: '{scope}' matches no variable; pass name prefixes such as "
                        "bert/embeddings or bert/encoder/layer_0 (see the checkpoint's "
                        "variable names).")
        selected = [v for v in tvars
                    if (not self.trainable_scopes
                        or any(_under(v.op.name, s) for s in self.trainable_scopes))
                    and not any(_under(v.op.name, s) for s in frozen_scopes)]
        if len(selected) != len(tvars):
            def count(variables):
                return sum(v.shape.num_elements() for v in variables)

            logging.info("Training %d of %d parameters (%d of %d variables; the others are "
                         "frozen).", count(selected), count(tvars), len(selected), len(tvars))
        return selected


def _under(name, scope):
    """Whether variable `name` is `scope` or inside it ("bert/encoder/layer_1" is not inside
    "bert/encoder/layer_")."""
    scope = scope.rstrip("/")
    return name == scope or name.startswith(scope + "/") or (
        scope.endswith("_") and name.startswith(scope))
