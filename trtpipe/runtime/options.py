"""How a caller asks for an artifact to be run: the edge's one record of every backend's run settings.

``trtpipe.load``'s keywords, bench's and serve's flags all arrive here, flat, as they always have. No backend
receives this record: each folder declares its own settings type (``runtime/<engine>/settings.py``) and is given
only that (:meth:`RunOptions.only`); a changed setting the backend does not have is refused with one line naming the
setting and the backend, instead of being swallowed. Every field here is a field of some backend's settings type,
with the same default (``tests/runtime/test_backend_folders.py``), so this module imports the folders' settings
modules, where the types of their choices are declared (ONNX Runtime's graph optimisation levels, OpenVINO's hints):
the one module outside the folders and the registry that may. Values are converted once, here: a Python caller may
write ``optimization="disable"`` and gets the enum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from trtpipe.errors import BadInput
from trtpipe.runtime.onnxruntime.settings import CudnnSearch, GraphOptimization
from trtpipe.runtime.openvino.settings import PerformanceHint
from trtpipe.vocab import Precision

Provider = str | tuple[str, dict[str, Any]]  # an execution provider: its name, or its name and its options
Settings = TypeVar("Settings")


@dataclass(frozen=True)
class RunOptions:
    """Settings for running an artifact; each field's default is "the backend's own default"."""

    threads: int | None = None  # CPU threads (ONNX Runtime intra-op, OpenVINO inference threads, PyTorch)
    spinning: bool = True  # ONNX Runtime: idle pool threads spin (lowest latency) or sleep (a server's CPU)
    release_memory: bool = False  # ONNX Runtime: hand back after each run what it grew its memory pool to (a server)
    optimization: GraphOptimization = GraphOptimization.ALL  # ONNX Runtime graph optimisation level
    providers: tuple[Provider, ...] = ()  # ONNX Runtime execution providers (empty: the CPU)
    hint: PerformanceHint = PerformanceHint.LATENCY  # OpenVINO
    inference_precision: Precision = Precision.FP32  # OpenVINO: f32, or bf16 kernels for a BF16 artifact
    cuda_graph: bool = False  # TensorRT, ONNX Runtime CUDA: capture each input shape's launch once and replay it
    spin_wait: bool = False  # TensorRT: wait for a run by polling its CUDA event (trtexec's --useSpinWait)
    # ONNX Runtime: inputs and outputs bound to fixed buffers (IO binding). None: on where a GPU provider runs (the
    # outputs stay in device memory until read), off on the CPU.
    io_binding: bool | None = None
    prefer_nhwc: bool = False  # ONNX Runtime CUDA: NHWC convolution kernels (the provider's prefer_nhwc)
    cudnn_search: CudnnSearch | None = None  # ONNX Runtime CUDA: cudnn_conv_algo_search (None: the provider's own)
    # ONNX Runtime CPU: every FP16 tensor rounded to FP16 where it is written, as a GPU computes it (a TensorRT-target
    # file's simulation; onnxruntime/fp16_rounding.py). Without it the CPU provider runs FP16 chains in FP32.
    round_fp16: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name, enum in (("optimization", GraphOptimization), ("hint", PerformanceHint),
                           ("inference_precision", Precision), ("cudnn_search", CudnnSearch)):
            value = getattr(self, name)
            if value is None and name == "cudnn_search":
                continue
            try:
                set_(self, name, enum(value))
            except ValueError:
                raise BadInput(f"Run setting {name} is {value!r}: choose from {', '.join(enum)}.") from None
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise BadInput(f"Run setting threads must be a positive integer, not {self.threads!r}.")
        for name in ("io_binding", "prefer_nhwc", "cuda_graph", "spin_wait", "spinning", "release_memory",
                     "round_fp16"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise BadInput(f"Run setting {name} must be true or false, not {value!r}.")
        set_(self, "providers", tuple(self.providers))

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> RunOptions:
        """The edge for ``trtpipe.load(path, threads=2, ...)``: unknown names are refused with the known ones."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(keywords) - set(known))
        if unknown:
            raise BadInput(f"Unknown run setting {', '.join(unknown)}: the settings are {', '.join(known)}.")
        return cls(**keywords)

    def only(self, settings: type[Settings], backend: str) -> Settings:
        """The settings ``backend`` receives, as its own type: BadInput naming each changed setting it does not
        have (a setting silently ignored would make a row or a server run otherwise than asked)."""
        own = {f.name for f in dataclasses.fields(settings)}  # type: ignore[arg-type]
        foreign = sorted(self.changed() - own)
        if foreign:
            raise BadInput(f"The {backend} backend has no setting {', '.join(foreign)} (its settings: "
                           f"{', '.join(sorted(own)) or 'none'}).")
        return settings(**{name: getattr(self, name) for name in own})

    def changed(self) -> set[str]:
        """The settings that differ from their defaults."""
        return {f.name for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def over(self, required: RunOptions) -> RunOptions:
        """These settings on top of ``required`` (what an artifact needs to run faithfully): a setting the caller
        changed wins, every other one is the artifact's."""
        return dataclasses.replace(required, **{name: getattr(self, name) for name in self.changed()})

    @property
    def provider_names(self) -> list[str]:
        return [p if isinstance(p, str) else p[0] for p in self.providers]

    def to_plain(self) -> dict[str, Any]:
        """The changed settings as JSON values (for a child process that opens the same artifact)."""
        return {name: (str(value) if isinstance(value, str) else value) for name in sorted(self.changed())
                for value in [getattr(self, name)]}
