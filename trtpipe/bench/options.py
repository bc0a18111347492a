"""What bench can be told: batch sweep, threads, timing loop, and where the baseline and ONNX artifacts run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.options import Options, option
from trtpipe.shapes import format_size, parse_batch_sizes, parse_size
from trtpipe.vocab import BENCH_DURATION_S, BENCH_WARMUP, DEFAULT_BATCHES, Baseline, Device, OnnxExecution

DEFAULT_ROUNDS = 20  # short rounds, so that a burst of load lands on every row alike (rounds.py)


def _format_list(values: tuple[object, ...] | None) -> str:
    return "none" if values == () else ",".join(map(str, values or ()))


def _parse_executions(text: str) -> tuple[OnnxExecution, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    choices = OnnxExecution.every()
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        raise ValueError(f"unknown backend {', '.join(unknown) or '(none)'}: choose from {', '.join(choices)}")
    return tuple(OnnxExecution(n) for n in names)


def _parse_baselines(text: str) -> tuple[Baseline, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")
    unknown = [n for n in names if n not in tuple(Baseline)]
    if unknown:
        raise ValueError(f"unknown baseline {', '.join(unknown)}: choose from {', '.join(Baseline)}")
    return tuple(Baseline(n) for n in names)


@dataclass
class BenchOptions(Options):
    batches: tuple[int, ...] = option(DEFAULT_BATCHES, "Batch sizes to sweep.", parse=parse_batch_sizes,
                                      format=_format_list, metavar="LIST", flag="--batch")
    threads: int | None = option(None, "CPU threads for every backend (default: all cores).", type=int, minimum=1)
    warmup: int = option(BENCH_WARMUP, "Runs discarded before timing.", type=int, minimum=0)
    iters: int | None = option(None, "Timed runs per variant and batch (instead of --duration).", type=int,
                               minimum=1)
    rounds: int = option(DEFAULT_ROUNDS, "Rounds the timed runs are split into, taken in turn across all variants "
                         "(order rotated each round), so a slow spell of a shared machine hits every variant alike; "
                         "p50s and speedups are medians over rounds with 95 % intervals, needing 3 rounds or more.",
                         type=int, minimum=1)
    duration: float = option(BENCH_DURATION_S, "Seconds of timed runs per variant and batch.", type=float,
                             minimum=0.1)
    device: Device = option(Device.CPU, "Where the PyTorch baseline runs (cuda adds a TF32 row).", type=Device)
    baselines: tuple[Baseline, ...] | None = option(
        None, "More PyTorch rows beside FP32 eager: compile (torch.compile FP32), autocast (BF16 on a CPU with "
        "AVX512-BF16/AMX, FP16 on a GPU), compile-half (torch.compile mode reduce-overhead, FP16 channels_last on a "
        "GPU; BF16 on a CPU), graph-half (FP16 channels_last replayed from a CUDA graph, GPU), max-autotune (minutes "
        "per shape); none for no more rows. Default: compile-half,graph-half with --device cuda, none on the CPU.",
        parse=_parse_baselines, format=_format_list, metavar="LIST")
    peers: bool = option(False, "Also bench the INT8 quantizers users would pick instead (ONNX Runtime "
                         "quantize_static; OpenVINO + NNCF where installed) on the first FP32 ONNX.", type=bool)
    backend: tuple[OnnxExecution, ...] = option((OnnxExecution.default(),), "How ONNX artifacts run, one row set each: "
                                      "onnxruntime (CPU), onnxruntime-cuda, onnxruntime-tensorrt, openvino; e.g. "
                                      "onnxruntime,openvino.", parse=_parse_executions, format=_format_list,
                                      metavar="LIST")
    workspace: int | None = option(None, "ONNX Runtime's TensorRT provider (onnxruntime-tensorrt): workspace memory "
                                   "limit of the engines it builds, e.g. 4GiB, as trtpipe build --workspace.",
                                   parse=parse_size, format=format_size, metavar="SIZE")
    tune: bool = option(True, "ONNX files on ONNX Runtime CUDA: probe CUDA graph, NHWC and cuDNN search settings once "
                        "per artifact (outputs checked against the plain run), keep the fastest and record it beside "
                        "the artifact (model.tuned.json) for load, serve and the Triton export; an artifact with a "
                        "record runs with it.", type=bool)
    cuda_graph: bool = option(True, "TensorRT engines: capture each batch's launch in a CUDA graph after a warm-up "
                              "run and replay it (trtexec 11's default); a capture that fails falls back to plain "
                              "launches with one warning.", type=bool)
    spin_wait: bool = option(False, "TensorRT engines: wait for each run by polling its CUDA event (trtexec's "
                             "--useSpinWait): steadier latency, one CPU core kept busy.", type=bool)
    profile_layers: bool = option(False, "TensorRT engines: time every layer with TensorRT's profiler, in separate "
                                  "runs after each batch's timed runs (without a CUDA graph, so the timed rows "
                                  "are unaffected); a table and the results JSON give each layer's mean ms and "
                                  "share.", type=bool)
    load_engine: Path | None = option(None, "A TensorRT engine to bench beside the ARTIFACTS, e.g. one trtexec "
                                      "built (--trust-engine when it has no trtpipe sidecar).", type=Path,
                                      metavar="PLAN")
    allow_cpu_mismatch: bool = option(False, "Bench a cpu/openvino INT8 artifact on a CPU its manifest records it "
                                      "unsafe on (8-bit weights without VNNI saturate at 16 bits), which is "
                                      "otherwise refused.", type=bool)
    trust_engine: bool = option(False, "Load TensorRT engines that have no trtpipe sidecar. An engine is executable "
                                "code: only one you built or got over a trusted channel. Its inputs, outputs and "
                                "profiles are read from the engine.", type=bool)
