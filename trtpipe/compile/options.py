"""What compile can be told: the precision and device an AOTInductor package is built for, its memory format, the
batch range it accepts, and the tolerance of its check against PyTorch FP32. One declaration feeds `trtpipe
compile`, the API and an AOTInductor ``[[variants]]`` table of the pipeline file."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.options import Options, option
from trtpipe.vocab import Device, Precision

DEFAULT_BATCH_RANGE = (1, 128)
PRECISIONS = (Precision.FP32.value, Precision.FP16.value, Precision.BF16.value)


def parse_batch_range(text: str) -> tuple[int, int]:
    """``1-32`` (the smallest and largest batch the package accepts; ``1,32`` too, as a pipeline file's list or a
    Python tuple arrives) or ``8`` (that batch only)."""
    low, dash, high = text.strip().replace(",", "-").partition("-")
    try:
        bounds = (int(low), int(high) if dash else int(low))
    except ValueError:
        raise ValueError(f"'{text}' is not a batch range: write MIN-MAX, e.g. 1-32, or one batch size") from None
    if bounds[0] < 1 or bounds[1] < bounds[0]:
        raise ValueError(f"'{text}' is not a batch range: MIN must be at least 1 and MAX at least MIN")
    return bounds


def format_batch_range(bounds: tuple[int, int]) -> str:
    return f"{bounds[0]}-{bounds[1]}"


@dataclass
class CompileOptions(Options):
    precision: Precision = option(Precision.FP32, "Precision the package computes in (its inputs and outputs stay "
                                  "FP32): fp16 and bf16 only where the device has kernels for them.", type=Precision,
                                  choices=PRECISIONS)
    device: Device = option(Device.CPU, "Device the package is compiled for and runs on (cuda needs a CUDA GPU "
                            "when compiling).", type=Device)
    batch_range: tuple[int, int] = option(DEFAULT_BATCH_RANGE, "Smallest and largest batch the package accepts "
                                          "(torch.export's dynamic batch dimension); another batch is refused "
                                          "naming the range.", parse=parse_batch_range, format=format_batch_range,
                                          metavar="MIN-MAX")
    channels_last: bool = option(False, "Compute in channels_last (NHWC) memory order: 4-D weights and inputs are "
                                 "converted inside the package; callers still feed NCHW.", type=bool)
    atol: float | None = option(None, "Absolute error allowed against PyTorch FP32 (default: the precision's, "
                                "1e-4 for fp32).", type=float, minimum=0)
    rtol: float | None = option(None, "Error allowed relative to the largest reference output (default: the "
                                "precision's, 1e-4 for fp32).", type=float, minimum=0)
    min_cosine: float | None = option(None, "Lowest cosine similarity allowed between outputs (default: the "
                                      "precision's, 0.9999 for fp32).", type=float, minimum=-1, maximum=1)
