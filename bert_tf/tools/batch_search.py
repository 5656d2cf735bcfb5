"""The largest batch whose step fits a memory budget (scripts/benchmark.py --find_max_batch):
each probe runs the step in a child process whose resident memory is watched."""

import dataclasses
import json
import os
import subprocess
import sys
import time

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.tools import machine
from bert_tf.tools.benchmark import BenchmarkSpec, build_step, initialize
from bert_tf.training import session as session_lib

tf1 = tf.compat.v1

# --find_max_batch: one probe is a child process that builds the step at one batch size and
# runs it twice (the first run also optimises the graph). The parent reads the child's
# resident memory every PROBE_POLL_SECS and kills it past the budget; the child reports its
# own peak at the end, so a spike between two reads still counts. Resident memory, not
# RLIMIT_AS: TensorFlow reserves GBs of address space it never touches (thread stacks,
# allocator arenas: 1.5 GB of VmSize for 0.5 GB resident right after import), so an
# address-space limit says little about the RAM a batch needs.
PROBE_POLL_SECS = 0.05


# Doubling stops here even if every batch fits.
MAX_PROBED_BATCH = 4096


_PROBE = """
import json, sys
from bert_tf.tools import batch_search
print(json.dumps(batch_search.probe_step(json.loads(sys.argv[1]))))
"""


def probe_step(spec_dict):
    """In a probe child: builds and runs the step of `spec_dict` (`BenchmarkSpec` fields, the
    config as a dict) twice; returns {"peak_memory_mb": the process's peak resident MB}."""
    from bert_tf import modeling

    spec = BenchmarkSpec(**dict(spec_dict,
                                bert_config=modeling.BertConfig(**spec_dict["bert_config"])))
    graph, fetch, _ = build_step(spec)
    with tf1.Session(graph=graph, config=session_lib.session_config(spec.use_xla)) as session:
        initialize(session, graph)
        runs = spec.num_accumulation_steps if spec.mode == "train" else 1
        machine.time_steps(session, fetch, 1, 1, runs)
    return {"peak_memory_mb": (machine.status_kb("VmHWM") or 0) / 1024}


def run_probe(spec, memory_limit_mb, timeout_secs=3600):
    """Runs `probe_step` for `spec` in a child with a resident-memory budget.

    Returns:
      (fits, peak MB): fits is False if the child went over `memory_limit_mb`, was killed or
      failed (out of memory); peak MB is the child's own report, or the last reading.
    """

    spec_dict = dict(dataclasses.asdict(spec), bert_config=spec.bert_config.to_dict())
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    child = subprocess.Popen([sys.executable, "-c", _PROBE, json.dumps(spec_dict)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    highest_kb, over, start = 0, False, time.monotonic()
    while child.poll() is None:
        highest_kb = max(highest_kb, machine.status_kb("VmRSS", child.pid) or 0)
        if highest_kb > memory_limit_mb * 1024 or time.monotonic() - start > timeout_secs:
            over = True
            child.kill()
            break
        time.sleep(PROBE_POLL_SECS)
    stdout, _ = child.communicate()
    if over or child.returncode != 0:
        return False, highest_kb / 1024
    peak = json.loads(stdout.strip().splitlines()[-1])["peak_memory_mb"] or highest_kb / 1024
    return peak <= memory_limit_mb, peak


def find_max_batch(spec, memory_limit_mb, log=print, probe=run_probe):
    """The largest batch size whose step runs within `memory_limit_mb` of resident memory.

    Doubles the batch from 1 until a probe fails (or MAX_PROBED_BATCH), then bisects
    between the last that fit and the first that did not: about 2 log2(answer) probes, each
    a child process (`run_probe`).

    Args:
      spec: `BenchmarkSpec`; its batch_size is ignored.
      memory_limit_mb: the budget.
      log: function taking one string.
      probe: `run_probe` or a stand-in with its signature and result.

    Returns:
      dict: max_batch_size (0 if batch 1 does not fit), memory_limit_mb, probes (a list of
      {batch_size, fits, peak_memory_mb}).

    Raises:
      BertTfError: if `memory_limit_mb` is not positive.
    """
    if memory_limit_mb <= 0:
        raise BertTfError(f"--memory_limit_mb={memory_limit_mb}: pass the memory budget of one "
                          "step in MB, e.g. 8000.")
    probes = []

    def fits(batch_size):
        ok, peak = probe(dataclasses.replace(spec, batch_size=batch_size), memory_limit_mb)
        probes.append({"batch_size": batch_size, "fits": ok, "peak_memory_mb": peak})
        log(f"batch {batch_size}: {'fits' if ok else 'does not fit'} (peak {peak:.0f} MB of "
            f"{memory_limit_mb} MB)")
        return ok

    good, bad = 0, None
    batch_size = 1
    while batch_size <= MAX_PROBED_BATCH:
        if not fits(batch_size):
            bad = batch_size
            break
        good, batch_size = batch_size, batch_size * 2
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return {"max_batch_size": good, "memory_limit_mb": memory_limit_mb, "probes": probes}
