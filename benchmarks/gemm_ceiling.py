"""The matmul ceilings of this machine at BERT's shapes, per engine and precision.

The speed targets compare precisions end to end: ONNX Runtime INT8 at least 2x the fp32 path
(issue 13), bf16 against fp32 and against PyTorch (issue 15). Most of a BERT step is its dense
layers' matmuls, and the rest (softmax, layer norm, GELU, the attention's batch matmuls) gains
less from the lower precision, so an end-to-end ratio stays below the ratio of those matmuls.
This script measures that ceiling on the machine at hand, in a minute: one layer's dense
matmuls at batch x sequence rows, through each engine the Predictor and the benchmarks use.

Kernels:
  tf_fp32   TensorFlow MatMul, float32 (oneDNN when on, as bert_tf sets it).
  tf_bf16   TensorFlow MatMul on bfloat16 operands: oneDNN's bf16 kernels on AVX512_BF16 /
            AMX CPUs, TF's own (converting to float32) elsewhere; the JSON records which ran.
  ort_fp32  onnxruntime MatMul, float32 (MLAS).
  ort_int8  the same model after `scripts/export_onnx.py --quantize=int8`'s quantization
            (`bert_tf.serving.onnx_export.quantize_file`: int8 weights, activations quantized per
            call), which onnxruntime runs as DynamicQuantizeMatMul.
  torch_fp32, torch_bf16  (with --torch_python, a Python with torch) PyTorch's
            `torch.nn.functional.linear`, what `nn.Linear` runs, on float32 or bfloat16
            operands (what `torch.autocast` casts to): the side of benchmarks/compare_pytorch.py.
            PyTorch's CPU wheels take float32 GEMMs to MKL and bf16 ones to oneDNN; the JSON
            records torch's build configuration, so a ratio to PyTorch can be read as library
            against library.

Shapes, with T = --batch_size x --max_seq_length and H, I from --bert_config_file: [T, H] x
[H, H] (the attention's query, key, value and output projections: 4 per layer), [T, H] x
[H, I] (intermediate) and [T, I] x [I, H] (output). Every round times each kernel at each shape
(best of --num_runs calls, as the benchmarks' peak does), kernels in turn, the order reversed
every other round; "layer" is one layer's FLOPs over the summed times. Ratios are per round,
then the median, so the machine's drift cancels.

    .venv/bin/python benchmarks/gemm_ceiling.py --rounds=5 --output_json=/tmp/gemm.json
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

KERNELS = ("tf_fp32", "tf_bf16", "ort_fp32", "ort_int8")
# torch_* kernel -> the torch dtype its operands have.
TORCH_DTYPES = {"torch_fp32": "float32", "torch_bf16": "bfloat16"}
TORCH_KERNELS = tuple(TORCH_DTYPES)
# (kernel, reference): the ratios that bound the issues' end-to-end targets.
RATIOS = (("ort_int8", "ort_fp32"), ("ort_int8", "tf_fp32"), ("tf_bf16", "tf_fp32"),
          ("tf_fp32", "torch_fp32"), ("tf_bf16", "torch_bf16"))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bert_config_file", default=os.path.join(REPO, "configs",
                                                                   "bert_base.json"))
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--max_seq_length", type=int, default=384)
    parser.add_argument("--kernels", default=None,
                        help=f"Comma-separated, from {', '.join(KERNELS + TORCH_KERNELS)}. "
                             "Default: all (the torch ones with --torch_python).")
    parser.add_argument("--torch_python", default=None,
                        help="A Python with torch, for the torch_* kernels.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--num_runs", type=int, default=5, help="Calls per kernel and shape "
                        "in a round; the fastest counts.")
    parser.add_argument("--output_json", default=None)
    args = parser.parse_args(argv)
    if args.kernels is None:
        args.kernels = list(KERNELS + (TORCH_KERNELS if args.torch_python else ()))
    else:
        args.kernels = args.kernels.split(",")
    unknown = sorted(set(args.kernels) - set(KERNELS + TORCH_KERNELS))
    if unknown:
        parser.error(f"--kernels: unknown {', '.join(unknown)}; use "
                     f"{', '.join(KERNELS + TORCH_KERNELS)}.")
    if set(args.kernels) & set(TORCH_KERNELS) and not args.torch_python:
        parser.error("--kernels: the torch_* kernels need --torch_python=PYTHON, a Python "
                     "with torch installed (see benchmarks/README.md).")
    if min(args.batch_size, args.max_seq_length, args.rounds, args.num_runs) < 1:
        parser.error("--batch_size, --max_seq_length, --rounds and --num_runs must be >= 1.")
    return args


def layer_shapes(bert_config, batch_size, seq_length):
    """{name: ((m, k, n), count per layer)} of one encoder layer's dense matmuls."""
    tokens, hidden = batch_size * seq_length, bert_config.hidden_size
    intermediate = bert_config.intermediate_size
    return {"[T,H]x[H,H]": ((tokens, hidden, hidden), 4),
            "[T,H]x[H,I]": ((tokens, hidden, intermediate), 1),
            "[T,I]x[I,H]": ((tokens, intermediate, hidden), 1)}


class OnnxMatmul:
    """One [m, k] x [k, n] MatMul (with fixed random weights) as an onnxruntime session,
    float32 or quantized as bert_tf quantizes exports; `tflops()` times it."""

    def __init__(self, shape, int8, work_dir):
        import numpy as np
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper

        from bert_tf.serving import onnx_export

        m, k, n = shape
        rng = np.random.default_rng(1)
        weights = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        starts, ends = (numpy_helper.from_array(np.array(v, np.int64), name)
                        for v, name in (([0, 0], "starts"), ([1, 1], "ends")))
        # One element out, as the TF timing fetches: copying [m, n] out would add to the time.
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["product"]),
             helper.make_node("Slice", ["product", "starts", "ends"], ["y"])],
            "matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
            [numpy_helper.from_array(weights, "w"), starts, ends])
        opset_imports = [helper.make_opsetid("", onnx_export.DEFAULT_OPSET)]
        # The oldest IR version of the opset, not onnx's newest: an onnxruntime older than the
        # onnx package beside it (pip's newest for Python 3.10) refuses newer IR versions.
        model = helper.make_model(graph, opset_imports=opset_imports,
                                  ir_version=helper.find_min_ir_version_for(opset_imports))
        path = os.path.join(work_dir, f"matmul_{m}_{k}_{n}.onnx")
        onnx.save(model, path)
        if int8:
            fp32_path, path = path, path.replace(".onnx", ".int8.onnx")
            onnx_export.quantize_file(fp32_path, path)
        self.op_types = sorted({node.op_type for node in onnx.load(path).graph.node})
        # As Predictor.from_onnx opens a model: onnxruntime's default threads and graph rewrites.
        self._session = onnxruntime.InferenceSession(path, onnxruntime.SessionOptions(),
                                                     providers=["CPUExecutionProvider"])
        self._feed = {"x": rng.standard_normal((m, k)).astype(np.float32)}
        self._flops = 2.0 * m * k * n
        for _ in range(2):  # Warm-up: first calls allocate and pack.
            self._session.run(None, self._feed)

    def tflops(self, num_runs):
        times = []
        for _ in range(num_runs):
            start = time.perf_counter()
            self._session.run(None, self._feed)
            times.append(time.perf_counter() - start)
        return self._flops / min(times) / 1e12


# Runs in --torch_python: one line of versions, then for each "m k n dtype num_runs" line on
# stdin the best TFLOP/s of num_runs `F.linear` calls (a new shape gets one untimed call).
_TORCH_WORKER = r"""
import json, os, sys, tempfile, time
import torch
config = torch.__config__.show()
items = [item.strip(" -") for item in config.replace(",", "\n").splitlines()]
libraries = ("Intel(R) oneAPI Math Kernel Library", "Intel(R) MKL-DNN", "CPU capability usage",
             "Build settings: BLAS_INFO=")


# What MKL / oneDNN print (to fd 1, from C) for one small F.linear in `dtype`.
def verbose_output(library, dtype):
    sys.stdout.flush()
    saved, capture = os.dup(1), tempfile.TemporaryFile()
    os.dup2(capture.fileno(), 1)
    try:
        with library.verbose(library.VERBOSE_ON):
            torch.nn.functional.linear(torch.randn(64, 64).to(dtype),
                                       torch.randn(64, 64).to(dtype))
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    capture.seek(0)
    return capture.read().decode(errors="replace")


# MKL's first line names the code path it picked for this CPU ("... Intel(R) AVX-512 enabled
# processors", or a generic one); oneDNN's lines say whether bf16 ran on its bf16 kernels.
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                  "config": [item for item in items if item.startswith(libraries)],
                  "mkl_verbose": verbose_output(torch.backends.mkl, torch.float32)
                                 .splitlines()[:1],
                  "onednn_bf16_verbose": verbose_output(torch.backends.mkldnn,
                                                        torch.bfloat16)}), flush=True)
operands = {}
for line in sys.stdin:
    m, k, n, dtype, num_runs = line.split()
    m, k, n, num_runs = int(m), int(k), int(n), int(num_runs)
    key = (m, k, n, dtype)
    if key not in operands:
        generator = torch.Generator().manual_seed(1)
        operands[key] = (torch.randn(m, k, generator=generator).to(getattr(torch, dtype)),
                         (torch.randn(n, k, generator=generator) / k ** 0.5).to(
                             getattr(torch, dtype)))
        with torch.inference_mode():
            torch.nn.functional.linear(*operands[key])
    x, weight = operands[key]
    with torch.inference_mode():
        times = []
        for _ in range(num_runs):
            start = time.perf_counter()
            torch.nn.functional.linear(x, weight)
            times.append(time.perf_counter() - start)
    print(2.0 * m * k * n / min(times) / 1e12, flush=True)
"""


class TorchWorker:
    """`_TORCH_WORKER` in --torch_python, kept running so that its kernels alternate with the
    others; `tflops(shape, dtype, num_runs)` asks it for one timing."""

    def __init__(self, python):
        import json
        import subprocess

        from bert_tf.tools import machine

        try:
            self._process = subprocess.Popen([python, "-c", _TORCH_WORKER],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             text=True)
        except OSError as e:
            raise SystemExit(f"--torch_python={python} cannot be run: {e}") from None
        first = self._process.stdout.readline()
        if not first:
            raise SystemExit(f"--torch_python={python} could not import torch (its error is "
                             "above); install torch in it (see benchmarks/README.md).")
        self.versions = json.loads(first)
        self.versions["onednn_bf16"] = machine.parse_onednn_verbose(
            self.versions.pop("onednn_bf16_verbose"))

    def tflops(self, shape, dtype, num_runs):
        self._process.stdin.write(" ".join(map(str, (*shape, dtype, num_runs))) + "\n")
        self._process.stdin.flush()
        return float(self._process.stdout.readline())

    def close(self):
        self._process.stdin.close()
        self._process.wait()


def best_tflops(timer, num_runs):
    """`timer(num_runs)` after 0.1 s of untimed calls: the threads of the engine timed before
    (TF, each onnxruntime session and torch have pools of their own) busy-wait a while after
    their work, which slowed the first two calls after a switch by up to 1.9x."""
    start = time.perf_counter()
    while time.perf_counter() - start < 0.1:
        timer(1)
    return timer(num_runs)


def measure(args, log=print):
    """Times every kernel at every shape for --rounds rounds; returns the result dict."""
    import functools

    import tensorflow as tf

    from bert_tf import modeling
    from bert_tf.tools import machine
    from bert_tf.training import session as session_lib

    tf.compat.v1.disable_eager_execution()
    config = modeling.BertConfig.from_json_file(args.bert_config_file)
    shapes = layer_shapes(config, args.batch_size, args.max_seq_length)
    session_config = session_lib.session_config()
    torch_worker = (TorchWorker(args.torch_python)
                    if set(args.kernels) & set(TORCH_KERNELS) else None)
    # {kernel: {shape name: timer(num_runs) -> TFLOP/s}}, each matmul built once.
    timers, tf_timers, onnx_op_types = {}, [], {}
    # The onnxruntime sessions hold their models in memory; the files can go once they open.
    with tempfile.TemporaryDirectory(prefix="gemm_ceiling_") as work_dir:
        for kernel in args.kernels:
            timers[kernel] = {}
            for name, (shape, _) in shapes.items():
                if kernel.startswith("ort_"):
                    matmul = OnnxMatmul(shape, kernel == "ort_int8", work_dir)
                    onnx_op_types[kernel] = matmul.op_types
                    timers[kernel][name] = matmul.tflops
                elif kernel.startswith("torch_"):
                    timers[kernel][name] = functools.partial(
                        torch_worker.tflops, shape, TORCH_DTYPES[kernel])
                else:
                    tf_timers.append(machine.MatmulTimer(
                        shape, {"tf_fp32": tf.float32, "tf_bf16": tf.bfloat16}[kernel],
                        session_config))
                    timers[kernel][name] = tf_timers[-1].tflops

    layer_flops = sum(2.0 * m * k * n * count for (m, k, n), count in shapes.values())
    rounds = []
    for round_index in range(args.rounds):
        order = args.kernels if round_index % 2 == 0 else args.kernels[::-1]
        tflops = {kernel: {name: best_tflops(timers[kernel][name], args.num_runs)
                           for name in shapes} for kernel in order}
        for by_shape in tflops.values():
            seconds = sum(2.0 * m * k * n * count / (by_shape[name] * 1e12)
                          for name, ((m, k, n), count) in shapes.items())
            by_shape["layer"] = layer_flops / seconds / 1e12
        rounds.append(tflops)
        log(f"round {round_index}: " + ", ".join(
            f"{kernel} {tflops[kernel]['layer'] * 1e3:.1f}" for kernel in args.kernels)
            + " GFLOP/s per layer")
    for timer in tf_timers:
        timer.close()
    if torch_worker is not None:
        torch_worker.close()
    columns = [*shapes, "layer"]
    median_tflops = {kernel: {name: statistics.median(r[kernel][name] for r in rounds)
                              for name in columns} for kernel in args.kernels}
    ratios = {f"{kernel}/{reference}": statistics.median(
        r[kernel]["layer"] / r[reference]["layer"] for r in rounds)
        for kernel, reference in RATIOS if {kernel, reference} <= set(args.kernels)}
    result = {"args": vars(args), "tokens": args.batch_size * args.max_seq_length,
              "shapes": {name: {"mkn": list(shape), "per_layer": count}
                         for name, (shape, count) in shapes.items()},
              "median_tflops": median_tflops, "ratios_median": ratios, "rounds": rounds,
              # The operators in each onnxruntime model file (INT8: quantized MatMuls).
              "onnx_op_types": onnx_op_types, "machine": machine.machine_info()}
    if torch_worker is not None:
        result["machine"]["torch"] = torch_worker.versions
    if "tf_bf16" in args.kernels:
        result["machine"]["onednn_bf16"] = machine.onednn_matmul_report("bf16")
    return result


def format_table(result):
    columns = [*result["shapes"], "layer"]
    lines = [f"{'kernel':10s} " + " ".join(f"{c:>12s}" for c in columns) + "   (GFLOP/s)"]
    for kernel, by_shape in result["median_tflops"].items():
        lines.append(f"{kernel:10s} " + " ".join(f"{by_shape[c] * 1e3:12.1f}" for c in columns))
    lines += [f"{name}: {ratio:.2f}x (median of per-round ratios, layer)"
              for name, ratio in result["ratios_median"].items()]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    import bert_tf  # noqa: F401  (oneDNN on before TensorFlow loads, as the scripts do)
    from bert_tf.tools import benchmark

    result = measure(args)
    print(format_table(result))
    onednn = result["machine"].get("onednn_bf16")
    if onednn is not None:
        print(f"bf16 matmuls on oneDNN's bf16 kernels: {onednn.get('low_precision_on_onednn')}"
              f" (oneDNN ISA: {onednn.get('isa')})")
    torch_versions = result["machine"].get("torch")
    if torch_versions is not None:
        print(f"torch {torch_versions['torch']}, {torch_versions['threads']} threads: "
              + "; ".join(torch_versions["config"]))
        print(f"torch's MKL: {' '.join(torch_versions['mkl_verbose']) or '(no verbose line)'}")
        print("torch's bf16 matmuls on oneDNN's bf16 kernels: "
              f"{torch_versions['onednn_bf16']['low_precision_on_onednn']}")
    if args.output_json:
        benchmark.write_json(result, args.output_json)


if __name__ == "__main__":
    main()
