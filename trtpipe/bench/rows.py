"""One bench result row: every fact a report, the selection or a person needs, as an explicit field.

Nothing downstream parses a label or re-reads an artifact: whether a row is a simulation, where it ran, whether
its latency includes host-device copies, the model's size and how long it took to build are all here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trtpipe.vocab import BackendKind, Baseline, Device, Precision, Target, Task

BENCH_SCHEMA = "trtpipe.bench/3"  # 3: every output compared, the task's agreement


@dataclass
class BenchRow:
    variant: str
    backend: BackendKind
    precision: Precision
    device: Device
    batch: int
    iters: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    throughput: float  # items per second at the median latency
    artifact: str | None = None
    target: Target | None = None  # INT8 target
    simulated: bool = False  # runs here only to measure another runtime's arithmetic: its latency means nothing
    includes_transfers: bool = True  # latency includes host-device copies (always true on the CPU)
    note: str | None = None
    speedup_vs_torch_fp32: float | None = None  # ratio of p50s at the same batch, same run
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
    agreement_samples: int = 0
    model_size_mb: float | None = None
    build_seconds: float | None = None
    baseline: Baseline | None = None  # a PyTorch row beside the reference (torch.compile, autocast)
    peer: str | None = None  # the quantizer users would pick instead that made this row (bench --peers)
    host_memory_mb: float | None = None  # peak resident memory the variant added while loading and running
    device_memory_mb: float | None = None  # GPU memory it held (engine, weights, activations, workspace)
    round_p50_ms: list[float] | None = None  # the p50 of each timed round (bench --rounds), in the order run
    cuda_graph: bool | None = None  # a TensorRT row: its timed calls replayed a captured CUDA graph (None: not one)
    reference: bool = False  # the row every speedup and agreement is measured against

    @property
    def is_reference(self) -> bool:
        """The row every speedup and accuracy drop is measured against: PyTorch FP32 eager, or the FP32 ONNX on
        ONNX Runtime when bench was given an ONNX file as its model."""
        return self.reference

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchRow:
        """A row read back from a results JSON: its choices become the vocabulary's enums here, once."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        for key, enum in _ENUMS.items():
            if values.get(key) is not None:
                values[key] = enum(values[key])
        return cls(**values)


_ENUMS = {"backend": BackendKind, "precision": Precision, "device": Device, "target": Target, "baseline": Baseline,
          "task": Task}
