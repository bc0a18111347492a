"""How a server opens an artifact, whether trtpipe serve or Triton's Python backend runs it: the runtime it
runs on and the settings it asks of that runtime."""

from __future__ import annotations

from typing import Any

from trtpipe.runtime import ArtifactDescription, RunOptions
from trtpipe.runtime.entry import settings_names
from trtpipe.runtime.registry import entry, execution_settings, executions_of, on_gpu
from trtpipe.vocab import BackendKind, Device


def serving_runtime(description: ArtifactDescription, runtime: BackendKind | None) -> BackendKind:
    """The runtime a server runs an artifact on: the one asked for where an ONNX file may run on it (a file pinned
    to one runtime, a BF16 file, keeps it), else the artifact's own."""
    if runtime is None or description.pinned_runtime or runtime not in description.kind.runtimes:
        return description.backend
    return runtime


def serving_options(backend: BackendKind, threads: int | None, device: Device = Device.CPU) -> RunOptions:
    """What a server asks of a backend: its threads, and, of a backend that has them (ONNX Runtime), idle pool threads
    that sleep rather than spin and the memory pool handed back after each run, leaving the CPU to the server's own
    threads between requests (the other runtimes have no spinning pool to turn off). On ``cuda``, a backend with a GPU
    way of running ONNX files (ONNX Runtime's CUDA provider) runs that way, with its memory arena kept (a captured CUDA
    graph replays into the buffers it was captured with)."""
    own = entry(backend)
    gpu = next((e for e in executions_of(backend) if on_gpu(e)), None) if device is Device.CUDA else None
    wanted: dict[str, Any] = {"spinning": False, "release_memory": gpu is None}
    has = settings_names(own.settings)
    options = RunOptions(threads=threads, **{name: value for name, value in wanted.items() if name in has})
    return execution_settings(gpu, options) if gpu is not None else options
