"""SIGKILLs this process inside TensorFlow's real checkpoint save of one step.

`install(kill_step)` makes every sharded `tf.compat.v1.train.Saver` built afterwards run a
check between writing its shards (complete, in `<prefix>_temp/`) and merging them into
`<prefix>.index` / `.data-*`; for the save of `model.ckpt-<kill_step>` the check SIGKILLs the
process. So the kill lands at the same point of the real `Saver.save` on every machine: the
new checkpoint's data is written but not in place, and everything after it (the rename, the
`checkpoint` state update, the .meta file) never happens. A save order that updates the
state first leaves a state naming a checkpoint that does not exist, which the tests catch.
If the save of that step completes anyway (the hook was not used), the process exits with
an error instead of running on.

    python tests/kill_during_save.py KILL_STEP SCRIPT [ARGS...]  # runs SCRIPT as __main__
"""

import os
import runpy
import signal
import sys

import tensorflow as tf
from tensorflow.python.ops import gen_io_ops
from tensorflow.python.training import saver as saver_lib


def install(kill_step):
    """Arms the kill for the save of step `kill_step` (call before the Saver is built)."""
    suffix = f"-{kill_step}".encode()
    merge = gen_io_ops.merge_v2_checkpoints

    def kill_at_the_step(prefix):
        if prefix.endswith(suffix):
            os.kill(os.getpid(), signal.SIGKILL)
        return prefix

    def checked_merge(checkpoint_prefixes, destination_prefix, *args, **kwargs):
        # The Saver builds the merge under control dependencies on the shard writes, so this
        # check runs once the shards are whole, and the merge waits for it.
        check = tf.numpy_function(kill_at_the_step, [destination_prefix], tf.string)
        with tf.control_dependencies([check]):
            return merge(checkpoint_prefixes, destination_prefix, *args, **kwargs)

    gen_io_ops.merge_v2_checkpoints = checked_merge
    save = saver_lib.Saver.save

    def save_or_fail(self, sess, save_path, global_step=None, *args, **kwargs):
        path = save(self, sess, save_path, global_step, *args, **kwargs)
        if path is not None and path.endswith(f"-{kill_step}"):
            sys.exit(f"kill_during_save: the save of step {kill_step} finished unkilled")
        return path

    saver_lib.Saver.save = save_or_fail


if __name__ == "__main__":
    install(int(sys.argv[1]))
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
