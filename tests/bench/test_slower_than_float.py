"""An INT8 (or FP16) file that runs slower than the FP32 file of its own runtime is no speed win: bench says so on
its row and select never chooses it (issue: a cpu INT8 detector ran at 0.8x its FP32 file with a check mark)."""

from __future__ import annotations

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.runner import _slower_than_float
from trtpipe.bench.timing import LatencyStats
from trtpipe.pipeline.select import choose
from trtpipe.vocab import BackendKind, Device, Precision


def _row(variant: str, precision: Precision, rounds: list[float], *, backend: BackendKind = BackendKind.ONNXRUNTIME,
         reference: bool = False) -> BenchRow:
    p50 = sorted(rounds)[len(rounds) // 2]
    latency = LatencyStats(iters=10 * len(rounds), p50_ms=p50, p90_ms=p50, p99_ms=p50 * 1.2, mean_ms=p50,
                           std_ms=0.0, min_ms=p50, max_ms=p50, throughput=1000 / p50)
    return BenchRow(variant=variant, backend=backend, precision=precision, device=Device.CPU, batch=1,
                    latency=latency, artifact=None if reference else f"{variant}.onnx", round_p50_ms=rounds,
                    top1_agreement=1.0, reference=reference)


def _rows(int8_rounds: list[float]) -> list[BenchRow]:
    return [_row("pytorch-fp32", Precision.FP32, [9.0] * 12, backend=BackendKind.TORCH, reference=True),
            _row("onnxruntime-fp32", Precision.FP32, [2.0, 2.1, 1.9, 2.0, 2.2, 2.0, 1.95, 2.05, 2.0, 2.1, 2.0, 1.9]),
            _row("onnxruntime-int8-cpu", Precision.INT8, int8_rounds)]


def test_an_int8_row_slower_than_its_runtimes_fp32_row_is_marked_and_never_chosen() -> None:
    rows = _rows([2.5, 2.4, 2.6, 2.5, 2.45, 2.55, 2.5, 2.6, 2.4, 2.5, 2.5, 2.45])  # about 0.8x the FP32 file
    _slower_than_float(rows)
    int8 = rows[2]
    assert int8.slower_than == "onnxruntime-fp32"
    assert int8.note is not None and "slower than onnxruntime-fp32 on the same runtime (0.80x its speed, 95 %" \
        in int8.note and "no speed win" in int8.note
    assert rows[1].slower_than is None
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "onnxruntime-fp32"


def test_a_faster_int8_row_or_one_within_the_noise_is_not_marked() -> None:
    faster = _rows([1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0, 1.1, 0.9, 1.0, 1.0])
    _slower_than_float(faster)
    assert faster[2].slower_than is None and faster[2].note is None
    level = _rows([2.1, 1.9, 2.0, 2.2, 1.9, 2.0, 2.05, 1.95, 2.0, 2.1, 1.9, 2.0])  # the same speed: not proven slower
    _slower_than_float(level)
    assert level[2].slower_than is None
    choice = choose(faster, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "onnxruntime-int8-cpu"
