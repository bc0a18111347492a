"""What ``trtpipe debug`` can be told: the reference, the inputs, and when an error counts as a jump.

Standard library only: the CLI builds the command's flags from this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtpipe.options import Options, option
from trtpipe.shapes import format_input_shapes, format_size, parse_input_shapes, parse_size

# Defaults of the jump rule, documented in docs/guides/debugging.md and trtpipe.debug.report: a tensor is where the
# error jumps when its relative error exceeds JUMP_THRESHOLD and JUMP_FACTOR times the worst error of the tensors it is
# computed from. One INT8 rounding of a well-scaled tensor costs about 0.5-3 % (8 bits over the calibrated range) and
# errors grow slowly from layer to layer, so a tenfold-noisier-than-rounding tensor that is also four times worse than
# its inputs is the first place worth looking at.
JUMP_THRESHOLD = 0.1
JUMP_FACTOR = 4.0
SAMPLES = 4
MEMORY = 512 * 2**20


@dataclass
class DebugOptions(Options):
    reference: Path | None = option(None, "The FP32 ONNX to compare against (default: the source that MODEL's "
                                    "manifest records, as 'trtpipe optimize' wrote it).", type=Path,
                                    metavar="FP32.onnx")
    data: str | None = option(None, "Inputs to run: digits, photos, packaged:NAME, a .npy/.npz file or a folder of "
                              "images (default: a packaged model's own inputs, else the data MODEL was evaluated or "
                              "calibrated on, else seeded random inputs, with a warning).", metavar="DATA")
    samples: int = option(SAMPLES, "How many samples to run both models on.", type=int, minimum=1)
    input_shape: dict[str, tuple[int, ...]] | None = option(
        None, "Input shapes where the graph leaves a dimension free (default: as MODEL's manifest records them, "
        "else the data's).", parse=parse_input_shapes, format=format_input_shapes, metavar="[NAME:]SHAPE,...")
    jump_threshold: float = option(JUMP_THRESHOLD, "A tensor's error jumps when its relative error "
                                   "(||a-b||/||b||) exceeds this...", type=float, minimum=0.0)
    jump_factor: float = option(JUMP_FACTOR, "...and this many times the worst relative error of the tensors it is "
                                "computed from.", type=float, minimum=1.0)
    memory: int = option(MEMORY, "Intermediate tensors are compared in chunks whose outputs for one batch fit in "
                         "this much memory (per model).", parse=parse_size, format=format_size, metavar="SIZE")
