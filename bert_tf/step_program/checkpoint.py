"""A trained state of an exported step as a Google-layout checkpoint (TensorFlow needed).

The checkpoint holds every state tensor under its manifest name: the weights as Google names
them, the AdamW / LAMB slots (`<var>/adam_m`, `<var>/adam_v`), global_step (and lamb_step),
as a run of run_*.py writes them. So `--init_checkpoint` of every script reads its weights,
a run with `--output_dir` there resumes from it, `--do_predict` predicts with it and
scripts/export_checkpoint.py makes a release checkpoint of it.
"""

import json
import os

from absl import logging

from bert_tf.step_program import manifest as manifest_lib
from bert_tf.step_program import tensor_files
from bert_tf.training import checkpoints


def write_checkpoint(manifest, arrays, output_dir):
    """Writes `arrays` (name -> numpy array, the state) as `output_dir/model.ckpt-<step>`,
    with the directory's `checkpoint` file and bert_config.json.

    Returns:
      The checkpoint prefix.
    """
    manifest_lib.check_state(manifest, arrays, "the trained state")
    names = [entry.name for _, entry in manifest.state_arguments()]
    step = int(arrays["global_step"])
    prefix = os.path.join(output_dir, f"model.ckpt-{step}")
    checkpoints.write_tf_checkpoint({name: arrays[name] for name in names}, prefix)
    checkpoints.write_state(output_dir, prefix)
    with open(os.path.join(output_dir, "bert_config.json"), "w") as f:
        json.dump(manifest.bert_config, f, indent=2, sort_keys=True)
    logging.info("Wrote the checkpoint %s (%d tensors).", prefix, len(names))
    return prefix


def state_to_checkpoint(step_dir, state_file, output_dir):
    """scripts/step_checkpoint.py: the state file of a run of `step_dir` as a checkpoint."""
    manifest = manifest_lib.load(os.path.expanduser(step_dir))
    arrays = tensor_files.load(os.path.expanduser(state_file), "state_file")
    manifest_lib.check_state(manifest, arrays, state_file)
    os.makedirs(os.path.expanduser(output_dir), exist_ok=True)
    return write_checkpoint(manifest, arrays, os.path.expanduser(output_dir))
