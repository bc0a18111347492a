"""Engines trtpipe did not build (no sidecar) are deserialised only on --trust-engine, and bench's TensorRT flags
(--cuda-graph, --spin-wait, --profile-layers, --load-engine, --trust-engine) reach the options. What a trusted
engine does on a GPU is in tests/engine/test_gpu_runtime.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import error_line
from trtpipe.bench.options import BenchOptions
from trtpipe.errors import BadInput
from trtpipe.runtime.tensorrt.loader import TRUST_ENGINE_FLAG, EngineOrigin, engine_origin


def _has_full_tensorrt() -> bool:
    try:
        import tensorrt

        return hasattr(tensorrt, "Builder")
    except ImportError:
        return False


def test_only_a_trtpipe_engine_or_a_trusted_one_may_be_deserialised(tmp_path: Path) -> None:
    engine = tmp_path / "from_trtexec.plan"
    engine.write_bytes(b"not read by this check")
    with pytest.raises(BadInput) as raised:
        engine_origin(engine, trusted=False)
    message = raised.value.message
    assert "has no metadata sidecar (from_trtexec.plan.json)" in message and TRUST_ENGINE_FLAG in message
    assert "\n" not in message
    with pytest.raises(BadInput, match="pass --my-flag if you built it"):  # another command's spelling
        engine_origin(engine, trusted=False, flag="--my-flag")
    assert engine_origin(engine, trusted=True) is EngineOrigin.TRUSTED
    Path(f"{engine}.json").write_text("{}")  # its sidecar, checked against the file by whoever loads it
    assert engine_origin(engine, trusted=False) is EngineOrigin.TRTPIPE


def test_bench_refuses_an_engine_without_a_sidecar_naming_the_flag(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    engine = tmp_path / "model.trt"  # trtexec's usual suffix: --load-engine takes any
    engine.write_bytes(b"a plan from elsewhere")
    result = run_cli("bench", "digits_resnet", "--load-engine", engine, "--iters", "1")
    assert result.exit_code == 1 and "pass --trust-engine" in error_line(result.output)
    result = run_cli("bench", "digits_resnet", "--load-engine", tmp_path / "missing.plan", "--iters", "1")
    assert result.exit_code == 1 and "does not exist" in error_line(result.output)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_full_tensorrt() or _cuda(), reason="a GPU or TensorRT is here: the bytes would be "
                    "deserialised (test_gpu_runtime.py benches a real trusted engine)")
def test_a_trusted_engine_reaches_the_tensorrt_backend(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """With --trust-engine the file goes on to the TensorRT backend, which here stops at the missing GPU (exit 3),
    after the reference ran: the refusal above is the only thing --trust-engine lifts."""
    engine = tmp_path / "model.plan"
    engine.write_bytes(b"a plan from elsewhere")
    result = run_cli("bench", "digits_resnet", engine, "--trust-engine", "--batch", "1", "--iters", "1",
                     "--rounds", "1", "--warmup", "0")
    assert result.exit_code == 3, result.output
    assert "needs a CUDA GPU" in error_line(result.output) or "needs TensorRT" in error_line(result.output)


def test_a_trusted_engine_is_labelled_as_such() -> None:
    from trtpipe.bench.plan import label
    from trtpipe.runtime.tensorrt.backend import FOREIGN_NOTE, foreign_engine_description
    from trtpipe.vocab import OnnxExecution

    plan = Path(__file__)  # any file: the description reads its size only
    description = foreign_engine_description(plan)
    assert description.engine is None and description.note == FOREIGN_NOTE
    assert label(description, OnnxExecution.CPU) == f"tensorrt-trusted ({plan.stem})"


def test_bench_flags_for_tensorrt_engines(run_cli) -> None:  # type: ignore[no-untyped-def]
    help_text = run_cli("bench", "--help").output
    for flag in ("--cuda-graph / --no-cuda-graph", "--spin-wait", "--profile-layers", "--load-engine PLAN",
                 "--trust-engine"):
        assert flag in help_text
    defaults = BenchOptions()
    assert defaults.cuda_graph and not defaults.spin_wait and not defaults.profile_layers  # trtexec 11's graphs
    assert not defaults.trust_engine and defaults.load_engine is None


def test_run_settings_carry_spin_wait_to_the_tensorrt_backend_only() -> None:
    from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    assert {"cuda_graph", "spin_wait"} <= TensorRTBackend.settings
    assert TensorRTBackend.accept(RunOptions(spin_wait=True, cuda_graph=True)).spin_wait
    with pytest.raises(BadInput, match="has no setting spin_wait"):
        OnnxRuntimeBackend.accept(RunOptions(spin_wait=True))


def test_a_results_file_with_layer_timings_renders(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """`trtpipe report` on a bench JSON that carries layer timings: the HTML has the section."""
    from tests.engine.test_layer_timing import _report, _results
    from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow

    results = tmp_path / "bench.json"
    row = BenchRow.from_dict(_results()["results"][0]).to_dict()  # every field a row has
    full = {**_results(), **_report(), "schema": BENCH_SCHEMA, "reference": "PyTorch FP32 eager",
            "results": [{**row, "reference": True, "speedup_vs_torch_fp32": 1.0}, {**row, "variant": "other"}]}
    full["environment"] |= {"os": "linux", "python": "3.11", "onnxruntime_providers": ["CPUExecutionProvider"]}
    results.write_text(json.dumps(full))
    result = run_cli("report", results, "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "Layer timing (TensorRT profiler)" in (tmp_path / "r.html").read_text()


def test_a_sidecar_that_does_not_match_its_engine_is_overruled_only_by_trust(tmp_path: Path) -> None:
    """As `trtpipe inspect` reads --trust-engine: a sidecar proves the pair was written together, not who wrote it;
    with the flag the engine is loaded as one from elsewhere, with one warning."""
    from trtpipe import console
    from trtpipe.runtime.tensorrt.backend import describe_engine

    engine = tmp_path / "m.plan"
    engine.write_bytes(b"an engine")
    sidecar = {"schema": "trtpipe.engine/1", "tensorrt_version": "10.13.0.35", "gpu_name": "NVIDIA H100",
               "compute_capability": "9.0", "engine_sha256": "0" * 64}
    Path(f"{engine}.json").write_text(json.dumps(sidecar))
    with pytest.raises(BadInput, match="does not match its sidecar"):
        describe_engine(engine, trusted=False)
    with console.recording_warnings() as warnings:
        description = describe_engine(engine, trusted=True)
    assert description.engine is None and len(warnings) == 1
    assert "does not match its sidecar" in warnings[0] and "as --trust-engine asks" in warnings[0]
