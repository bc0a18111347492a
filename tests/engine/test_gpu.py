"""Engines built and run for real. Needs a CUDA GPU and the full TensorRT; skipped with the reason elsewhere.

Run on a GPU machine with `pytest -m "gpu or tensorrt"`: builds FP32, FP16 and INT8 engines of the digits model
and an FP32 ResNet-50 engine, checks them against ONNX Runtime, and benches them against PyTorch FP32.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def _full_tensorrt() -> bool:
    try:
        import tensorrt

        return hasattr(tensorrt, "Builder")
    except ImportError:
        return False


def _loadable(library: str) -> bool:
    import ctypes

    try:
        ctypes.CDLL(library)
        return True
    except OSError:
        return False


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


needs_gpu = pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch")
needs_tensorrt = pytest.mark.skipif(not (_cuda() and _full_tensorrt()),
                                    reason="needs a CUDA GPU and the full TensorRT (pip install 'trtpipe[gpu]')")
pytestmark = [pytest.mark.gpu]


@needs_gpu
def test_torch_cuda_baseline_matches_cpu() -> None:
    from trtpipe.models.loader import load_model
    from trtpipe.runtime.torch.backend import TorchBackend
    from trtpipe.vocab import Device

    loaded = load_model("digits_resnet")
    x = np.random.default_rng(0).standard_normal((4, 1, 32, 32), dtype=np.float32)
    cpu = TorchBackend(loaded.module, loaded.sample_shape).run(x)[0]
    cuda = TorchBackend(load_model("digits_resnet").module, loaded.sample_shape, device=Device.CUDA).run(x)[0]
    np.testing.assert_allclose(cuda, cpu, atol=1e-3)


@needs_gpu
def test_pytorch_gpu_rows_run_as_a_pytorch_user_tunes_them() -> None:
    """cudnn.benchmark on; the hand-captured graph row's no-copy call is its replay alone, on inputs cast to FP16
    and made channels_last once, and it answers what the row's run with copies answers."""
    import torch

    from trtpipe.models.loader import load_model
    from trtpipe.runtime.torch.backend import TorchBackend
    from trtpipe.vocab import Device, Precision

    loaded = load_model("digits_resnet")
    x = np.random.default_rng(0).standard_normal((8, 1, 32, 32), dtype=np.float32)
    graphed = TorchBackend(loaded.module, loaded.sample_shape, device=Device.CUDA, half=Precision.FP16,
                           channels_last=True, cuda_graph=True)
    assert torch.backends.cudnn.benchmark
    copied = graphed.run(x)[0]
    call = graphed.device_resident_call(graphed.feeds(x))
    assert call is not None and graphed._graphs is not None and len(graphed._graphs) == 1
    graph = next(iter(graphed._graphs.values()))
    assert graph.inputs[0].dtype == torch.float16
    assert graph.inputs[0].is_contiguous(memory_format=torch.channels_last)
    call()
    np.testing.assert_allclose(graph.outputs.float().cpu().numpy(), copied, rtol=1e-3, atol=1e-3)


@pytest.fixture(scope="module")
def digits_variants(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> dict[str, Path]:
    from trtpipe.optimize import OptimizeOptions, optimize

    folder = tmp_path_factory.mktemp("variants")
    variants = {"fp32": digits_onnx}
    variants["fp16"] = optimize(digits_onnx, folder / "fp16.onnx",
                                OptimizeOptions(precision="fp16", calib="digits")).path
    variants["int8"] = optimize(digits_onnx, folder / "int8.onnx",
                                OptimizeOptions(precision="int8", target="tensorrt", calib="digits")).path
    return variants


@needs_tensorrt
@pytest.mark.tensorrt
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_digits_engine_matches_onnxruntime(digits_variants: dict[str, Path], tmp_path: Path, precision: str) -> None:
    from trtpipe.engine import EngineOptions
    from trtpipe.engine.build import build_engine
    from trtpipe.models.data import load_split
    from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    source = digits_variants[precision]
    cache = tmp_path / "timing.cache"
    result = build_engine(source, tmp_path / "m.plan", EngineOptions(workspace=1 << 30, timing_cache=cache))
    assert result.sidecar.precision == precision and cache.is_file()
    assert json.loads(result.layer_info.read_text())["Layers"]
    split = load_split("digits", "eval")
    from trtpipe.runtime.options import RunOptions

    optimization = "disable" if precision == "int8" else "all"  # TensorRT arithmetic for Q/DQ
    with OnnxRuntimeBackend(source, RunOptions(optimization=optimization)) as ort, \
            TensorRTBackend(result.engine) as engine:
        for batch in (1, 8, 32):
            reference, out = ort.run(split.images[:batch])[0], engine.run(split.images[:batch])[0]
            assert np.mean(reference.argmax(1) == out.argmax(1)) >= (1.0 if precision == "fp32" else 0.9)
        logits = np.concatenate([engine.run(split.images[i : i + 32])[0] for i in range(0, 832, 32)])
    assert np.mean(logits.argmax(1) == split.labels[:832]) >= 0.985


@needs_tensorrt
@pytest.mark.tensorrt
def test_resnet50_engine_bench_against_pytorch(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    onnx_path, plan = tmp_path / "r50.onnx", tmp_path / "r50.plan"
    assert run_cli("convert", "resnet50", "-o", onnx_path).exit_code == 0
    assert run_cli("build", onnx_path, "-o", plan, "--workspace", "4GiB").exit_code == 0
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", "resnet50", onnx_path, plan, "--device", "cuda", "--batch", "1,8", "--iters", "50",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = json.loads(json_path.read_text())["results"]
    # FP32 eager and TF32, and the FP16 rows bench adds on a GPU by default (Baseline.defaults)
    assert {r["precision"] for r in rows if r["backend"] == "torch"} == {"fp32", "tf32", "fp16"}
    engine_rows = [r for r in rows if r["backend"] == "tensorrt"]
    assert {r["includes_transfers"] for r in engine_rows} == {True, False}
    # ResNet-50's registry weights are random: no top-1 agreement to read, but an FP32 engine's outputs are
    # PyTorch FP32's up to the order of additions
    for row in engine_rows:
        assert row["cosine"] is not None and row["cosine"] > 0.999, (row["variant"], row["batch"], row["cosine"])


def _ort_providers() -> list[str]:
    import onnxruntime

    return onnxruntime.get_available_providers()


@needs_tensorrt
@pytest.mark.tensorrt
def test_int8_engine_runs_its_convolutions_in_int8(digits_variants: dict[str, Path], tmp_path: Path) -> None:
    from trtpipe.engine.build import build_engine
    from trtpipe.engine.layers import summarise

    result = build_engine(digits_variants["int8"], tmp_path / "int8.plan")  # the build's own check passed
    convolutions = [s for s in summarise(json.loads(result.layer_info.read_text())) if s.compute]
    assert convolutions and all(s.precision == "int8" for s in convolutions if "fc" not in s.name.lower())


@needs_tensorrt
@pytest.mark.tensorrt
def test_version_compatible_engine_loads_through_the_runtime(digits_onnx: Path, tmp_path: Path) -> None:
    from trtpipe.engine import EngineOptions
    from trtpipe.engine.build import build_engine
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    result = build_engine(digits_onnx, tmp_path / "vc.plan", EngineOptions(version_compat=True))
    assert result.sidecar.version_compatible
    with TensorRTBackend(result.engine) as engine:  # deserialises with engine host code allowed
        assert engine.run(np.zeros((2, 1, 32, 32), np.float32))[0].shape == (2, 10)


@needs_tensorrt
@pytest.mark.tensorrt
def test_cuda_graph_replay_matches_the_plain_path(digits_onnx: Path, tmp_path: Path) -> None:
    from trtpipe.engine.build import build_engine
    from trtpipe.models.data import load_split
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    plan = build_engine(digits_onnx, tmp_path / "g.plan").engine
    images = load_split("digits", "eval").images
    with TensorRTBackend(plan) as plain, TensorRTBackend(plan, RunOptions(cuda_graph=True)) as graphed:
        for batch in (4, 16, 4):  # a second shape, then back to the first: replay reuses its own buffers
            for start in (0, 100):
                x = images[start : start + batch]
                np.testing.assert_allclose(graphed.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-4)


@needs_tensorrt
@pytest.mark.tensorrt
def test_timing_cache_is_reused_and_a_foreign_one_is_replaced(digits_onnx: Path, tmp_path: Path) -> None:
    from trtpipe.engine import EngineOptions
    from trtpipe.engine.build import build_engine

    cache = tmp_path / "timing.cache"
    build_engine(digits_onnx, tmp_path / "a.plan", EngineOptions(timing_cache=cache))
    first = cache.read_bytes()
    build_engine(digits_onnx, tmp_path / "b.plan", EngineOptions(timing_cache=cache))
    assert cache.read_bytes()[:16] == first[:16]
    cache.write_bytes(b"not a timing cache from this GPU")
    result = build_engine(digits_onnx, tmp_path / "c.plan", EngineOptions(timing_cache=cache))
    assert result.engine.is_file() and cache.read_bytes() != b"not a timing cache from this GPU"


@needs_tensorrt
@pytest.mark.tensorrt
def test_bench_runs_a_digits_engine_on_all_held_out_images(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    plan, json_path = tmp_path / "d.plan", tmp_path / "bench.json"
    assert run_cli("build", digits_onnx, "-o", plan).exit_code == 0  # profile max batch 32 < 847 images
    result = run_cli("bench", "digits_resnet", plan, "--device", "cuda", "--batch", "1,32", "--iters", "20",
                     "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(json_path.read_text())["results"] if r["backend"] == "tensorrt"]
    assert rows and all(r["agreement_samples"] == 847 and r["top1_accuracy"] >= 0.985 for r in rows)
    assert all(r["speedup_vs_torch_fp32"] for r in rows)  # no-transfer rows against PyTorch without transfers


@needs_gpu
@pytest.mark.parametrize("backend", ["onnxruntime-cuda", "onnxruntime-tensorrt"])
def test_onnxruntime_gpu_providers_really_run(digits_onnx: Path, tmp_path: Path, run_cli, backend: str) -> None:  # type: ignore[no-untyped-def]
    wanted = "CUDAExecutionProvider" if backend.endswith("cuda") else "TensorrtExecutionProvider"
    if wanted not in _ort_providers():
        pytest.skip(f"{wanted} is not installed (pip install onnxruntime-gpu)")
    if wanted == "TensorrtExecutionProvider" and not _loadable("libnvinfer.so.10"):
        pytest.skip("onnxruntime-gpu lists its TensorRT provider, but TensorRT 10's libnvinfer.so.10 is not here")
    from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
    from trtpipe.runtime.onnxruntime.providers import provider_list
    from trtpipe.runtime.options import RunOptions
    from trtpipe.vocab import OnnxExecution

    providers = tuple(provider_list(OnnxExecution(backend)))
    with OnnxRuntimeBackend(digits_onnx, RunOptions(providers=providers)) as session:
        assert session.session.get_providers()[0] == wanted
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", digits_onnx, "--backend", backend, "--device", "cuda", "--batch", "8",
                     "--iters", "20", "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(json_path.read_text())["results"] if r["backend"] == "onnxruntime"]
    assert rows and all(r["device"] == "cuda" and not r["simulated"] for r in rows)


@needs_gpu
def test_cuda_rows_carry_device_memory_and_autocast_runs_in_fp16(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", "--device", "cuda", "--batch", "1,32", "--iters", "10",
                     "--baselines", "autocast,compile", "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = json.loads(json_path.read_text())["results"]
    assert {r["variant"] for r in rows} >= {"pytorch-fp32", "pytorch-tf32", "pytorch-fp16-autocast",
                                            "pytorch-fp32-compile"}
    for row in rows:  # one assertion per row, naming it, so a failure on a GPU machine says which row and figure
        assert row["device"] == "cuda", row
        assert row["device_memory_mb"] is not None and row["device_memory_mb"] > 0, (row["variant"], row["batch"],
                                                                                     row["device_memory_mb"])
    autocast = [r for r in rows if r["variant"].startswith("pytorch-fp16-autocast")]
    for row in autocast:
        assert row["precision"] == "fp16" and row["top1_agreement"] > 0.98, (row["variant"], row["batch"],
                                                                             row["precision"], row["top1_agreement"])


@needs_tensorrt
@pytest.mark.tensorrt
def test_a_second_backend_reports_its_own_tensorrt_errors(digits_onnx: Path, tmp_path: Path) -> None:
    # TensorRT keeps one logger per process: a second backend used to read "no message" for its failure.
    from trtpipe.engine.build import build_engine
    from trtpipe.errors import TrtpipeError
    from trtpipe.files import sha256_file
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    plan = build_engine(digits_onnx, tmp_path / "good.plan").engine
    broken = tmp_path / "broken.plan"
    broken.write_bytes(plan.read_bytes()[: plan.stat().st_size // 2])  # truncated, with a sidecar that agrees
    sidecar = json.loads(Path(f"{plan}.json").read_text()) | {"engine_sha256": sha256_file(broken)}
    Path(f"{broken}.json").write_text(json.dumps(sidecar))
    with TensorRTBackend(plan), pytest.raises(TrtpipeError, match="could not deserialise") as raised:
        TensorRTBackend(broken)
    assert "TensorRT logged no error" not in raised.value.message


def _cuda_provider_or_skip() -> None:
    if "CUDAExecutionProvider" not in _ort_providers():
        pytest.skip("CUDAExecutionProvider is not installed (pip install onnxruntime-gpu)")


@needs_gpu
def test_onnxruntime_cuda_rows_are_tuned_device_resident_and_stand_against_pytorch(  # type: ignore[no-untyped-def]
        digits_onnx: Path, tmp_path: Path, run_cli) -> None:
    """bench --device cuda: the ONNX file is probed once (settings recorded beside it and used by trtpipe.load),
    timed with and without copies, beside PyTorch's strongest one-line rows; the standing line names the fastest."""
    import shutil

    import trtpipe
    from trtpipe.artifact.records.tuned import read_tuned
    from trtpipe.vocab import OnnxExecution

    _cuda_provider_or_skip()
    artifact = tmp_path / "model.onnx"
    shutil.copy(digits_onnx, artifact)
    shutil.copy(digits_onnx.with_suffix(".manifest.json"), tmp_path / "model.manifest.json")
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", artifact, "--backend", "onnxruntime-cuda", "--device", "cuda",
                     "--batch", "1,8", "--iters", "20", "--json", json_path)
    assert result.exit_code == 0, result.output
    report = json.loads(json_path.read_text())
    ours = [r for r in report["results"] if r["backend"] == "onnxruntime"]
    assert {r["includes_transfers"] for r in ours} == {True, False}
    assert all(r["device"] == "cuda" and r["cuda_graph"] is not None and r["speedup_vs_torch_fp32"] for r in ours)
    variants = {r["variant"] for r in report["results"]}
    assert {"pytorch-fp16-cl-compile-reduce-overhead", "pytorch-fp16-cl-cudagraph"} <= variants
    assert {(e["batch"], e["includes_transfers"]) for e in report["standing_pytorch"]} == {(1, False), (8, False)}
    tuned = read_tuned(artifact)[OnnxExecution.CUDA]
    assert sum(1 for c in tuned.candidates if c["rejected"] is None) >= 1
    from trtpipe.runtime.onnxruntime.providers import provider_list

    with trtpipe.load(artifact, providers=tuple(provider_list(OnnxExecution.CUDA))) as model:
        assert model.backend.cuda_graph is tuned.settings["cuda_graph"]
        assert model.backend.prefer_nhwc is tuned.settings["prefer_nhwc"]
        np.testing.assert_allclose(model.predict(np.zeros((3, 1, 32, 32), np.float32)).shape, (3, 10))


@needs_gpu
def test_an_onnx_reference_runs_on_the_gpu_with_device_cuda(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    _cuda_provider_or_skip()
    import shutil

    alone = tmp_path / "from_elsewhere.onnx"  # no manifest naming a registry model: no PyTorch module to compare with
    shutil.copy(digits_onnx, alone)
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", alone, "--device", "cuda", "--backend", "onnxruntime-cuda", "--batch", "4",
                     "--iters", "10", "--json", json_path)
    assert result.exit_code == 0, result.output
    [reference, *_] = [r for r in json.loads(json_path.read_text())["results"] if r["reference"]]
    assert reference["device"] == "cuda" and reference["variant"].startswith("onnxruntime-cuda-fp32")
