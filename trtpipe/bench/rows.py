"""One bench result row: every fact a report, the selection or a person needs, as an explicit field.

Nothing downstream parses a label or re-reads an artifact: whether a row is a simulation, where it ran, whether
its latency includes host-device copies, the model's size and how long it took to build are all here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from trtpipe.bench.timing import LatencyStats
from trtpipe.intervals import Interval
from trtpipe.vocab import BackendKind, Baseline, Device, Precision, Target, Task

BENCH_SCHEMA = "trtpipe.bench/3"  # 3: every output compared, the task's agreement


@dataclass
class BenchRow:
    variant: str
    backend: BackendKind
    precision: Precision
    device: Device
    batch: int
    latency: LatencyStats  # its fields are the row's in JSON (``iters``, ``p50_ms``...) and read as row attributes
    artifact: str | None = None
    target: Target | None = None  # INT8 target
    simulated: bool = False  # runs here only to measure another runtime's arithmetic: its latency means nothing
    includes_transfers: bool = True  # latency includes host-device copies (always true on the CPU)
    note: str | None = None
    slower_than: str | None = None  # a reduced-precision row slower than this FP32 row of its runtime: no speed win
    # How many times faster than the reference at the same batch, same run: the median over rounds of the ratio of
    # the two rows' p50s paired round by round (with fewer rounds, the ratio of their p50s); its interval below.
    speedup_vs_torch_fp32: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    cosine: float | None = None  # the lowest over the outputs
    worst_output: str | None = None  # the output furthest from the reference's, where there are several
    task: Task | None = None  # what the outputs mean: which measure ``agreement`` is
    agreement: float | None = None  # the task's fidelity to the reference (trtpipe.tasks): top-1, pixel, mAP...
    agreement_name: str | None = None  # what ``agreement`` is ("top-1 agreement", "mAP@0.5 vs FP32"...)
    top1_agreement: float | None = None  # a classifier's (the same figure as ``agreement``)
    top1_accuracy: float | None = None  # the task's accuracy against labels (top-1, pixel accuracy, mAP@0.5)
    reference_accuracy: float | None = None  # PyTorch FP32's accuracy on the same samples
    agreement_interval: Interval | None = None  # ``agreement``'s 95 % interval over the agreement samples
    accuracy_interval: Interval | None = None  # ``top1_accuracy``'s 95 % interval, where labels exist
    agreement_samples: int = 0
    model_size_mb: float | None = None
    build_seconds: float | None = None
    baseline: Baseline | None = None  # a PyTorch row beside the reference (torch.compile, autocast)
    peer: str | None = None  # the quantizer users would pick instead that made this row (bench --peers)
    host_memory_mb: float | None = None  # peak resident memory the variant added while loading and running
    device_memory_mb: float | None = None  # GPU memory it held (engine, weights, activations, workspace)
    round_p50_ms: list[float] | None = None  # the p50 of each timed round (bench --rounds), in the order run
    round_p99_ms: list[float] | None = None  # the p99 of each timed round, in the same order
    # The statistics over rounds (trtpipe/bench/stability.py), None with fewer than stability.MIN_ROUNDS rounds:
    p50_interval: Interval | None = None  # 95 % bootstrap interval of the median of the rounds' p50s (= p50_ms)
    tail_ms: float | None = None  # the median of the rounds' p99s: a burst hitting a minority of rounds cannot move it
    tail_interval: Interval | None = None  # its 95 % bootstrap interval over the rounds
    speedup_interval: Interval | None = None  # 95 % interval of speedup_vs_torch_fp32, paired round by round
    unstable: str | None = None  # None when its rounds agree; else how they disagree and what to do, in one line
    cuda_graph: bool | None = None  # a TensorRT row: its timed calls replayed a captured CUDA graph (None: not one)
    reference: bool = False  # the row every speedup and agreement is measured against

    @property
    def is_reference(self) -> bool:
        """The row every speedup and accuracy drop is measured against: PyTorch FP32 eager, or the FP32 ONNX on
        ONNX Runtime when bench was given an ONNX file as its model."""
        return self.reference

    @property
    def iters(self) -> int:
        return self.latency.iters

    @property
    def p50_ms(self) -> float:
        return self.latency.p50_ms

    @property
    def p90_ms(self) -> float:
        return self.latency.p90_ms

    @property
    def p99_ms(self) -> float:
        return self.latency.p99_ms

    @property
    def mean_ms(self) -> float:
        return self.latency.mean_ms

    @property
    def std_ms(self) -> float:
        return self.latency.std_ms

    @property
    def min_ms(self) -> float:
        return self.latency.min_ms

    @property
    def max_ms(self) -> float:
        return self.latency.max_ms

    @property
    def throughput(self) -> float:
        """Items per second at the median latency."""
        return self.latency.throughput

    def to_dict(self) -> dict[str, Any]:
        """The row as the results JSON has it: the latency's fields in its place, flat among the row's."""
        flat: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if key == "latency":
                flat.update(value)
            elif key in _INTERVALS:
                interval = getattr(self, key)
                flat[key] = None if interval is None else interval.to_dict()
            else:
                flat[key] = value
        return flat

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchRow:
        """A row read back from a results JSON: its choices become the vocabulary's enums here, once."""
        known = set(cls.__dataclass_fields__) - {"latency"}
        values = {k: v for k, v in data.items() if k in known}
        for key, enum in _ENUMS.items():
            if values.get(key) is not None:
                values[key] = enum(values[key])
        for key in _INTERVALS:  # absent from results written before intervals
            if values.get(key) is not None:
                values[key] = Interval.from_dict(values[key])
        return cls(**values, latency=LatencyStats(**{k: data[k] for k in _LATENCY if k in data}))


_ENUMS = {"backend": BackendKind, "precision": Precision, "device": Device, "target": Target, "baseline": Baseline,
          "task": Task}
_LATENCY = tuple(f.name for f in fields(LatencyStats))
_INTERVALS = ("agreement_interval", "accuracy_interval", "p50_interval", "tail_interval", "speedup_interval")
