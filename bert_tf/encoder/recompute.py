"""Gradient recomputation: a layer that keeps none of its activations for the backward pass."""

import tensorflow as tf

tf1 = tf.compat.v1


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
