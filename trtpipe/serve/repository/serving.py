"""How a server opens an artifact, whether trtpipe serve or Triton's Python backend runs it: the runtime it
runs on and the settings it asks of that runtime."""

from __future__ import annotations

from trtpipe.runtime import ArtifactDescription, RunOptions
from trtpipe.vocab import BackendKind, Device


def serving_runtime(description: ArtifactDescription, runtime: BackendKind | None) -> BackendKind:
    """The runtime a server runs an artifact on: the one asked for where an ONNX file may run on it (a file pinned
    to one runtime, a BF16 file, keeps it), else the artifact's own."""
    if runtime is None or description.pinned_runtime or runtime not in description.kind.runtimes:
        return description.backend
    return runtime


def serving_options(backend: BackendKind, threads: int | None, device: Device = Device.CPU) -> RunOptions:
    """What a server asks of a backend: its threads, and, from ONNX Runtime, idle pool threads that sleep rather
    than spin, leaving the CPU to the server's own threads between requests (the other runtimes have no spinning
    pool to turn off). On ``cuda``, ONNX Runtime runs on its CUDA provider, whose memory arena is kept (a captured
    CUDA graph replays into the buffers it was captured with)."""
    onnxruntime = backend is BackendKind.ONNXRUNTIME
    if onnxruntime and device is Device.CUDA:
        from trtpipe.runtime.onnxruntime.providers import provider_list
        from trtpipe.vocab import OnnxExecution

        return RunOptions(threads=threads, spinning=False,
                          providers=tuple(provider_list(OnnxExecution.CUDA)))
    return RunOptions(threads=threads, spinning=not onnxruntime, release_memory=onnxruntime)
