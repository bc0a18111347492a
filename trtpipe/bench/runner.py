"""Measure PyTorch FP32 eager and every artifact, in one process, on the same inputs.

PyTorch FP32 eager is measured first and is itself a result row; each artifact's speedup is the ratio of
p50 latencies at the same batch size. Agreement with PyTorch is measured on one fixed set of samples per
model (the held-out split for a model with a bundled data set, else seeded random inputs), and accuracy is
reported wherever labels exist.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe import __version__, console
from trtpipe.bench import environment
from trtpipe.bench.timing import LatencyStats, measure
from trtpipe.errors import BadInput
from trtpipe.hardware import usable_cores
from trtpipe.metrics import compare, top1_accuracy
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime import Backend, backend_kind_for, open_artifact
from trtpipe.runtime.torch_backend import TorchBackend

SCHEMA = "trtpipe.bench/1"
RANDOM_AGREEMENT_SAMPLES = 32
AGREEMENT_CHUNK = 64


@dataclass
class BenchSettings:
    batches: tuple[int, ...] = (1, 8, 32)
    threads: int = field(default_factory=usable_cores)
    warmup: int = 5
    iters: int | None = None
    duration_s: float | None = 5.0
    min_iters: int = 5
    device: str = "cpu"  # where the PyTorch baseline runs: cpu, or cuda (FP32 with TF32 off, plus a TF32 row)
    onnx_backend: str = "onnxruntime"  # how ONNX artifacts run: onnxruntime, onnxruntime-cuda, -tensorrt

    def to_dict(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "threads": self.threads, "warmup": self.warmup,
                "iters": self.iters, "duration_s": self.duration_s if self.iters is None else None,
                "min_iters": self.min_iters, "device": self.device, "onnx_backend": self.onnx_backend}


@dataclass
class _Samples:
    """Inputs shared by every variant: one timing batch per size, one agreement set."""

    timing: dict[int, np.ndarray]
    agreement: np.ndarray
    labels: np.ndarray | None
    description: str


def run_benchmark(loaded: LoadedModel, artifacts: list[Path], settings: BenchSettings) -> dict[str, Any]:
    """Benchmark ``loaded`` in PyTorch FP32 eager and each artifact; returns the JSON-ready report."""
    artifacts = [Path(a) for a in artifacts]
    for path in artifacts:
        if not path.is_file():
            raise BadInput(f"Artifact {path} does not exist.")
    samples = _samples(loaded, settings.batches)
    rows: list[dict[str, Any]] = []
    reference = TorchBackend(loaded.module, loaded.sample_shape, device=settings.device, threads=settings.threads)
    _set_tf32(settings.device, enabled=False)  # the baseline is true FP32
    reference_outputs = _chunked_run(reference, samples.agreement, AGREEMENT_CHUNK)
    plans = [_plan(p) for p in artifacts]
    if settings.onnx_backend != "onnxruntime" and any(p.suffix.lower() == ".onnx" for p in artifacts):
        from trtpipe.runtime.onnxruntime_backend import check_providers, provider_list

        check_providers(provider_list(settings.onnx_backend))
    labels = _dedupe([plan.label for plan in plans])
    with console.progress() as bar:
        rows += _bench_variant(reference, "pytorch-fp32", None, samples, reference_outputs, settings, bar)
        if settings.device.startswith("cuda"):
            _set_tf32(settings.device, enabled=True)
            tf32_rows = _bench_variant(reference, "pytorch-tf32", None, samples, reference_outputs, settings, bar)
            _set_tf32(settings.device, enabled=False)
            for row in tf32_rows:
                row.update(precision="tf32", note="PyTorch eager with TF32 matmuls and convolutions")
            rows += tf32_rows
        for path, plan, label in zip(artifacts, plans, labels, strict=True):
            if plan.note:
                console.note(f"{label}: {plan.note}")
            options = dict(plan.options)
            if path.suffix.lower() == ".onnx" and settings.onnx_backend != "onnxruntime":
                from trtpipe.runtime.onnxruntime_backend import provider_list

                options["providers"] = provider_list(settings.onnx_backend)
                label = label.replace("onnxruntime-", f"{settings.onnx_backend}-", 1)
            with open_artifact(path, threads=settings.threads, **options) as backend:
                variant_rows = _bench_variant(backend, label, path, samples, reference_outputs, settings, bar)
            for row in variant_rows:
                row.update(target=plan.target, note=plan.note)
            rows += variant_rows
    baseline = {r["batch"]: r["p50_ms"] for r in rows if r["backend"] == "torch" and r["precision"] == "fp32"}
    for row in rows:
        base = baseline.get(row["batch"])
        row["speedup_vs_torch_fp32"] = base / row["p50_ms"] if base and row["p50_ms"] > 0 else None
    return {
        "schema": SCHEMA,
        "trtpipe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": environment.collect(settings.threads),
        "model": loaded.describe(),
        "settings": settings.to_dict(),
        "agreement_inputs": samples.description,
        "results": rows,
    }


def _samples(loaded: LoadedModel, batches: tuple[int, ...]) -> _Samples:
    if loaded.dataset:
        from trtpipe.models.data import load_split

        split = load_split(loaded.dataset, "eval")
        timing = {b: np.resize(split.images, (b, *split.images.shape[1:])) for b in batches}
        return _Samples(timing, split.images, split.labels,
                        f"{len(split)} held-out images of the '{loaded.dataset}' data set")
    rng = np.random.default_rng(0)
    timing = {b: rng.standard_normal((b, *loaded.sample_shape), dtype=np.float32) for b in batches}
    agreement = rng.standard_normal((RANDOM_AGREEMENT_SAMPLES, *loaded.sample_shape), dtype=np.float32)
    return _Samples(timing, agreement, None, f"{RANDOM_AGREEMENT_SAMPLES} seeded random inputs (no labels)")


def _bench_variant(
    backend: Backend, label: str, artifact: Path | None, samples: _Samples, reference_outputs: np.ndarray,
    settings: BenchSettings, bar: Any,
) -> list[dict[str, Any]]:
    fixed_batch = backend.inputs[0].shape[0] if isinstance(backend.inputs[0].shape[0], int) else None
    batches = [b for b in settings.batches if fixed_batch is None or b == fixed_batch]
    if not batches:
        console.warn(f"{label} has a static batch of {fixed_batch}, which is not among the batch sizes asked "
                     f"for ({', '.join(map(str, settings.batches))}); it is skipped.")
        return []
    if fixed_batch is not None and len(settings.batches) > 1:
        console.note(f"{label} has a static batch of {fixed_batch}: it is measured at that size only.")

    usable = len(samples.agreement) - len(samples.agreement) % (fixed_batch or 1)
    outputs = _chunked_run(backend, samples.agreement[:usable], fixed_batch or AGREEMENT_CHUNK)
    agreement = compare(reference_outputs[:usable], outputs)
    accuracy = None
    if samples.labels is not None and outputs.ndim == 2:
        accuracy = top1_accuracy(outputs, samples.labels[:usable])

    rows = []
    for batch in batches:
        feeds = backend.feeds(samples.timing[batch])
        total = settings.iters
        task = bar.add_task(f"{label} batch {batch}", total=total)
        timings = measure(
            lambda feeds=feeds: backend._run(feeds), warmup=settings.warmup, iters=settings.iters,
            duration_s=settings.duration_s, min_iters=settings.min_iters,
            on_iteration=lambda task=task: bar.advance(task),
        )
        bar.remove_task(task)
        measured = [(label, LatencyStats.from_samples(timings, batch), True)]
        resident = getattr(backend, "device_resident_call", None)
        if resident is not None:  # GPU engines: also the latency without host-device copies
            call = resident(feeds)
            task = bar.add_task(f"{label} batch {batch} (no transfers)", total=total)
            timings = measure(call, warmup=settings.warmup, iters=settings.iters, duration_s=settings.duration_s,
                              min_iters=settings.min_iters, on_iteration=lambda task=task: bar.advance(task))
            bar.remove_task(task)
            measured.append((f"{label} [no transfers]", LatencyStats.from_samples(timings, batch), False))
        for variant, stats, transfers in measured:
            rows.append(_row(variant, backend, artifact, batch, stats, agreement, accuracy, usable, transfers))
    return rows


def _row(label: str, backend: Backend, artifact: Path | None, batch: int, stats: LatencyStats, agreement: Any,
         accuracy: float | None, usable: int, transfers: bool) -> dict[str, Any]:
    console.note(f"{label} batch {batch:>3}: p50 {stats.p50_ms:8.2f} ms  p99 {stats.p99_ms:8.2f} ms  "
                 f"{stats.throughput:9.1f} items/s  ({stats.iters} runs)")
    return {
        "variant": label,
        "backend": backend.kind,
        "precision": backend.precision,
        "device": backend.device,
        "artifact": str(artifact) if artifact else None,
        "target": None,
        "note": None,
        "batch": batch,
        **stats.to_dict(),
        "speedup_vs_torch_fp32": None,
        "max_abs_err": agreement.max_abs_err,
        "max_rel_err": agreement.max_rel_err,
        "cosine": agreement.cosine,
        "top1_agreement": agreement.top1_agreement,
        "top1_accuracy": accuracy,
        "agreement_samples": usable,
        "includes_transfers": transfers,
    }


def _set_tf32(device: str, *, enabled: bool) -> None:
    if device.startswith("cuda"):
        import torch

        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def _chunked_run(backend: Backend, data: np.ndarray, chunk: int) -> np.ndarray:
    return np.concatenate([backend.run(data[i : i + chunk])[0] for i in range(0, len(data), chunk)])


@dataclass(frozen=True)
class _ArtifactPlan:
    label: str
    options: dict[str, Any]
    target: str | None
    note: str | None


def _plan(path: Path) -> _ArtifactPlan:
    """How to run and name an artifact (see trtpipe.runtime.artifacts); engines are checked against their
    sidecar here, before minutes of baseline timing."""
    from trtpipe.runtime.artifacts import artifact_name, artifact_profile

    stem = artifact_name(path)
    if backend_kind_for(path) == "tensorrt":
        from trtpipe.build.sidecar import check_engine_file, read_sidecar

        check_engine_file(path, read_sidecar(path))
    profile = artifact_profile(path)
    if backend_kind_for(path) == "tensorrt":
        return _ArtifactPlan(f"tensorrt-{profile.precision} ({stem})", {}, None, None)
    if profile.note:
        return _ArtifactPlan(f"onnxruntime-int8-trtsim ({stem})", profile.options, profile.target, profile.note)
    suffix = f"-{profile.target}" if profile.target and profile.precision == "int8" else ""
    return _ArtifactPlan(f"onnxruntime-{profile.precision}{suffix} ({stem})", profile.options, profile.target, None)


def _dedupe(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out
