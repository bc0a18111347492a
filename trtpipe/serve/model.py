"""The embedding API: ``trtpipe.load(PATH)`` returns a model any service can call.

The backend follows from the artifact: ``.onnx`` runs on ONNX Runtime, ``.plan``/``.engine`` on TensorRT, and
a registry name or checkpoint on PyTorch. ``predict`` is safe to call from many threads: ONNX Runtime sessions
are thread-safe; PyTorch modules and TensorRT execution contexts are not, so calls to those are serialised.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.runtime import Backend, TensorInfo, open_artifact
from trtpipe.vocab import ArtifactKind, BackendKind, Precision


class Model:
    """A loaded artifact: ``predict(array) -> array`` plus its tensors' metadata."""

    def __init__(self, backend: Backend, name: str, source: str) -> None:
        self.backend = backend
        self.name = name
        self.source = source
        self._lock = None if BackendKind(backend.kind).thread_safe else threading.Lock()

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
        feeds = self.backend.feeds(inputs)
        if self._lock is None:
            return self.backend._run(feeds)
        with self._lock:
            return self.backend._run(feeds)

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


def load(source: str | Path, **options: Any) -> Model:
    """Load an artifact (.onnx, .plan/.engine) or a PyTorch model (registry name, checkpoint, module:factory).

    ``options`` go to the backend: ``threads`` and ``providers`` for ONNX Runtime, ``cuda_graph`` for TensorRT,
    ``device``, ``arch``, ``input_shape`` and ``trust_checkpoint`` for PyTorch.
    """
    path = Path(source)
    if ArtifactKind.for_path(path.name) is not None:
        from trtpipe.runtime.artifacts import artifact_name, artifact_profile

        if not path.is_file():
            from trtpipe.errors import BadInput

            raise BadInput(f"Artifact {path} does not exist.")
        name = artifact_name(path)
        # Run it as it must run to be faithful (a TensorRT-target INT8 file: Q/DQ as float ops); the caller's
        # options win.
        options = {**artifact_profile(path).options, **options}
        return Model(open_artifact(path, **options), name, str(path))
    from trtpipe.models.loader import load_model
    from trtpipe.runtime.torch.backend import TorchBackend

    loader_options = {k: options.pop(k) for k in ("arch", "input_shape", "trust_checkpoint") if k in options}
    loaded = load_model(str(source), **loader_options)
    return Model(TorchBackend(loaded.module, loaded.sample_shape, **options), loaded.name, str(source))
