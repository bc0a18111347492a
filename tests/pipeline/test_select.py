"""Selection: the fastest (runtime, artifact) pair within every budget, and the batch advice within them."""

from __future__ import annotations

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.timing import LatencyStats
from trtpipe.pipeline.select import batch_advice, choose
from trtpipe.vocab import BackendKind, Device, Precision


def _row(variant: str, backend: str, batch: int, p50: float, memory: float, *, device: str = "cpu") -> BenchRow:
    latency = LatencyStats(iters=10, p50_ms=p50, p90_ms=p50, p99_ms=p50 * 1.2, mean_ms=p50, std_ms=0.0, min_ms=p50,
                           max_ms=p50, throughput=batch * 1000 / p50)
    return BenchRow(variant=variant, backend=BackendKind(backend), precision=Precision.INT8, device=Device(device),
                    batch=batch, latency=latency, artifact=f"models/{variant}/1/model.onnx", top1_agreement=0.99,
                    host_memory_mb=memory if device == "cpu" else 50.0,
                    device_memory_mb=memory if device == "cuda" else None)


ROWS = [
    _row("reference", "torch", 1, 60.0, 600.0),
    _row("int8 on onnxruntime", "onnxruntime", 1, 14.0, 200.0),
    _row("int8 on openvino", "openvino", 1, 12.0, 400.0),
    _row("int8 on openvino", "openvino", 8, 80.0, 900.0),
    _row("int8 on openvino", "openvino", 32, 300.0, 2500.0),
]
ROWS[0].precision = "fp32"
ROWS[0].artifact = None


def test_the_fastest_pair_wins_and_its_runtime_is_named() -> None:
    choice = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and (choice.variant, choice.runtime) == ("int8 on openvino", "openvino")


def test_a_memory_budget_rejects_the_pair_that_needs_more_and_says_so() -> None:
    choice = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None, memory_budget_mb=300)
    assert choice is not None and (choice.variant, choice.runtime) == ("int8 on onnxruntime", "onnxruntime")
    assert "200 MB within 300" in choice.reason
    none = choose(ROWS, batch=1, latency_budget_ms=None, max_accuracy_drop=None, memory_budget_mb=100)
    assert none is not None and none.artifact is None and "needs 400 MB > 100" in none.reason


def test_batch_advice_respects_the_memory_budget_as_well_as_the_latency_budget() -> None:
    assert batch_advice(ROWS, "int8 on openvino", None)["batch"] == 32  # type: ignore[index]
    assert batch_advice(ROWS, "int8 on openvino", None, memory_budget_mb=1000)["batch"] == 8  # type: ignore[index]
    advice = batch_advice(ROWS, "int8 on openvino", 50.0, memory_budget_mb=1000)
    assert advice is not None and advice["batch"] == 1 and advice["memory_mb"] == 400.0
    advice = batch_advice(ROWS, "int8 on openvino", None, memory_budget_mb=10)
    assert advice is not None and advice["batch"] is None and "memory within 10" in advice["reason"]


def test_a_gpu_row_is_judged_by_its_device_memory() -> None:
    rows = [_row("engine", "tensorrt", 1, 1.0, 3000.0, device="cuda"), _row("onnx", "onnxruntime", 1, 2.0, 100.0)]
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None, memory_budget_mb=2000)
    assert choice is not None and choice.variant == "onnx"


def test_batch_advice_says_how_many_instances_fit_and_how_to_check_they_pay() -> None:
    rows = [_row("fp16 on cuda", "onnxruntime", 1, 1.0, 700.0, device="cuda"),
            _row("fp16 on cuda", "onnxruntime", 8, 2.0, 900.0, device="cuda")]
    advice = batch_advice(rows, "fp16 on cuda", None, memory_budget_mb=4000)
    assert advice is not None and advice["batch"] == 8 and advice["instances_fit"] == 4
    assert "4 instances at that batch fit in the 4000 MB device budget (900 MB each)" in advice["reason"]
    assert "--instances 4" in advice["reason"] and "loadtest --concurrency 1,8,32" in advice["reason"]
    assert batch_advice(rows, "fp16 on cuda", None)["instances_fit"] is None  # type: ignore[index]
