"""What an engine build can be told, in trtexec's vocabulary: workspace, profile shapes, timing cache,
optimisation level and compatibility. Parsed and checked before TensorRT is touched."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpipe.artifact.records.engine import HardwareCompat
from trtpipe.engine.specs import ProfileSpec, format_profiles, parse_profiles
from trtpipe.options import Options, option
from trtpipe.shapes import format_shape_specs, format_size, parse_shape_specs, parse_size

_SPECS: dict[str, Any] = {"parse": parse_shape_specs, "format": format_shape_specs, "metavar": "NAME:SHAPE,..."}


@dataclass
class EngineOptions(Options):
    workspace: int | None = option(None, "Workspace memory limit, e.g. 4GiB (default: TensorRT's).",
                                   parse=parse_size, format=format_size, metavar="SIZE")
    shapes: dict[str, tuple[int, ...]] = option(default_factory=dict, help="Fixed input shapes (min = opt = max).",
                                                **_SPECS)
    min_shapes: dict[str, tuple[int, ...]] = option(default_factory=dict, help="Profile minimum (default batch 1).",
                                                    **_SPECS)
    opt_shapes: dict[str, tuple[int, ...]] = option(default_factory=dict, help="Profile optimum (default batch 8).",
                                                    **_SPECS)
    max_shapes: dict[str, tuple[int, ...]] = option(default_factory=dict, help="Profile maximum (default batch 32).",
                                                    **_SPECS)
    profiles: tuple[ProfileSpec, ...] = option(
        (), "Several optimisation profiles instead of the options above: NAME:MIN:OPT:MAX (or NAME:SHAPE), the "
        "inputs of one profile joined by '+', profiles by ','; every dynamic input in every profile. A request "
        "runs in the first profile whose range holds its shapes.", parse=parse_profiles, format=format_profiles,
        metavar="NAME:MIN:OPT:MAX[+...],...")
    timing_cache: Path | None = option(None, "Timing cache to read and update, so later builds are faster.",
                                       type=Path)
    opt_level: int | None = option(None, "Builder optimisation level (TensorRT default 3).", type=int, minimum=0,
                                   maximum=5)
    hardware_compat: HardwareCompat = option(HardwareCompat.NONE, "Which GPUs the engine may run on.",
                                             type=HardwareCompat)
    version_compat: bool = option(False, "Let newer TensorRT versions (and the lean runtime) run it.", type=bool)
    tf32: bool = option(False, "Let FP32 layers use TF32 tensor cores (faster, 10-bit mantissa); recorded as "
                        "precision tf32 for an FP32 graph.", type=bool)
    layer_info: Path | None = option(None, "Where to save the engine inspector's layer information (default "
                                     "OUT.layers.json).", type=Path)
