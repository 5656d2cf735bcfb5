"""Compiles and runs an exported step through JAX's PJRT client (scripts/run_step.py).

No TensorFlow: this module, `manifest` and `tensor_files` are all run_step.py imports before
it writes a checkpoint, which it does only where TensorFlow is installed. The module is
compiled as it is, by the device's XLA; JAX only provides the client (the compiler and the
buffers). The state lives on the device: each step takes it and returns the new values of
the arguments it updates, and those input buffers are donated (the module's
`mhlo.input_output_alias`), so the device holds one copy of the weights and slots.
"""

import dataclasses
import glob
import json
import os
import statistics
import time

import numpy as np
from absl import logging

from bert_tf.errors import BertTfError, missing_extra
from bert_tf.step_program import manifest as manifest_lib
from bert_tf.step_program import tensor_files

# Random features: this many distinct batches drawn once on the device, used in turn.
RANDOM_FEATURE_BATCHES = 4


def _jax():
    try:
        import jax
        from jax.extend import backend as jax_backend
    except ImportError:
        raise missing_extra("scripts/run_step.py runs the step through JAX", "xla",
                            "jax jaxlib safetensors") from None
    # global_step is int64, as in a bert_tf checkpoint.
    jax.config.update("jax_enable_x64", True)
    return jax, jax_backend


def _compile_options():
    from jax._src.lib import xla_client

    return xla_client.CompileOptions()


def module_signature(module_bytes):
    """(argument types, result types) of the module's main as MLIR type strings, or None
    where this JAX cannot parse the module outside a compilation."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.lib import _jax

        with mlir.make_ir_context():
            module = _jax.mlir.deserialize_portable_artifact(module_bytes)
            for op in module.body.operations:
                if str(op.attributes["sym_name"]).strip('"') == "main":
                    function_type = op.attributes["function_type"].value
                    return ([str(t) for t in function_type.inputs],
                            [str(t) for t in function_type.results])
    except Exception as e:  # A JAX whose internals moved: the hash check still holds.
        logging.info("Not checking the module's signature against step.json (%s).", e)
    return None


@dataclasses.dataclass
class Measurement:
    """What `StepProgram.train` measured."""

    compile_s: float
    step_times_s: list
    losses: list
    metrics: dict  # name -> last value
    global_step: int


class StepProgram:
    """An exported step on one device: its manifest, executable and state.

    Args:
      step_dir: a directory written by scripts/export_step.py.
      platform: "cpu", "gpu" or "tpu".
    """

    def __init__(self, step_dir, platform="cpu"):
        self.jax, jax_backend = _jax()
        self.step_dir = os.path.expanduser(step_dir)
        self.manifest = manifest_lib.load(self.step_dir)
        self.module_path = os.path.join(self.step_dir, manifest_lib.MODULE_FILE)
        self.module = manifest_lib.read_module(self.step_dir, self.manifest)
        signature = module_signature(self.module)
        if signature is not None:
            manifest_lib.check_signature(self.manifest, *signature, self.module_path)
        try:
            self.backend = jax_backend.get_backend(platform)
        except RuntimeError as e:
            raise BertTfError(f"--platform={platform}: JAX {self.jax.__version__} has no "
                              f"{platform} backend here ({str(e).splitlines()[0]}); install "
                              "JAX's plugin for the device (e.g. pip install \"jax[cuda13]\") "
                              "or pass --platform=cpu.") from None
        self.platform = platform
        self.device = self.backend.devices()[0]
        self.executable = None
        self.state = None  # Device arrays, in the order of `manifest.state_arguments()`.
        self._state_slots = {index: n for n, (index, _) in
                             enumerate(self.manifest.state_arguments())}

    # The state.

    def load_state(self, state_file=None):
        """Puts the state of `state_file` (default: the step directory's) on the device."""
        path = os.path.expanduser(state_file or os.path.join(self.step_dir,
                                                             manifest_lib.STATE_FILE))
        arrays = tensor_files.load(path, "state_file")
        manifest_lib.check_state(self.manifest, arrays, path)
        self.state = [self.jax.device_put(arrays[entry.name], self.device)
                      for _, entry in self.manifest.state_arguments()]

    def random_state(self, seed):
        """Draws the state on the device from the manifest's initializers (nothing travels)."""
        jax, jnp = self.jax, self.jax.numpy
        key = jax.random.key(seed)
        self.state = []
        with jax.default_device(self.device):
            for n, (_, entry) in enumerate(self.manifest.state_arguments()):
                init = entry.init or {"kind": "zeros"}
                dtype = jnp.dtype(entry.dtype)
                if init["kind"] == "truncated_normal":
                    value = init["stddev"] * jax.random.truncated_normal(
                        jax.random.fold_in(key, n), -2.0, 2.0, entry.shape, dtype)
                elif init["kind"] == "constant":
                    value = jnp.full(entry.shape, init["value"], dtype)
                elif init["kind"] in ("zeros", "ones"):
                    value = (jnp.ones if init["kind"] == "ones" else jnp.zeros)(entry.shape,
                                                                                dtype)
                else:
                    raise BertTfError(f"step.json: '{entry.name}' has initializer "
                                      f"{init['kind']!r}, which --random_init cannot draw; "
                                      "pass its state instead.")
                self.state.append(value)

    def state_arrays(self):
        """name -> numpy array of the current state."""
        return {entry.name: np.asarray(value) for (_, entry), value in
                zip(self.manifest.state_arguments(), self.state, strict=True)}

    # The features.

    def feature_batches(self, features=None, random_features=False, seed=0):
        """The batches to train on, on the device: a list of lists of arrays (one per
        feature argument), used in turn.

        Args:
          features: comma-separated safetensors files / globs (None: the step directory's
            own shards).
          random_features: draw RANDOM_FEATURE_BATCHES batches on the device instead.
        """
        if random_features:
            return self._random_features(seed)
        if features:
            paths = []
            for pattern in features.split(","):
                matched = sorted(glob.glob(os.path.expanduser(pattern.strip())))
                if not matched:
                    raise BertTfError(f"--features: '{pattern}' matches no file; pass the "
                                      "feature shards export_step.py wrote, or "
                                      "--random_features.")
                paths.extend(matched)
        else:
            if not self.manifest.feature_files:
                raise BertTfError(f"--step_dir: '{self.step_dir}' holds no feature batches "
                                  "(it was exported without --train_file); pass --features "
                                  "or --random_features.")
            paths = [os.path.join(self.step_dir, name) for name in self.manifest.feature_files]
        batches = []
        for path in paths:
            arrays = tensor_files.load(path, "features")
            count = manifest_lib.check_features(self.manifest, arrays, path)
            for b in range(count):
                batches.append([self.jax.device_put(arrays[entry.name][b], self.device)
                                for _, entry in self.manifest.feature_arguments()])
        return batches

    def _random_features(self, seed):
        jax, jnp = self.jax, self.jax.numpy
        key = jax.random.key(seed + 1)
        batches = []
        with jax.default_device(self.device):
            for b in range(RANDOM_FEATURE_BATCHES):
                batch = []
                for n, (_, entry) in enumerate(self.manifest.feature_arguments()):
                    values = entry.values or {"fill": 0}
                    if "fill" in values:
                        batch.append(jnp.full(entry.shape, values["fill"], entry.dtype))
                    else:
                        batch.append(jax.random.randint(
                            jax.random.fold_in(key, b * 1000 + n), entry.shape, 0,
                            values["max"], entry.dtype))
                batches.append(batch)
        return batches

    # Compiling and running.

    def compile(self):
        """Compiles the module for the device; returns the seconds it took."""
        start = time.perf_counter()
        try:
            self.executable = self.backend.compile_and_load(self.module, [self.device],
                                                            _compile_options())
        except Exception as e:  # XLA's errors carry no stable type across JAX versions.
            foreign = self.manifest.foreign_ops
            held = f"; it holds {', '.join(foreign)}" if foreign else ""
            raise BertTfError(f"{self.module_path}: JAX {self.jax.__version__}'s "
                              f"{self.platform} client cannot compile it "
                              f"({str(e).strip().splitlines()[0][:300]}){held}.") from None
        return time.perf_counter() - start

    def step(self, features, seed):
        """Runs one step on `features` (device arrays); the state moves to its new values.

        Returns:
          The step's outputs before the updates: [loss, *metrics] (device arrays).
        """
        arguments = [None] * len(self.manifest.arguments)
        for (index, _), value in zip(self.manifest.feature_arguments(), features, strict=True):
            arguments[index] = value
        arguments[self.manifest.seed_index()] = seed
        for index, slot in self._state_slots.items():
            arguments[index] = self.state[slot]
        outputs = self.executable.execute(arguments)
        for result, value in zip(self.manifest.results, outputs, strict=True):
            if result.updates is not None:
                self.state[self._state_slots[result.updates]] = value
        return [value for result, value in zip(self.manifest.results, outputs, strict=True)
                if result.updates is None]

    def train(self, batches, num_steps, seed, num_warmup_steps=0, log_every_n_steps=10):
        """Compiles (if not yet), runs `num_warmup_steps` untimed and `num_steps` timed steps.

        Returns:
          A `Measurement`.
        """
        compile_s = self.compile() if self.executable is None else 0.0
        logging.info("Compiled the %s step for %s in %.1f s.", self.manifest.task,
                     self.device.device_kind, compile_s)
        seed_array = self.jax.device_put(np.array([seed, 0], np.int32), self.device)
        names = [r.name for r in self.manifest.results if r.updates is None]
        step_times, losses, outputs = [], [], []
        total = num_warmup_steps + num_steps
        for n in range(total):
            start = time.perf_counter()
            outputs = self.step(batches[n % len(batches)], seed_array)
            loss = float(outputs[0])  # Waits for the step.
            if n >= num_warmup_steps:
                step_times.append(time.perf_counter() - start)
            losses.append(loss)
            if log_every_n_steps and ((n + 1) % log_every_n_steps == 0 or n + 1 == total):
                logging.info("step %d/%d: loss %.5f (%.3f s a step)", n + 1, total, loss,
                             time.perf_counter() - start)
        global_step = int(np.asarray(self.state[self._state_slots[
            self.manifest.global_step_index()]]))
        metrics = {name: float(value) for name, value in zip(names[1:], outputs[1:],
                                                             strict=True)}
        return Measurement(compile_s, step_times, losses, metrics, global_step)

    def memory(self):
        """Device memory in bytes: the compiled step's footprint (arguments + outputs -
        aliased + temporaries) and, where the device reports it, its peak in use."""
        result = {}
        try:
            stats = self.executable.get_compiled_memory_stats()
            result["compiled_step_bytes"] = int(
                stats.argument_size_in_bytes + stats.output_size_in_bytes
                - stats.alias_size_in_bytes + stats.temp_size_in_bytes)
            result["temp_bytes"] = int(stats.temp_size_in_bytes)
        except Exception:  # Not every client reports it.
            pass
        device_stats = self.device.memory_stats() if hasattr(self.device, "memory_stats") \
            else None
        if device_stats and "peak_bytes_in_use" in device_stats:
            result["peak_bytes_in_use"] = int(device_stats["peak_bytes_in_use"])
        return result


def measure_peak_matmul_tflops(jax, device, dtype, size, num_runs=5):
    """The best TFLOP/s of one n x n x n matmul in `dtype` on `device` (2 n^3 FLOPs)."""
    jnp = jax.numpy
    with jax.default_device(device):
        key = jax.random.key(0)
        a = jax.random.normal(key, (size, size), jnp.float32).astype(dtype)
        b = jax.random.normal(jax.random.fold_in(key, 1), (size, size), jnp.float32).astype(dtype)
        matmul = jax.jit(jnp.matmul)
        matmul(a, b).block_until_ready()
        best = float("inf")
        for _ in range(num_runs):
            start = time.perf_counter()
            matmul(a, b).block_until_ready()
            best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 / best / 1e12


def summarize(program, measurement, peak_tflops):
    """The JSON record of a run."""
    manifest = program.manifest
    times = sorted(measurement.step_times_s)
    median = statistics.median(times) if times else float("nan")
    model_tflops = manifest.model_flops_per_step / median / 1e12 if times else None
    return {
        "task": manifest.task, "settings": manifest.settings, "producer": manifest.producer,
        "jax": program.jax.__version__, "platform": program.platform,
        "device": program.device.device_kind,
        "compile_s": round(measurement.compile_s, 3), "num_steps": len(times),
        "step_time_median_s": median,
        "step_time_p90_s": times[int(0.9 * (len(times) - 1))] if times else None,
        "steps_per_s": 1.0 / median if times else None,
        "sequences_per_s": manifest.batch_size / median if times else None,
        "model_flops_per_step": manifest.model_flops_per_step,
        "model_tflops": model_tflops, "peak_matmul_tflops": peak_tflops,
        "fraction_of_peak": model_tflops / peak_tflops if model_tflops and peak_tflops else None,
        "memory": program.memory(), "losses": measurement.losses,
        "metrics": measurement.metrics, "global_step": measurement.global_step,
    }


_TABLE = (("device", "device", "{}"), ("precision", "precision", "{}"),
          ("batch", "batch", "{}"), ("compile_s", "compile s", "{:.1f}"),
          ("step_time_median_s", "step ms", "{:.1f}"), ("sequences_per_s", "seq/s", "{:.2f}"),
          ("model_tflops", "TFLOP/s", "{:.3f}"), ("peak_matmul_tflops", "peak TFLOP/s",
                                                  "{:.3f}"),
          ("fraction_of_peak", "of peak", "{:.2f}"))


def format_table(record):
    """A two-line table of a run's record."""
    values = dict(record, precision=record["settings"]["precision"],
                  batch=record["settings"]["train_batch_size"])
    cells = []
    for key, title, fmt in _TABLE:
        value = values.get(key)
        if key == "step_time_median_s" and value is not None:
            value *= 1000
        cells.append((title, "-" if value is None else fmt.format(value)))
    widths = [max(len(t), len(v)) for t, v in cells]
    return "\n".join(" | ".join(text.rjust(w) for text, w in zip(row, widths, strict=True))
                     for row in ([t for t, _ in cells], [v for _, v in cells]))


def write_outputs(program, output_dir):
    """Writes the trained state (and, with TensorFlow, a checkpoint) to `output_dir`."""
    output_dir = os.path.expanduser(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    state_path = os.path.join(output_dir, manifest_lib.STATE_FILE)
    tensor_files.save(program.state_arrays(), state_path)
    logging.info("Wrote the trained state to %s.", state_path)
    try:
        import tensorflow  # noqa: F401  (only to know whether it is there)
    except ImportError:
        logging.info("TensorFlow is not installed here: on a machine with it, python "
                     "scripts/step_checkpoint.py --step_dir=%s --state_file=%s "
                     "--output_dir=%s writes the Google-layout checkpoint.",
                     program.step_dir, state_path, output_dir)
        return
    from bert_tf.step_program import checkpoint

    checkpoint.write_checkpoint(program.manifest, program.state_arrays(), output_dir)


def run(options):
    """scripts/run_step.py: compile, run, measure, print a table, write JSON and the state.

    Args:
      options: `options.RunStepOptions`.

    Returns:
      The JSON record.
    """
    if options.num_steps < 1:
        raise BertTfError(f"--num_steps: got {options.num_steps}; pass a positive number.")
    if options.random_init and options.state_file:
        raise BertTfError("--random_init draws the state; drop --state_file (or --random_init).")
    if options.random_features and options.features:
        raise BertTfError("--random_features: drop --features (or --random_features).")
    program = StepProgram(options.step_dir, options.platform)
    if options.random_init:
        program.random_state(options.seed)
    else:
        program.load_state(options.state_file)
    batches = program.feature_batches(options.features, options.random_features, options.seed)
    measurement = program.train(batches, options.num_steps, options.seed,
                                options.num_warmup_steps, options.log_every_n_steps)
    dtype = "bfloat16" if program.manifest.settings["precision"] == "bf16" else "float32"
    peak = measure_peak_matmul_tflops(program.jax, program.device, dtype,
                                      options.peak_matmul_size)
    record = summarize(program, measurement, peak)
    print(format_table(record), flush=True)
    if options.output_json:
        path = os.path.expanduser(options.output_json)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
        logging.info("Wrote %s.", path)
    if options.output_dir:
        write_outputs(program, options.output_dir)
    return record
