"""The largest batch, or the longest sequence, whose step fits a memory budget
(scripts/benchmark.py --find_max_batch, --find_max_seq_length): each probe runs the step in a
child process whose resident memory is watched."""

import dataclasses
import json
import os
import subprocess
import sys
import time

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.tools import machine
from bert_tf.tools.benchmark_step import BenchmarkSpec, build_step, initialize, step_session_config

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
# --find_max_seq_length: lengths are multiples of this (the bisection stops at this
# resolution), from this first one, up to this limit.
SEQ_LENGTH_STEP = 128
MAX_PROBED_SEQ_LENGTH = 65536


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
    with tf1.Session(graph=graph, config=step_session_config(spec, graph)) as session:
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
    def probe_batch(batch_size):
        return probe(dataclasses.replace(spec, batch_size=batch_size), memory_limit_mb)

    largest, probes = _largest_fitting("batch_size", 1, MAX_PROBED_BATCH, probe_batch,
                                       memory_limit_mb, log)
    return {"max_batch_size": largest, "memory_limit_mb": memory_limit_mb, "probes": probes}


def find_max_seq_length(spec, memory_limit_mb, log=print, probe=run_probe):
    """The longest sequence (a multiple of SEQ_LENGTH_STEP) whose step at `spec.batch_size`
    runs within `memory_limit_mb` of resident memory.

    As `find_max_batch`, over lengths 128, 256, 512, ... then bisection to a multiple of 128.
    A probe longer than the config's position table gets a table of its length (the
    benchmark's weights are random; a fine-tuning run grows a checkpoint's table the same way,
    `--max_position_embeddings`), so the search measures memory, not the table.

    Returns:
      dict: max_seq_length (0 if 128 does not fit), batch_size, memory_limit_mb, probes (a
      list of {max_seq_length, fits, peak_memory_mb}).

    Raises:
      BertTfError: if `memory_limit_mb` is not positive.
    """
    def probe_length(steps):
        length = steps * SEQ_LENGTH_STEP
        config = spec.bert_config
        if length > config.max_position_embeddings:
            config = type(config).from_dict(dict(config.to_dict(),
                                                 max_position_embeddings=length))
        return probe(dataclasses.replace(spec, bert_config=config, max_seq_length=length),
                     memory_limit_mb)

    largest, probes = _largest_fitting("max_seq_length", 1,
                                       MAX_PROBED_SEQ_LENGTH // SEQ_LENGTH_STEP, probe_length,
                                       memory_limit_mb, log, unit=SEQ_LENGTH_STEP)
    return {"max_seq_length": largest * SEQ_LENGTH_STEP, "batch_size": spec.batch_size,
            "memory_limit_mb": memory_limit_mb, "probes": probes}


def _largest_fitting(name, first, limit, probe, memory_limit_mb, log, unit=1):
    """The largest n in [first, limit] with probe(n) fitting (0 if none): n doubles from
    `first` until a probe fails, then bisection. `name` and `unit` (n * unit is the value)
    label the probes and the log lines."""
    if memory_limit_mb <= 0:
        raise BertTfError(f"--memory_limit_mb={memory_limit_mb}: pass the memory budget of one "
                          "step in MB, e.g. 8000.")
    probes = []

    def fits(n):
        ok, peak = probe(n)
        probes.append({name: n * unit, "fits": ok, "peak_memory_mb": peak})
        log(f"{name.replace('_', ' ')} {n * unit}: {'fits' if ok else 'does not fit'} (peak "
            f"{peak:.0f} MB of {memory_limit_mb} MB)")
        return ok

    good, bad = 0, None
    n = first
    while n <= limit:
        if not fits(n):
            bad = n
            break
        good, n = n, n * 2
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good, probes
