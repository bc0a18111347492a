"""A GPU run's report says how its rows ran where it matters for a comparison (bench/environment.py): PyTorch with
cudnn.benchmark, its inputs prepared outside the timed calls, which rows copy from pinned memory."""

from __future__ import annotations

from typing import Any

from tests.report.test_report import _row
from trtpipe.bench.rows import BENCH_SCHEMA
from trtpipe.report.html import render_html
from trtpipe.report.tables import to_markdown
from trtpipe.runtime.torch.gpu_runs import CUDA_SETTINGS
from trtpipe.vocab import BackendKind, Precision


def _report(gpu_settings: list[str]) -> dict[str, Any]:
    return {
        "schema": BENCH_SCHEMA, "trtpipe_version": "0.1.0",
        "environment": {"cpu": "Test CPU", "cpu_flags": [], "cores": 16, "threads": 16,
                        "gpu": {"name": "Test GPU", "compute_capability": "9.0", "memory_gib": 80.0},
                        "os": "Linux", "python": "3.12", "versions": {"torch": "2.14", "onnxruntime": "1.31"},
                        "onnxruntime_providers": ["CUDAExecutionProvider"], "gpu_settings": gpu_settings},
        "model": {"name": "resnet50", "source_kind": "registry", "parameters": 25_557_032,
                  "input_shape": [1, 3, 224, 224]},
        "settings": {"iters": 20, "warmup": 2, "duration": 5.0},
        "agreement_inputs": "random inputs",
        "results": [_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, 1, 2.0, speedup_vs_torch_fp32=1.0)],
    }


def test_a_gpu_reports_environment_table_states_the_pytorch_rows_settings() -> None:
    report = _report(list(CUDA_SETTINGS))
    assert any("cudnn.benchmark on" in s for s in CUDA_SETTINGS) and any("pinned" in s for s in CUDA_SETTINGS)
    page, markdown = render_html(report, []), to_markdown(report)
    assert "<th>GPU run settings</th>" in page and "cudnn.benchmark on" in page
    assert f"GPU run settings: {'; '.join(CUDA_SETTINGS)}." in markdown
    cpu = _report([])
    assert "GPU run settings" not in render_html(cpu, []) and "GPU run settings" not in to_markdown(cpu)


def test_the_environment_of_a_run_without_a_gpu_has_no_gpu_settings() -> None:
    from trtpipe.bench.environment import collect

    environment = collect(1)
    assert environment["gpu_settings"] == ([] if environment["gpu"] is None else list(CUDA_SETTINGS))
