"""scripts/benchmark.py and bert_tf.tools.benchmark: runs, JSON keys, FLOP counting, XLA plumbing.

Speed is not tested (the machine is shared); what the numbers are made of is.
"""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from envs import child_env
from finetune_helpers import graph_matmul_flops, run_script, tiny_config

from bert_tf import modeling
from bert_tf import options as bert_options
from bert_tf.cli import flags as bert_flags
from bert_tf.cli import tool_flags
from bert_tf.errors import BertTfError
from bert_tf.tools import batch_search, benchmark, machine
from bert_tf.training import session as session_lib

tf1 = tf.compat.v1

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny_config(**overrides):
    return modeling.BertConfig(**tiny_config(**{
        **dict(vocab_size=50, hidden_size=8, intermediate_size=16, max_position_embeddings=16),
        **overrides}))


def test_count_flops_equals_a_hand_count():
    # H=4, I=8, 1 layer, S=3, B=2, V=10; one multiply-add = 2 FLOPs.
    config = _tiny_config(vocab_size=10, hidden_size=4, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=8)
    q_k_v = 3 * (2 * 3 * 4 * 4)    # [3,4] @ [4,4] three times        = 288
    scores = 2 * 2 * 3 * 3 * 2     # 2 heads: [3,2] @ [2,3]            = 72
    context = 2 * 2 * 3 * 2 * 3    # 2 heads: [3,3] @ [3,2]            = 72
    attention_output = 2 * 3 * 4 * 4  # [3,4] @ [4,4]                  = 96
    feed_forward = 2 * 3 * 4 * 8 + 2 * 3 * 8 * 4  # [3,4]@[4,8], [3,8]@[8,4] = 384
    layer = q_k_v + scores + context + attention_output + feed_forward
    assert layer == 912
    squad_head = 2 * 3 * 4 * 2     # [3,4] @ [4,2]                     = 48
    assert benchmark.count_flops(config, "squad", "infer", 2, 3) == 2 * (layer + squad_head)
    assert 2 * (layer + squad_head) == 1920
    assert benchmark.count_flops(config, "squad", "train", 2, 3) == 3 * 1920
    pooler = 2 * 4 * 4             # [CLS] [1,4] @ [4,4]               = 32
    classifier_head = pooler + 2 * 4 * 3  # 3 labels                   = 56
    assert benchmark.count_flops(config, "classifier", "infer", 2, 3, num_labels=3) == \
        2 * (layer + classifier_head)
    # Training reads the last layer at [CLS] only: keys and values at all 3 rows, the rest at 1.
    cls_layer = (2 * (2 * 3 * 4 * 4)  # K, V: [3,4] @ [4,4] twice           = 192
                 + 2 * 1 * 4 * 4       # Q: [1,4] @ [4,4]                     = 32
                 + 2 * 2 * 1 * 2 * 3   # 2 heads: [1,2] @ [2,3]               = 24
                 + 2 * 2 * 1 * 3 * 2   # 2 heads: [1,3] @ [3,2]               = 24
                 + 2 * 1 * 4 * 4       # attention output [1,4] @ [4,4]       = 32
                 + 2 * 1 * 4 * 8 + 2 * 1 * 8 * 4)  # feed-forward             = 128
    assert cls_layer == 432
    assert benchmark.count_flops(config, "classifier", "train", 2, 3, num_labels=3) == \
        3 * 2 * (cls_layer + classifier_head)
    # Pre-training, P = 2 masked positions: transform [2,4]@[4,4], decoder [2,4]@[4,10],
    # plus the pooler and the next-sentence [1,4]@[4,2].
    pretraining_head = 2 * 2 * 4 * 4 + 2 * 2 * 4 * 10 + pooler + 2 * 4 * 2  # = 272
    assert benchmark.count_flops(config, "pretraining", "train", 2, 3,
                                 max_predictions_per_seq=2) == 3 * 2 * (layer + pretraining_head)


@pytest.mark.parametrize("task,mode", [("squad", "train"), ("squad", "infer"),
                                       ("classifier", "train"), ("pretraining", "train"),
                                       ("pretraining", "infer")])
def test_count_flops_equals_the_matmuls_of_the_built_graph(task, mode):
    config = _tiny_config()
    spec = benchmark.BenchmarkSpec(config, task=task, mode=mode, batch_size=3, max_seq_length=12,
                                   max_predictions_per_seq=4, num_labels=3)
    graph, fetch, _ = benchmark.build_step(spec)
    expected = graph_matmul_flops(graph, fetch)
    assert benchmark.count_flops(config, task, mode, 3, 12, 4, 3) == expected


def _write_tiny_config(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(_tiny_config().to_json_string())
    return str(path)


@pytest.mark.slow
def test_script_writes_json_with_consistent_numbers(tmp_path):
    config_file = _write_tiny_config(tmp_path)
    output = tmp_path / "out" / "bench.json"
    completed = run_script("benchmark.py", f"--bert_config_file={config_file}", "--task=squad",
                           "--mode=train", "--precision=bf16", "--batch_size=2",
                           "--max_seq_length=16", "--num_accumulation_steps=2",
                           "--num_warmup_steps=1", "--num_steps=3", "--peak_matmul_size=128",
                           f"--output_json={output}", cwd=tmp_path, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "seq/s" in completed.stdout and "MFU" in completed.stdout
    result = json.loads(output.read_text())
    for key in benchmark.RESULT_KEYS:
        assert key in result and result[key] > 0, key
    times = result["step_times_s"]
    assert len(times) == 3
    assert result["step_time_median_s"] == pytest.approx(np.median(times))
    assert result["step_time_p90_s"] == pytest.approx(np.percentile(times, 90))
    # One step is one update of 2 micro-batches of 2 sequences.
    assert result["sequences_per_second"] == pytest.approx(4 / result["step_time_median_s"])
    flops = 2 * benchmark.count_flops(_tiny_config(), "squad", "train", 2, 16)
    assert result["flops_per_step"] == flops
    assert result["achieved_tflops"] == pytest.approx(flops / result["step_time_median_s"] / 1e12)
    assert result["mfu"] == pytest.approx(result["achieved_tflops"] /
                                          result["peak_matmul_tflops"])
    assert result["precision"] == "bf16" and np.isfinite(result["loss"])
    machine = result["machine"]
    if machine["gpus"]:
        assert "onednn" not in machine  # The oneDNN probe describes CPU-only hosts.
    else:
        # Which kernels a bf16 matmul ran (ONEDNN_VERBOSE of a child process): whichever they
        # are on this CPU and TF_ENABLE_ONEDNN_OPTS, each one's source type was read.
        report = machine["onednn"]
        assert "error" not in report, report
        assert not [kernel for kernel in report["kernels"] if kernel.endswith("src_?")], report


# ONEDNN_VERBOSE=1 lines as oneDNN 3.7 (TF 2.21) writes them, and a primitive line in the older
# layout (no "v1" marker, "src_<type>" descriptors).
_ONEDNN_LOG = """\
onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)
onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind,\
memory_descriptors,attributes,auxiliary,problem_desc,exec_time
onednn_verbose,v1,primitive,exec,cpu,matmul,gemm:jit:bf16,undef,src:bf16::blocked:ab::f0 \
wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,attr-scratchpad:user,,512x512:512x512,16.9
onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src:f32::blocked:ab::f0 \
wei:f32::blocked:ab::f0 dst:f32::blocked:ab::f0,,,512x512:512x512,3.1
onednn_verbose,primitive,exec,cpu,matmul,brg:avx512_core_amx,undef,src_f16::blocked:ab::f0 \
wei_f16::blocked:ab::f0 dst_f16::blocked:ab::f0,,,512x512:512x512,0.8
"""


def test_onednn_verbose_is_parsed_in_both_layouts():
    report = machine.parse_onednn_verbose(_ONEDNN_LOG)
    assert report == {"isa": "Intel AVX-512 with Intel DL Boost",
                      "kernels": ["gemm_api - src_f32", "matmul brg:avx512_core_amx src_f16",
                                  "matmul gemm:jit:bf16 src_bf16"],
                      "low_precision_on_onednn": True}
    lines = _ONEDNN_LOG.splitlines()
    assert len(lines) == 6
    fp32_only = "\n".join(lines[:3] + lines[4:5])  # Info lines and the fp32 gemm only.
    assert machine.parse_onednn_verbose(fp32_only)["low_precision_on_onednn"] is False


@pytest.mark.parametrize("task,mode,precision", [("classifier", "infer", "fp32"),
                                                 ("pretraining", "infer", "bf16"),
                                                 ("pretraining", "train", "fp32")])
def test_other_tasks_and_modes_run(task, mode, precision):
    spec = benchmark.BenchmarkSpec(_tiny_config(), task=task, mode=mode, precision=precision,
                                   batch_size=2, max_seq_length=8, max_predictions_per_seq=2,
                                   num_warmup_steps=1, num_steps=2, peak_matmul_size=64)
    result = benchmark.run_benchmark(spec, log=None)
    assert result["sequences_per_second"] > 0 and len(result["step_times_s"]) == 2
    assert result["flops_per_step"] == benchmark.count_flops(_tiny_config(), task, mode, 2, 8, 2)
    if task == "pretraining":
        # The masked-LM + next-sentence loss of random data is near ln(V) + ln(2).
        assert 0.5 * np.log(50) < result["loss"] < 2 * np.log(50) + 1


def _flag_values(config_file, **overrides):
    values = dict(bert_config_file=config_file, task="squad", mode="train", batch_size=2,
                  max_seq_length=8, precision="fp32", use_xla=False, num_warmup_steps=0,
                  num_steps=1, num_accumulation_steps=1, max_predictions_per_seq=2,
                  num_labels=2, peak_matmul_size=64, output_json=None, output_plot=None,
                  plot_batch_sizes="1,2", trace_file=None, check_onednn=False)
    values.update(overrides)
    # The other flags at their defaults (one device), as scripts/benchmark.py defines them.
    return bert_options.BenchmarkOptions.from_flags(
        bert_flags.parse(tool_flags.define_benchmark_flags, **values))


@pytest.mark.parametrize("overrides,message", [
    ({"bert_config_file": "/nonexistent/bert_config.json"}, "--bert_config_file"),
    ({"max_seq_length": 64}, "--max_seq_length=64 is longer than max_position_embeddings"),
    ({"mode": "infer", "num_accumulation_steps": 4}, "--num_accumulation_steps"),
    ({"batch_size": 0}, "--batch_size must be a positive integer"),
    ({"precision": "fp8"}, "--precision"),
])
def test_bad_flags_raise_one_clear_error(tmp_path, overrides, message):
    flag_values = _flag_values(_write_tiny_config(tmp_path), **overrides)
    with pytest.raises(BertTfError, match=message.replace("=", "=").replace("-", r"\-")):
        benchmark.run(flag_values, log=lambda _: None)


def test_script_reports_errors_in_one_line(tmp_path):
    completed = run_script("benchmark.py", "--bert_config_file=/nonexistent/bert_config.json",
                           cwd=tmp_path, timeout=600)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "--bert_config_file" in completed.stderr.strip().splitlines()[-1]


def test_plot_draws_a_batch_sweep(tmp_path):
    import matplotlib  # noqa: F401  (setup.py's [test] extra installs it)

    plot = tmp_path / "sweep.png"
    output = tmp_path / "sweep.json"
    flag_values = _flag_values(_write_tiny_config(tmp_path), output_plot=str(plot),
                               output_json=str(output), plot_batch_sizes="1,3")
    benchmark.run(flag_values, log=lambda _: None)
    png = plot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    # Two panels side by side (10 x 4 inches). Measured: 53 kB drawn, 15 kB for the two
    # panels' empty axes, 2.6 kB for a blank figure of that size.
    assert width > 2 * height > 200, (width, height)
    assert len(png) > 30_000, len(png)
    sweep = json.loads(output.read_text())["batch_size_sweep"]
    assert [row["batch_size"] for row in sweep] == [1, 3]


def test_plot_without_matplotlib_is_an_error_before_running(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises.
    output = tmp_path / "sweep.json"
    flag_values = _flag_values(_write_tiny_config(tmp_path), output_plot=str(tmp_path / "p.png"),
                               output_json=str(output))
    with pytest.raises(BertTfError, match="needs matplotlib"):
        benchmark.run(flag_values, log=lambda _: None)
    assert not output.exists()


def test_trace_file_and_profile_rows(tmp_path):
    trace = tmp_path / "trace.json"
    lines = []
    flag_values = _flag_values(_write_tiny_config(tmp_path), trace_file=str(trace),
                               precision="bf16", output_json=str(tmp_path / "result.json"))
    benchmark.run(flag_values, log=lines.append)
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(_is_matmul(event.get("args", {}).get("op", "")) for event in events)
    profile = lines[0]
    # bf16 matmuls show up as such in the per-op-type table, whatever kernel ran them.
    assert any(_is_matmul(line.split()[0]) and line.split()[1] == "bfloat16"
               for line in profile.splitlines()[1:-1])
    # The JSON keeps the profile; its op count is the table's last column summed, and the
    # number of kernels TensorFlow's own timeline drew for that step.
    summary = json.loads((tmp_path / "result.json").read_text())["step_profile"]
    assert summary["ops_per_step"] == sum(row["count"] for row in summary["rows"])
    assert profile.splitlines()[-1].split()[-1] == str(summary["ops_per_step"])
    kernels = [event for event in events if event.get("ph") == "X" and "op" in event["args"]]
    assert len(kernels) == summary["ops_per_step"] > 100


def _is_matmul(op_type):
    """Whether a kernel that ran is a matmul: TF's (MatMul, BatchMatMulV2, grappler's
    _FusedMatMul) or the oneDNN rewrites of them (_MklMatMul, _MklNativeFusedMatMul,
    _MklBatchMatMulV2, ...), whichever this CPU and TF_ENABLE_ONEDNN_OPTS select."""
    return "MatMul" in op_type


def test_use_xla_compiles_element_wise_clusters_and_leaves_matmuls_to_tf(tmp_path):
    config = session_lib.session_config(use_xla=True)
    assert config.graph_options.optimizer_options.global_jit_level == \
        tf1.OptimizerOptions.ON_1
    # TF reads TF_XLA_FLAGS once, at the first session of a process: so in a fresh one. A
    # training step, whose backward matmuls are plain MatMuls that XLA could take.
    completed = run_script("benchmark.py", f"--bert_config_file={_write_tiny_config(tmp_path)}",
                           "--task=classifier", "--mode=train", "--batch_size=2",
                           "--max_seq_length=8", "--num_warmup_steps=1", "--num_steps=1",
                           "--peak_matmul_size=64", "--use_xla", "--nocheck_onednn",
                           f"--trace_file={tmp_path / 'trace.json'}", cwd=tmp_path, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    profiled_ops = {line.split()[0] for line in completed.stdout.splitlines() if line.strip()}
    assert "_XlaRun" in profiled_ops
    # The matmuls ran as TF's (oneDNN's) kernels, outside the compiled clusters.
    assert any(_is_matmul(op) for op in profiled_ops), sorted(profiled_ops)


@pytest.mark.slow
def test_gemm_ceiling_writes_json_with_consistent_numbers(tmp_path):
    config_file = _write_tiny_config(tmp_path)
    output = tmp_path / "gemm.json"
    completed = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "gemm_ceiling.py"),
         f"--bert_config_file={config_file}", "--batch_size=2", "--max_seq_length=4",
         "--rounds=3", "--num_runs=1", f"--output_json={output}"],
        capture_output=True, text=True, env=child_env(), check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "ort_int8/ort_fp32:" in completed.stdout
    result = json.loads(output.read_text())
    # T = 2 x 4 rows, H = 8, I = 16 (the tiny config).
    assert result["shapes"] == {"[T,H]x[H,H]": {"mkn": [8, 8, 8], "per_layer": 4},
                                "[T,H]x[H,I]": {"mkn": [8, 8, 16], "per_layer": 1},
                                "[T,I]x[I,H]": {"mkn": [8, 16, 8], "per_layer": 1}}
    flops = {name: 2.0 * np.prod(shape["mkn"]) * shape["per_layer"]
             for name, shape in result["shapes"].items()}
    rounds = result["rounds"]
    assert len(rounds) == 3
    for by_kernel in rounds:
        assert set(by_kernel) == {"tf_fp32", "tf_bf16", "ort_fp32", "ort_int8"}
        for rates in by_kernel.values():
            seconds = sum(flops[name] / (rates[name] * 1e12) for name in flops)
            assert rates["layer"] == pytest.approx(sum(flops.values()) / seconds / 1e12)
    for kernel, rates in result["median_tflops"].items():
        assert rates["layer"] == pytest.approx(np.median([r[kernel]["layer"] for r in rounds]))
    assert set(result["ratios_median"]) == {"ort_int8/ort_fp32", "ort_int8/tf_fp32",
                                            "tf_bf16/tf_fp32"}
    assert result["ratios_median"]["ort_int8/ort_fp32"] == pytest.approx(np.median(
        [r["ort_int8"]["layer"] / r["ort_fp32"]["layer"] for r in rounds]))
    # The INT8 model is the quantized one; the fp32 one is not.
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= set(result["onnx_op_types"]["ort_int8"])
    assert "MatMul" in result["onnx_op_types"]["ort_fp32"]
    assert "MatMulInteger" not in result["onnx_op_types"]["ort_fp32"]
    report = result["machine"]["onednn_bf16"]
    assert "error" not in report and isinstance(report["low_precision_on_onednn"], bool)


@pytest.mark.parametrize("kernels, message", [
    ("tf_fp32,ort_int4", "--kernels: unknown ort_int4; use tf_fp32, tf_bf16, ort_fp32, ort_int8, "
                         "torch_fp32, torch_bf16."),
    ("tf_fp32,torch_fp32", "the torch_* kernels need --torch_python=PYTHON"),
])
def test_gemm_ceiling_rejects_bad_kernels(kernels, message):
    completed = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "gemm_ceiling.py"),
         f"--kernels={kernels}"], capture_output=True, text=True, env=child_env(), check=False)
    assert completed.returncode == 2
    assert message in completed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classifier", "squad"])
def test_predict_throughput_trains_exports_and_times_a_model_on_the_shipped_data(
        tmp_path, vocab_file, task):
    """benchmarks/predict_throughput.py as docs/benchmarks.md runs it, on a tiny model: it trains
    one step on the shipped data of its task, exports and converts the model, and times the
    Predictor on raw text."""
    pytest.importorskip("tf2onnx", reason="the [onnx] extra is not installed")
    pytest.importorskip("onnxruntime", reason="the [onnx] extra is not installed")
    config_file = tmp_path / "bert_config.json"
    config_file.write_text(
        _tiny_config(vocab_size=30522, max_position_embeddings=128).to_json_string())
    output = tmp_path / "predict.json"
    completed = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "predict_throughput.py"),
         f"--task={task}", f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}",
         "--max_seq_length=128", "--batch_size=2", "--num_questions=3", "--rounds=2",
         "--backends=tf_fp32,onnx_int8", "--lengths=corpus", f"--work_dir={tmp_path / 'work'}",
         f"--output_json={output}"],
        capture_output=True, text=True, env=child_env(), check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["task"] == task
    assert set(result["seconds"]) == {"tf_fp32", "onnx_int8"}
    for name, seconds in result["seconds"].items():
        assert len(seconds) == 2 and min(seconds) > 0
        assert result["inputs_per_sec_median"][name] == pytest.approx(3 / np.median(seconds))
    lengths = result["workload"]["word_pieces"]
    assert len(lengths) == 3 and max(lengths) <= 128
    # The timed INT8 model is the fused, quantized conversion scripts/export_onnx.py writes.
    int8_file, = (path for path in result["onnx_fused_operators"] if "int8" in path)
    assert "QAttention" in result["onnx_fused_operators"][int8_file]


# ------------------------------------------------------------- memory and --find_max_batch


def test_find_max_batch_doubles_then_bisects():
    spec = benchmark.BenchmarkSpec(bert_config=_tiny_config(), task="classifier")
    probed = []

    def probe(probe_spec, memory_limit_mb):
        # A stand-in whose memory grows with the batch: 100 MB + 20 MB a sequence.
        probed.append(probe_spec.batch_size)
        peak = 100 + 20 * probe_spec.batch_size
        return peak <= memory_limit_mb, peak

    found = batch_search.find_max_batch(spec, 100 + 20 * 37, log=lambda _: None, probe=probe)
    assert found["max_batch_size"] == 37
    assert probed == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert [p["fits"] for p in found["probes"]] == [b <= 37 for b in probed]
    assert batch_search.find_max_batch(spec, 50, log=lambda _: None,
                                       probe=probe)["max_batch_size"] == 0
    with pytest.raises(BertTfError, match="--memory_limit_mb=0: pass the memory budget"):
        batch_search.find_max_batch(spec, 0, probe=probe)


def test_find_max_seq_length_doubles_then_bisects_in_steps_of_128():
    spec = benchmark.BenchmarkSpec(bert_config=_tiny_config(), task="classifier", batch_size=3)
    table = spec.bert_config.max_position_embeddings
    probed = []

    def probe(probe_spec, memory_limit_mb):
        # Memory that grows with the square of the length, as attention scores do.
        length = probe_spec.max_seq_length
        assert probe_spec.batch_size == 3
        # Past the config's table the probe's model has a table of its length.
        assert probe_spec.bert_config.max_position_embeddings == max(table, length)
        probed.append(length)
        peak = 100 + (length / 128) ** 2
        return peak <= memory_limit_mb, peak

    found = batch_search.find_max_seq_length(spec, 100 + 23 ** 2, log=lambda _: None,
                                             probe=probe)
    assert found["max_seq_length"] == 23 * 128 and found["batch_size"] == 3
    assert probed == [128 * n for n in (1, 2, 4, 8, 16, 32, 24, 20, 22, 23)]
    assert spec.bert_config.max_position_embeddings == table  # The caller's, untouched.
    assert batch_search.find_max_seq_length(spec, 100, log=lambda _: None,
                                            probe=probe)["max_seq_length"] == 0


def test_the_two_searches_are_one_at_a_time(tmp_path):
    flag_values = _flag_values(_write_tiny_config(tmp_path), find_max_batch=True,
                               find_max_seq_length=True)
    with pytest.raises(BertTfError, match="--find_max_batch and --find_max_seq_length: pass one"):
        benchmark.run(flag_values, log=lambda _: None)


@pytest.mark.slow
def test_a_probe_runs_the_step_in_a_child_within_its_memory_budget():
    spec = benchmark.BenchmarkSpec(bert_config=_tiny_config(), task="classifier",
                                   max_seq_length=16, batch_size=2, recompute_grad=True)
    fits, peak = batch_search.run_probe(spec, memory_limit_mb=20000)
    # The child's own peak resident memory: TensorFlow alone holds a few hundred MB.
    assert fits and 200 < peak < 20000
    fits, peak = batch_search.run_probe(spec, memory_limit_mb=150)
    assert not fits and peak > 150  # Killed on going over.


def test_peak_memory_reads_the_tensorflow_allocator_after_a_reset():
    machine.reset_peak_memory()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.random.uniform([2048, 2048])  # 16 MB, and 16 MB more for the product.
        with tf.compat.v1.Session() as session:
            session.run(tf.reduce_sum(tf.matmul(x, x)))
    peak, source = machine.peak_memory_mb()
    if source == "tf_allocator":
        assert 32 <= peak < 1000
    else:
        assert source == "peak_rss" and peak > 32
    rss, rss_source = machine.peak_rss_mb()
    assert rss_source == "peak_rss" and rss > 32


def test_spec_from_options_takes_every_shared_field():
    options = bert_options.BenchmarkOptions(task="classifier", mode="infer", batch_size=3,
                                            max_seq_length=24, num_steps=4, num_labels=5,
                                            num_accumulation_steps=2, recompute_grad=True)
    config = _tiny_config()
    spec = benchmark.BenchmarkSpec.from_options(options, config)
    assert spec.bert_config is config
    for name in ("task", "mode", "batch_size", "max_seq_length", "precision", "use_xla",
                 "num_warmup_steps", "num_steps", "num_accumulation_steps",
                 "max_predictions_per_seq", "num_labels", "peak_matmul_size",
                 "recompute_grad"):
        assert getattr(spec, name) == getattr(options, name), name
    assert benchmark.BenchmarkSpec.from_options(bert_options.BenchmarkOptions(), config) == (
        benchmark.BenchmarkSpec(config))
