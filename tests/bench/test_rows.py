"""A bench row holds its latency as one LatencyStats, and the results JSON keeps the flat fields every reader of
it (report, select, the pipeline, a user's script) has always read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.timing import LatencyStats
from trtpipe.vocab import BackendKind, Device, Precision, Target


def _row() -> BenchRow:
    latency = LatencyStats.from_samples(np.array([2.0, 1.0, 3.0, 4.0]), batch=8)
    return BenchRow(variant="onnxruntime-int8-cpu (m)", backend=BackendKind.ONNXRUNTIME, precision=Precision.INT8,
                    device=Device.CPU, batch=8, latency=latency, artifact="m.onnx", target=Target.CPU,
                    host_memory_mb=12.5)


def test_a_rows_json_is_flat_with_the_latency_in_its_place() -> None:
    data = _row().to_dict()
    assert list(data)[:15] == ["variant", "backend", "precision", "device", "batch", "iters", "p50_ms", "p90_ms",
                               "p99_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "throughput", "artifact"]
    assert "latency" not in data
    assert data["iters"] == 4 and data["p50_ms"] == 2.5 and data["throughput"] == 8 * 1000 / 2.5


def test_a_row_read_back_is_the_row_written() -> None:
    row = _row()
    again = BenchRow.from_dict({**row.to_dict(), "a field of a later trtpipe": 1})
    assert again == row
    assert again.backend is BackendKind.ONNXRUNTIME and again.target is Target.CPU
    assert (again.p50_ms, again.max_ms, again.iters) == (row.latency.p50_ms, 4.0, 4)


def test_a_cpu_session_claims_no_cuda_graph_and_no_layer_profile(digits_onnx: Path) -> None:
    """bench asks every backend the same two questions; a CPU session answers None to both, so its rows carry no
    ``cuda_graph`` and the run no layer timing."""
    from trtpipe.runtime.registry import open_artifact

    with open_artifact(digits_onnx) as backend:
        feeds = backend.feeds(np.zeros((2, *backend.inputs[0].shape[1:]), dtype=np.float32))
        assert backend.replays_cuda_graph(feeds) is None
        assert backend.profile_layers(feeds, runs=1) is None
