"""AOTInductor execution of a ``.pt2`` package: the model compiled ahead of time, run without its Python code.

The package is loaded only after its manifest vouches for it (package.py). Its inputs and outputs are the model's,
in FP32 whatever it computes in (casts and the channels_last conversion are compiled into it), so it is fed and
compared like every other artifact. AOTInductor itself does not check a batch against the range the package was
exported for, so a batch outside it is refused here, naming the range, before the compiled code sees it. On a GPU
each input shape's call is replayed from a CUDA graph (graphs.py), inputs are copied from pinned host memory (as
every torch row's are), and an FP32 package computes in FP32 wherever it runs: PyTorch lets cuDNN convolutions use
TF32 by default, and the compiled code calls them, so TF32 is turned off around its calls and captures (bench
turns it off for its own rows; ``trtpipe.load`` and ``serve`` did not).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from trtpipe.artifact.description import ArtifactDescription, describe_artifact
from trtpipe.artifact.records.package import AotiPackage
from trtpipe.errors import BadInput
from trtpipe.runtime.aoti.graphs import CudaGraphs
from trtpipe.runtime.aoti.package import load_checked
from trtpipe.runtime.aoti.settings import AotiSettings
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.torch.backend import flatten_outputs, to_device, to_host
from trtpipe.vocab import BackendKind, Device, Precision


class AotiBackend(Backend):
    kind = BackendKind.AOTI
    settings_type = AotiSettings

    def __init__(self, artifact: Path | ArtifactDescription, options: RunOptions | AotiSettings | None = None) -> None:
        own: AotiSettings = self.accept(options)
        description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(Path(artifact))
        if description.package is None:
            raise BadInput(f"{description.path} is not an AOTInductor package (.pt2 with its manifest).")
        if own.threads:
            torch.set_num_threads(own.threads)  # process-wide, as the torch backend sets it
        self.path = description.path
        self.package: AotiPackage = description.package
        self.precision = description.precision
        self.device = self.package.device
        gpu = self.device is Device.CUDA
        self._runner = load_checked(self.package, single_threaded=gpu)
        self.graphs = CudaGraphs(self._runner, str(self.path)) if gpu else None
        self._inputs = list(self.package.record.inputs)
        self._outputs = list(self.package.record.outputs)

    @property
    def max_batch(self) -> int | None:
        return self.package.record.batch_range[1]

    def _tensors(self, feeds: dict[str, np.ndarray]) -> list[torch.Tensor]:
        """The inputs as torch tensors on the package's device, each batch checked against its range first."""
        low, high = self.package.record.batch_range
        tensors = []
        for info in self._inputs:
            array = feeds[info.name]
            batch = array.shape[0] if array.ndim else None
            if batch is None or not low <= batch <= high:
                raise BadInput(f"Input '{info.name}' has a batch of {batch}; {self.path} takes batches of "
                               f"{self.package.range_text} (the range it was compiled for): run it in batches "
                               "within that range, or compile it again with --batch-range covering this one.")
            if not (array.flags.c_contiguous and array.flags.writeable):  # the package reads contiguous memory
                array = np.array(array, order="C")
            tensors += to_device([array], self.device)
        return tensors

    def _call(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.inference_mode(), self._math():
            if self.graphs is not None:
                return self.graphs.run(tensors)
            return flatten_outputs(self._runner(*tensors))

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        # to_host copies a replayed graph's outputs before the next replay overwrites them (and waits for the GPU).
        return to_host(self._call(self._tensors(feeds)))

    def _math(self) -> contextlib.AbstractContextManager[None]:
        """The arithmetic the package was compiled for: TF32 off for an FP32 package, as it is left otherwise."""
        return fp32_math() if self.precision is Precision.FP32 else contextlib.nullcontext()

    def replays_cuda_graph(self, feeds: dict[str, np.ndarray]) -> bool | None:
        """On a GPU, whether runs of ``feeds``' shapes replay a captured CUDA graph (False once a capture failed);
        None on the CPU, where there are no graphs."""
        return None if self.graphs is None else self.graphs.replays

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None] | None:
        """On a GPU, the replay of the inputs' graph on inputs already in device memory, outputs left there."""
        if self.graphs is None:
            return None
        with torch.inference_mode(), self._math():
            call = self.graphs.bound(self._tensors(feeds))

        def run() -> None:
            with torch.inference_mode(), self._math():
                call()
            torch.cuda.synchronize()

        return run

    def close(self) -> None:
        self.__dict__.pop("graphs", None)
        self.__dict__.pop("_runner", None)


@contextlib.contextmanager
def fp32_math() -> Iterator[None]:
    """PyTorch's TF32 switches (cuDNN convolutions, CUDA matmuls) off while the block runs, then as they were."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
