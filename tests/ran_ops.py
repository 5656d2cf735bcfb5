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
        for device_stats in metadata.step_stats.dev_stats:
            for node in device_stats.node_stats:
                # timeline_label reads "name = OpType(inputs)" for kernels.
                if " = " in node.timeline_label:
                    ran.add(node.timeline_label.split(" = ", 1)[1].split("(", 1)[0])
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
