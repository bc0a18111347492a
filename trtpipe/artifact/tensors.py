"""A tensor as an artifact declares it: name, numpy dtype name and shape (a str or None marks a dynamic axis).

Every description of an artifact lists its inputs and outputs as these, whichever record they come from (an ONNX
graph, an engine's sidecar, a package's manifest), and every backend checks what it is given against them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.shapes import format_shape

Dim = int | str | None  # a str or None marks a dynamic dimension


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # numpy dtype name: float32, float16, int64...
    shape: tuple[Dim, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def check(self, array: np.ndarray) -> None:
        """Raise BadInput naming this tensor when ``array`` does not fit it."""
        if array.dtype != np.dtype(self.dtype):
            raise BadInput(f"Input '{self.name}' has dtype {array.dtype}; the model expects {self.dtype}.")
        if array.ndim != len(self.shape) or any(
            isinstance(want, int) and want != got for want, got in zip(self.shape, array.shape, strict=False)
        ):
            raise BadInput(f"Input '{self.name}' has shape {format_shape(array.shape)}; the model expects "
                           f"{format_shape(self.shape)} ('?' is free).")
