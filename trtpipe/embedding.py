"""The embedding API: ``trtpipe.load(PATH)`` returns a model any service can call.

The backend follows from the artifact: ``.onnx`` runs on ONNX Runtime, ``.plan``/``.engine`` on TensorRT, and
a registry name or checkpoint on PyTorch. ``predict`` is safe to call from many threads: ONNX Runtime sessions
are thread-safe; PyTorch modules and TensorRT execution contexts are not, so calls to those are serialised.
It sits on the artifact's side, below the stages: ``trtpipe serve``, ``export-triton``'s Python-backend model and
any service open an artifact through it, and embedding one needs no server code.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.artifact.description import artifact_name, check_cpu
from trtpipe.errors import BadInput
from trtpipe.runtime import ArtifactDescription, Backend, RunOptions, TensorInfo, describe_artifact, open_artifact
from trtpipe.runtime.registry import entry, execution_settings, gpu_execution, open_module, runs_on_gpu
from trtpipe.vocab import ArtifactKind, BackendKind, Device, Precision


class Model:
    """A loaded artifact: ``predict(array) -> array`` plus its tensors' metadata."""

    def __init__(self, backend: Backend, name: str, source: str) -> None:
        self.backend = backend
        self.name = name
        self.source = source
        self._lock = None if backend.thread_safe else threading.Lock()

    @property
    def inputs(self) -> list[TensorInfo]:
        return self.backend.inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return self.backend.outputs

    @property
    def kind(self) -> BackendKind:
        return self.backend.kind

    @property
    def precision(self) -> Precision:
        return self.backend.precision

    @property
    def dynamic_batch(self) -> bool:
        return self.backend.static_batch is None

    def predict_all(self, inputs: Any) -> list[np.ndarray]:
        """Every output, in ``outputs`` order; ``inputs`` is an array, a list, or a {name: array} dict."""
        call = self.backend.bind(inputs)
        if self._lock is None:
            return call()
        with self._lock:
            return call()

    def predict(self, inputs: Any) -> np.ndarray:
        """The first output: the logits of a classifier."""
        return self.predict_all(inputs)[0]

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shapes = ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in self.inputs)
        return f"<trtpipe.Model {self.name} on {self.kind} ({self.precision}): {shapes}>"


def load(source: str | Path, *, runtime: str | None = None, allow_cpu_mismatch: bool = False,
         **settings: Any) -> Model:
    """Load an artifact (.onnx, .plan/.engine) or a PyTorch model (registry name, checkpoint, module:factory).

    ``runtime`` runs an ONNX file on onnxruntime or openvino. ``settings`` are run settings (RunOptions:
    ``threads``, ``providers``, ``optimization``, ``spinning`` for ONNX Runtime, ``hint`` for OpenVINO,
    ``cuda_graph`` for TensorRT); a setting the artifact's backend does not have is refused. ``device="cuda"``
    runs an ONNX file on ONNX Runtime's CUDA provider (with the settings its probe recorded, if any) where no
    ``providers`` are given; an engine or a package runs where it was built for, and a ``device`` it cannot run on
    is refused. A PyTorch model
    takes ``device``, ``threads``, ``arch``, ``input_shape``, ``input_dtype``, ``input_range`` (each a value for
    the only input or {input name: value}, as :func:`trtpipe.models.loader.load_model` reads them) and
    ``trust_checkpoint``.

    A cpu/openvino INT8 artifact is checked against this CPU's class (:func:`trtpipe.artifact.description.check_cpu`):
    one that is unsafe here (8-bit weights on a CPU without VNNI) is refused unless ``allow_cpu_mismatch``; one
    measured only on a stronger class loads with a warning.
    """
    path = Path(source)
    if ArtifactKind.for_path(path.name) is not None:
        chosen = None
        if runtime is not None:
            if runtime not in tuple(BackendKind):
                raise BadInput(f"Unknown runtime '{runtime}': choose from {', '.join(BackendKind)}.")
            chosen = BackendKind(runtime)
        device = settings.pop("device", None)
        description, options = describe_artifact(path), RunOptions.from_keywords(settings)
        if device is not None:
            options = _on_device(description, options, _device(device), chosen or description.backend)
        if not runs_on_gpu(options):
            from trtpipe.hardware import cpu_class

            check_cpu(description, cpu_class(), allow=allow_cpu_mismatch)
        return open_model(description, options, runtime=chosen)
    from trtpipe.models.loader import load_model

    loader_options = {k: settings.pop(k) for k in ("arch", "input_shape", "input_dtype", "input_range",
                                                   "trust_checkpoint") if k in settings}
    device = _device(settings.pop("device", Device.CPU))
    loaded = load_model(str(source), **loader_options)
    backend = open_module(loaded.module, loaded.inputs, device=device, **settings)
    return Model(backend, loaded.name, str(source))


def _device(value: object) -> Device:
    if value not in tuple(Device):
        raise BadInput(f"Unknown device '{value}': choose from {', '.join(Device)}.")
    return Device(str(value))


def _on_device(description: ArtifactDescription, options: RunOptions, device: Device,
               runtime: BackendKind) -> RunOptions:
    """``options`` for running ``description`` on ``device``: where the backend's settings choose the device (ONNX
    Runtime's providers), its GPU execution for an ONNX file asked onto the GPU without providers of its own;
    BadInput where the artifact or the settings run elsewhere (the device its package or its backend's entry
    names)."""
    runs_on = entry(runtime).runs_on
    if runs_on is None:
        if device is Device.CUDA and not options.providers:
            return execution_settings(gpu_execution(runtime), options)
        if runs_on_gpu(options) is not (device is Device.CUDA):
            raise BadInput(f"device={device} and providers {', '.join(options.provider_names)} disagree: give one "
                           "of them.")
        return options
    if description.package is not None:
        runs_on = description.package.device
    if device is not runs_on:
        raise BadInput(f"{description.path} runs on {runs_on} ({runtime}), not {device}: load it without device, or "
                       "make an artifact for that device.")
    return options


def open_model(description: ArtifactDescription, options: RunOptions | None = None, *,
               runtime: BackendKind | None = None) -> Model:
    """A Model of a described artifact, run as it must be to be faithful (a TensorRT-target INT8 file: Q/DQ as
    float ops); the caller's settings win."""
    path = Path(str(description.path))
    return Model(open_artifact(description, options, runtime=runtime), artifact_name(path), str(path))
