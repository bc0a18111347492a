"""A short probe per ONNX artifact that picks how ONNX Runtime runs it fastest, and records the choice beside it.

Each candidate (on the CUDA provider: CUDA graph on/off x ``prefer_nhwc`` on/off x cuDNN exhaustive/heuristic
search, all with IO binding; on the CPU provider: IO binding on/off) is opened, its outputs on the probe batch
are compared with the plain run's (a candidate that computes something else is rejected whatever its speed), and
it is timed in short rounds, device-resident on a GPU. The fastest accepted candidate is written to
``model.tuned.json`` (:mod:`trtpipe.artifact.records.tuned`), which ``trtpipe.load``, ``serve``, ``bench`` and
the Triton export then read, so the artifact runs the same way everywhere.

Candidates are opened one at a time and each is closed before the next opens: eight sessions with their arenas,
exhaustive-search workspaces and captured graphs do not fit on a GPU at once at a large batch. A candidate that
fails in any way (ONNX Runtime's own error types, a graph capture that fails on replay, an out-of-memory from the
cuDNN search) is rejected with the first line of its error, and the probe goes on with the next. Its rounds
therefore run back to back per candidate, not interleaved across candidates.

Bench asks for it through the registry (``tuner`` on ONNX Runtime's entry: ``runtime.registry.tune``), and hands
it bench's timing loop and device namer, so the probe times as bench does.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.artifact.description import ArtifactDescription, describe_artifact
from trtpipe.artifact.records.tuned import TUNABLE, TunedRun, tunable_settings, write_tuned
from trtpipe.errors import BadInput
from trtpipe.inputs import Batch
from trtpipe.runtime.onnxruntime.executions import gpu_executions
from trtpipe.runtime.onnxruntime.providers import GPU_PROVIDERS
from trtpipe.runtime.onnxruntime.settings import CudnnSearch
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import execution_settings, executions_of, open_artifact
from trtpipe.vocab import OnnxExecution, Precision

# bench's timing loop: (a call, *, warmup, iters, duration_s, min_iters) -> the samples in ms
Timer = Callable[..., np.ndarray]

PROBE_ROUNDS = 3
PROBE_SECONDS = 0.3  # per candidate and round
# Outputs of a candidate may differ from the plain run's by the order of float additions (another convolution
# algorithm, NHWC kernels), not more: a relative tolerance per precision, taken against each output's range.
_TOLERANCE = {Precision.FP32: 1e-3, Precision.TF32: 1e-2, Precision.BF16: 3e-2, Precision.FP16: 2e-2,
              Precision.INT8: 3e-2}
MIN_COSINE = 0.999


def candidates(execution: OnnxExecution) -> list[RunOptions]:
    """The settings a probe tries for ``execution``; empty where there is nothing to choose (TensorRT's provider
    tunes itself, OpenVINO is not ONNX Runtime)."""
    if execution is OnnxExecution.CUDA:
        return [RunOptions(io_binding=True, cuda_graph=graph, prefer_nhwc=nhwc, cudnn_search=search)
                for graph, nhwc, search in itertools.product((True, False), (True, False),
                                                             (CudnnSearch.EXHAUSTIVE, CudnnSearch.HEURISTIC))]
    if execution is OnnxExecution.CPU:
        return [RunOptions(io_binding=False), RunOptions(io_binding=True)]
    return []


@dataclass
class _Candidate:
    settings: RunOptions
    call: Callable[[], object] | None = None
    samples: list[float] = dataclasses.field(default_factory=list)
    rejected: str | None = None
    backend: Any = None

    def record(self) -> dict[str, Any]:
        p50 = float(np.median(self.samples)) if self.samples else None
        return {"settings": tunable_settings(self.settings),
                "p50_ms": None if p50 is None else round(p50, 4), "rejected": self.rejected}


def tune_artifact(artifact: Path | ArtifactDescription, execution: OnnxExecution, feeds: Batch,
                  *, base: RunOptions | None = None, rounds: int = PROBE_ROUNDS,
                  seconds: float = PROBE_SECONDS, timer: Timer, device: Callable[[bool], str]) -> TunedRun:
    """Probe ``execution``'s candidates on ``feeds`` (one batch), record the fastest accepted one beside the
    artifact and return it. ``base``: settings every candidate keeps (threads, providers with their options);
    ``timer`` times a call (bench's loop), ``device`` names the device a figure was measured on (GPU or not)."""
    description = _tunable_description(artifact)
    choices = candidates(execution)
    if not choices:
        raise BadInput(f"Nothing to tune on {execution}: the probe chooses settings for "
                       f"{OnnxExecution.CPU} and {OnnxExecution.CUDA}.")
    base = _base_settings(base, execution)
    untuned = dataclasses.replace(description, tuned={})
    if execution in gpu_executions:
        untuned = untuned.natively()  # a GPU provider runs Q/DQ itself
    plain_settings = dataclasses.replace(base, io_binding=False, cuda_graph=False)
    with open_artifact(untuned, plain_settings) as plain:
        checked = plain.feeds(feeds)
        expected = plain.run(checked)
    probe = [_Candidate(dataclasses.replace(base, **{n: getattr(c, n) for n in TUNABLE})) for c in choices]
    for candidate in probe:
        _probe_one(candidate, lambda settings: open_artifact(untuned, settings), checked, expected,
                   description.precision, rounds=rounds, seconds=seconds, timer=timer)
    live = [c for c in probe if c.rejected is None]
    if not live:
        raise BadInput(f"No {execution} setting ran {description.path} as its plain run does: "
                       + "; ".join(f"{c.rejected}" for c in probe))
    return _record_fastest(probe, live, description, execution, checked, device)


def _tunable_description(artifact: Path | ArtifactDescription) -> ArtifactDescription:
    """The artifact's description; refused unless it is a file (the choice is recorded beside it) that runs on a
    backend with settings to choose between for some way of running it (ONNX Runtime's)."""
    description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(Path(artifact))
    if description.path is None:
        raise BadInput("Only an artifact file can be tuned (its settings are recorded beside it).")
    if description.pinned_runtime or not any(candidates(e) for e in executions_of(description.backend)):
        raise BadInput(f"{description.path} does not run on ONNX Runtime: there is nothing to tune.")
    return description


def _base_settings(base: RunOptions | None, execution: OnnxExecution) -> RunOptions:
    """The settings every candidate keeps: the caller's, with ``execution``'s providers where the caller named no
    GPU provider for a GPU execution."""
    base = base or RunOptions()
    if execution in gpu_executions and not set(base.provider_names) & GPU_PROVIDERS:
        base = execution_settings(execution, base)
    return base


def _probe_one(candidate: _Candidate, opener: Callable[[RunOptions], Any], feeds: dict[str, np.ndarray],
               expected: list[np.ndarray], precision: Precision, *, rounds: int, seconds: float,
               timer: Timer) -> None:
    """Open one candidate with ``opener``, check it against the plain run's outputs, time it in ``rounds`` short
    rounds, and close it, whatever happened: its samples are filled, or ``rejected`` says why in one line."""
    try:
        _open(candidate, opener, feeds, expected, precision)
        for round_index in range(rounds if candidate.rejected is None else 0):
            assert candidate.call is not None
            candidate.samples += list(timer(candidate.call, warmup=2 if round_index == 0 else 1, iters=None,
                                              duration_s=seconds, min_iters=3))
    except Exception as error:  # ONNX Runtime's own types, a failed capture, CUDA out of memory: this one only
        candidate.rejected = error.message if isinstance(error, BadInput) else _first_line(error)
        candidate.samples = []
    finally:
        candidate.call = None  # the timed call holds the session's buffers
        if candidate.backend is not None:
            candidate.backend.close()
            candidate.backend = None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _record_fastest(probe: list[_Candidate], live: list[_Candidate], description: ArtifactDescription,
                    execution: OnnxExecution, checked: dict[str, np.ndarray],
                    device: Callable[[bool], str]) -> TunedRun:
    """The fastest accepted candidate (by median) as a TunedRun with every candidate's record, written beside the
    artifact and announced in one line."""
    best = min(live, key=lambda c: float(np.median(c.samples)))
    import onnxruntime

    run = TunedRun(execution, tunable_settings(best.settings),
                   device(execution in gpu_executions), onnxruntime.__version__, _batch(checked),
                   tuple(c.record() for c in probe))
    written = write_tuned(Path(str(description.path)), run)
    chosen = ", ".join(f"{name}={value}" for name, value in run.settings.items()
                       if value is not None)
    console.note(f"{Path(str(description.path)).name} on {execution}: {chosen} was the fastest of {len(live)} "
                 f"settings that matched the plain run ({float(np.median(best.samples)):.3f} ms at batch "
                 f"{run.batch}); recorded in {written.name}.")
    return run


def _open(candidate: _Candidate, opener: Callable[[RunOptions], Any], feeds: dict[str, np.ndarray],
          expected: list[np.ndarray], precision: Precision) -> None:
    """Open one candidate, check its outputs against the plain run's, and make its timed call (device-resident on
    a GPU); a candidate that computes otherwise is rejected with the reason, one that fails raises."""
    with console.recording_warnings() as warned:
        candidate.backend = opener(candidate.settings)
    if warned and candidate.settings.cuda_graph:
        raise BadInput(warned[0])  # the graph fell back: that candidate is the one without a graph
    got = candidate.backend.run(feeds)
    problem = _differs(expected, got, precision)
    if problem:
        candidate.rejected = problem
        return
    candidate.call = candidate.backend.device_resident_call(feeds) or candidate.backend.bind(feeds)


def _differs(expected: list[np.ndarray], got: list[np.ndarray], precision: Precision) -> str | None:
    """Why ``got`` is not the plain run's outputs, or None."""
    tolerance = _TOLERANCE.get(precision, 1e-3)
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        want64, have64 = np.asarray(want, np.float64).ravel(), np.asarray(have, np.float64).ravel()
        if want64.shape != have64.shape:
            return f"output {index} has {have64.size} values, the plain run {want64.size}"
        scale = float(np.max(np.abs(want64))) or 1.0
        error = float(np.max(np.abs(want64 - have64))) / scale if want64.size else 0.0
        norms = float(np.linalg.norm(want64) * np.linalg.norm(have64))
        cosine = float(want64 @ have64 / norms) if norms > 0 else 1.0
        if error > tolerance or cosine < MIN_COSINE:
            return f"output {index} differs from the plain run (error {error:.2e} of its range, cosine {cosine:.6f})"
    return None


def _batch(feeds: dict[str, np.ndarray]) -> int:
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if first.ndim else 1
