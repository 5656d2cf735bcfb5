"""What this machine does beside a benchmark's step: the time of a session's steps, its peak
matmul rate at a precision, the oneDNN kernels TensorFlow picks, its CPU, and the peak memory
of a process."""

import os
import platform
import re
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from bert_tf import precision

tf1 = tf.compat.v1

# Run in a child process with ONEDNN_VERBOSE=1: one matmul in the dtype given as argv[1].
_ONEDNN_PROBE = """
import sys
import tensorflow as tf
tf1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    dtype = tf.as_dtype(sys.argv[1])
    a = tf.cast(tf.random.uniform([512, 512]), dtype)
    b = tf.cast(tf.random.uniform([512, 512]), dtype)
    product = tf.matmul(a, b)
    with tf1.Session() as session:
        session.run(product)
"""


def time_steps(session, fetch, num_warmup_steps, num_steps, runs_per_step=1, options=None):
    """Times `num_steps` steps of `runs_per_step` session runs after untimed warm-up.

    Args:
      options: `tf.compat.v1.RunOptions` of every run (e.g. a multi-worker time limit).

    Returns:
      list of `num_steps` wall-clock step times in seconds.
    """
    for _ in range(num_warmup_steps * runs_per_step):
        session.run(fetch, options=options)
    times = []
    for _ in range(num_steps):
        start = time.perf_counter()
        for _ in range(runs_per_step):
            session.run(fetch, options=options)
        times.append(time.perf_counter() - start)
    return times


def _memory_devices():
    return [device.name.replace("/device:", "")
            for device in tf.config.list_logical_devices("GPU")] or ["CPU:0"]


def reset_peak_memory():
    """Resets TensorFlow's allocator peak and this process's peak resident memory (Linux
    VmHWM, via /proc/self/clear_refs), so that `peak_memory_mb` reads the peak of what runs
    next. Returns False if the resident peak could not be reset."""
    for device in _memory_devices():
        try:
            tf.config.experimental.reset_memory_stats(device)
        except (ValueError, tf.errors.OpError):
            pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def status_kb(field, pid="self"):
    """A "kB" field of /proc/<pid>/status (VmHWM, VmRSS) in kB, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_mb(peak_reset=True):
    """(peak resident MB of this process, its source): VmHWM since `reset_peak_memory` if it
    returned `peak_reset` ("peak_rss"), else `ru_maxrss` ("peak_rss_since_start": graph
    building included)."""
    hwm = status_kb("VmHWM")
    if peak_reset and hwm:
        return hwm / 1024, "peak_rss"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_rss_since_start"


def peak_memory_mb(peak_reset=True):
    """(peak memory in MB, its source) since `reset_peak_memory`.

    TensorFlow's allocator peak (`get_memory_info("CPU:0")["peak"]`, summed over GPUs on a
    GPU host: the tensors of the step, weights and optimizer state included, "tf_allocator")
    where it is kept, else `peak_rss_mb`.
    """
    try:
        peak = sum(tf.config.experimental.get_memory_info(device)["peak"]
                   for device in _memory_devices())
    except (ValueError, tf.errors.OpError):
        peak = 0
    if peak:
        return peak / 2**20, "tf_allocator"
    return peak_rss_mb(peak_reset)


def measure_peak_matmul_tflops(compute_dtype, session_config=None, size=2048, num_runs=5):
    """The matmul throughput this process reaches: the best of `num_runs` n^3 matmuls.

    Returns:
      float, TFLOP/s (2*n^3 FLOPs per matmul).
    """
    timer = MatmulTimer((size, size, size), compute_dtype, session_config)
    try:
        return timer.tflops(num_runs)
    finally:
        timer.close()


class MatmulTimer:
    """One [m, k] x [k, n] matmul in its own graph and session, built and warmed up once;
    `tflops(num_runs)` is the best of `num_runs` runs, in TFLOP/s (2*m*k*n FLOPs each).

    The operands are fp32 variables cast to `compute_dtype` outside the timed
    op's input (as the model's custom getter does), and the product is taken in
    `compute_dtype`, so it runs the same kernels the model's matmuls do.
    """

    def __init__(self, shape, compute_dtype, session_config=None, num_warmup_steps=2):
        """shape: (m, k, n); compute_dtype: tf.float32 or tf.bfloat16 / tf.float16."""
        m, k, n = shape
        self._flops = 2.0 * m * k * n
        graph = tf.Graph()
        with graph.as_default():
            tf1.set_random_seed(1)
            a = tf1.get_variable("a", [m, k], initializer=tf1.random_normal_initializer(
                stddev=1.0 / np.sqrt(k)))
            b = tf1.get_variable("b", [k, n], initializer=tf1.random_normal_initializer(
                stddev=1.0 / np.sqrt(k)))
            # Cast once into variables so the timed run holds the matmul only.
            a_low = tf1.get_variable("a_low", [m, k], dtype=compute_dtype, trainable=False,
                                     initializer=tf1.zeros_initializer())
            b_low = tf1.get_variable("b_low", [k, n], dtype=compute_dtype, trainable=False,
                                     initializer=tf1.zeros_initializer())
            cast = tf.group(a_low.assign(tf.cast(a, compute_dtype)),
                            b_low.assign(tf.cast(b, compute_dtype)))
            # One element of the product is fetched: grappler would prune a matmul that only
            # feeds a tf.group, and copying all m*n values out would add to the time.
            self._product = tf.slice(tf.matmul(a_low, b_low), [0, 0], [1, 1])
            self._session = tf1.Session(graph=graph, config=session_config)
            self._session.run(tf1.global_variables_initializer())
            self._session.run(cast)
        time_steps(self._session, self._product, num_warmup_steps, 0)

    def tflops(self, num_runs):
        return self._flops / min(time_steps(self._session, self._product, 0, num_runs)) / 1e12

    def close(self):
        self._session.close()


def machine_info():
    """What the numbers were measured on: CPU model, SIMD flags, cores, TF and oneDNN settings."""
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "cpu_count": os.cpu_count(),
            "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "(default)"),
            "tf_xla_flags": os.environ.get("TF_XLA_FLAGS", "")}
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    for line in cpuinfo.splitlines():
        if line.startswith("model name") and "cpu_model" not in info:
            info["cpu_model"] = line.split(":", 1)[1].strip()
        if line.startswith("flags") and "cpu_flags" not in info:
            flags = set(line.split(":", 1)[1].split())
            # The ISA extensions that decide which oneDNN kernels bf16 / fp32 can use.
            wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni",
                      "amx_bf16", "amx_tile", "avx512_fp16")
            info["cpu_flags"] = [flag for flag in wanted if flag in flags]
    info["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
    return info


def onednn_matmul_report(precision_name, timeout=120):
    """Which oneDNN ISA and kernels a matmul at `precision_name` uses here (ONEDNN_VERBOSE=1).

    Runs one 512^3 matmul in a child process (same environment, so the same
    TF_ENABLE_ONEDNN_OPTS) with oneDNN's verbose log and parses it.

    Returns:
      dict: "isa" (what oneDNN detected, e.g. "Intel AVX2" or "Intel AVX-512 with
      Intel DL Boost and bfloat16 support"), "kernels" (sorted distinct
      "primitive implementation src_dtype" strings that executed), and
      "low_precision_on_onednn" (True if a primitive ran with a bf16/f16 source,
      i.e. the matmul itself took a oneDNN reduced-precision path; False means TF
      ran it in its own Eigen kernel, which converts to fp32).
    """

    dtype = precision.compute_dtype_from_name(precision_name).name
    env = dict(os.environ, ONEDNN_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="2")
    try:
        completed = subprocess.run([sys.executable, "-c", _ONEDNN_PROBE, dtype], env=env,
                                   capture_output=True, text=True, timeout=timeout, check=False)
        output = completed.stdout + completed.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    return parse_onednn_verbose(output)


def parse_onednn_verbose(output):
    """The ISA and the executed primitives in an ONEDNN_VERBOSE=1 log (see onednn_matmul_report).

    Reads `primitive,exec` lines with or without the "v1" marker of recent oneDNN releases,
    and memory descriptors written "src_bf16::..." (older releases) or "src:bf16::..." (oneDNN
    3.7, in TF 2.21).

    Returns:
      dict: "isa", "kernels" ("kind implementation src_<dtype>"), "low_precision_on_onednn".
    """

    isa, kernels = None, set()
    for line in output.splitlines():
        if not line.startswith("onednn_verbose"):
            continue
        fields = line.split(",")
        if "isa:" in line and isa is None:
            isa = line.split("isa:", 1)[1].strip()
            continue
        for i in range(len(fields) - 6):
            if fields[i] == "primitive" and fields[i + 1] == "exec":
                kind, implementation, descriptors = fields[i + 3], fields[i + 4], fields[i + 6]
                source = re.search(r"\bsrc[_:]([a-z0-9]+):", descriptors)
                kernels.add(f"{kind} {implementation or '-'} "
                            f"src_{source.group(1) if source else '?'}")
                break
    low = any(kernel.endswith(("src_bf16", "src_f16")) for kernel in kernels)
    return {"isa": isa, "kernels": sorted(kernels), "low_precision_on_onednn": low}
