"""Which backend runs what: one line per backend folder, each folder's ``ENTRY`` (runtime/entry.py) naming its
class by an import string, so listing or choosing one never imports torch, onnxruntime or tensorrt; a backend's
module is imported only when it is opened.

**How to add a backend**: its folder ``runtime/<engine>/`` (backend, settings type, ``ENTRY``) and one line in
``BACKENDS`` (plus its ``BackendKind``, and an ``ArtifactKind`` if it brings a file kind); nothing outside the folder
names its modules or branches on its kind (``tests/runtime/test_backend_folders.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trtpipe.errors import BadInput
from trtpipe.runtime import aoti, onnxruntime, openvino, tensorrt, torch
from trtpipe.runtime.base import Backend
from trtpipe.runtime.entry import BackendEntry, TritonFacts
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import BackendKind

if TYPE_CHECKING:

    from trtpipe.artifact.artifact import Artifact
    from trtpipe.artifact.description import ArtifactDescription

# The backends, one line each: what each folder's ENTRY declares.
BACKENDS: dict[BackendKind, BackendEntry] = {
    BackendKind.TORCH: torch.ENTRY,
    BackendKind.ONNXRUNTIME: onnxruntime.ENTRY,
    BackendKind.OPENVINO: openvino.ENTRY,
    BackendKind.TENSORRT: tensorrt.ENTRY,
    BackendKind.AOTI: aoti.ENTRY,
}


class ArtifactBackend(Protocol):
    """What every artifact backend's class is: called with the artifact (a path or its description) and the run
    settings, it opens the artifact. (TorchBackend, which wraps a live module, is not one.)"""

    def __call__(self, artifact: Path | ArtifactDescription, options: RunOptions | None = None, /) -> Backend: ...


def entry(kind: BackendKind) -> BackendEntry:
    """What ``kind``'s folder declares about it."""
    return BACKENDS[kind]


def backend_class(kind: BackendKind) -> ArtifactBackend:
    opener: ArtifactBackend = BACKENDS[kind].opener()
    return opener


def triton_facts(kind: BackendKind) -> TritonFacts:
    """How Triton runs what ``kind`` runs (a backend without Triton facts: Triton's Python backend runs it)."""
    return BACKENDS[kind].triton or TritonFacts()


def open_artifact(artifact: Path | ArtifactDescription | Artifact, options: RunOptions | None = None, *,
                  runtime: BackendKind | None = None) -> Backend:
    """Open an artifact with the backend its description calls for, or with ``runtime`` where that can run it (an
    ONNX file on OpenVINO), with the caller's settings over the ones the artifact needs to run faithfully."""
    from trtpipe.artifact.artifact import Artifact
    from trtpipe.artifact.description import ArtifactDescription, describe_artifact

    if isinstance(artifact, Artifact):
        artifact = artifact.describe()
    description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(Path(artifact))
    backend = runtime or description.backend
    if backend not in description.kind.runtimes:
        raise BadInput(f"{description.path} cannot run on {backend}: a {description.kind} artifact runs on "
                       f"{', '.join(map(str, description.kind.runtimes))}.")
    settings = settings_for(description, backend, options or RunOptions())
    return backend_class(backend)(description, settings.only(BACKENDS[backend].settings, backend))


def settings_for(description: ArtifactDescription, backend: BackendKind, asked: RunOptions) -> RunOptions:
    """What ``backend`` is opened with: the caller's settings over the ones the artifact needs, where it runs on
    its own runtime on the CPU (a GPU provider runs Q/DQ itself; another runtime has other settings), and over the
    settings its probe chose for that way of running it (model.tuned.json), where that way is this backend's."""
    if backend is not description.backend:
        return asked
    execution = asked.execution
    tuned = description.tuned.get(execution) if execution.backend is backend else None
    required = RunOptions() if asked.on_gpu else RunOptions.from_keywords(description.run)
    return asked.over(RunOptions.from_keywords(tuned).over(required) if tuned is not None else required)
