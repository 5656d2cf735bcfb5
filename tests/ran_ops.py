"""Runs a script and records the kernels its sessions ran:
`python tests/ran_ops.py OUTPUT_JSON SCRIPT [ARGS...]`.

Every `Session.run` of SCRIPT (MonitoredSession's included) is traced (RunOptions
SOFTWARE_TRACE), and the sorted op types of the kernels that executed (e.g. "_XlaRun",
"_MklMatMul") are written to OUTPUT_JSON when SCRIPT returns or exits. The tests use it to see
that --use_xla ran compiled clusters: a fact of the run itself, unlike TF's log lines, which
TF_CPP_MIN_LOG_LEVEL hides.
"""

import json
import runpy
import sys

from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import session as session_lib

from bert_tf.tools.step_profile import kernel_op_type


def kernel_op_types(run_metadata):
    """The op types of the kernels a traced run executed (after grappler's rewrites)."""
    return {op_type for device_stats in run_metadata.step_stats.dev_stats
            for op_type in map(kernel_op_type, device_stats.node_stats) if op_type is not None}


def main(output_json, script, args):
    ran = set()
    original_run = session_lib.BaseSession.run

    def traced_run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        traced = config_pb2.RunOptions()
        if options is not None:
            traced.CopyFrom(options)
        traced.trace_level = max(traced.trace_level, config_pb2.RunOptions.SOFTWARE_TRACE)
        metadata = run_metadata if run_metadata is not None else config_pb2.RunMetadata()
        result = original_run(self, fetches, feed_dict, traced, metadata)
        ran.update(kernel_op_types(metadata))
        return result

    session_lib.BaseSession.run = traced_run
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        with open(output_json, "w") as f:
            json.dump(sorted(ran), f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
