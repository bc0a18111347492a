"""The checks optimize runs on the file it has just written, each said in one line and kept in the manifest.

- every file: it loads in the default session of each runtime it is meant for (``checks/loads.py``); one warning
  line per runtime where it does not, naming the runtime's own error.
- ``cpu`` INT8: how many convolutions/matmuls ONNX Runtime really runs in integer after its own graph
  optimisations (``checks/kernels.py``), and a short paired timing against the FP32 file
  (``checks/speed_check.py``): a warning where the INT8 file is slower, since it exists only to be faster on that
  runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe import console
from trtpipe.inputs import Batch, named
from trtpipe.onnx_info import graph_inputs
from trtpipe.optimize.checks.kernels import kernel_count
from trtpipe.optimize.checks.loads import check_loads
from trtpipe.optimize.checks.speed_check import paired_speedup_alone
from trtpipe.vocab import ArtifactKind, Precision, Target

PROTOBUF_LIMIT = 2**31 - 1  # a serialized ModelProto's limit: larger FP32 models live in external data
MAX_THREADS = 4  # the speed check's ONNX Runtime threads: this machine's cores, at most this many


def check_written(path: Path, fp32: onnx.ModelProto, precision: Precision, target: Target,
                  sample: Batch) -> dict[str, Any]:
    """Run the checks the module's docstring lists on the file at ``path`` (written from ``fp32`` for ``target`` in
    ``precision``; ``sample``: one batch the graph takes, batch 1 where it can, for the timing); their record, for
    the manifest's ``details.written_checks``."""
    loads = check_loads(path, precision, target)
    for check in loads:
        if not check.loaded:
            console.warn(f"The written file does not load in a default {check.runtime} session: {check.error}")
    record: dict[str, Any] = {"loads": [check.to_dict() for check in loads]}
    reference = str(ArtifactKind.ONNX.backend)  # the runtime the kernel count and the timing below run on
    loaded = next((check.loaded for check in loads if check.runtime == reference), False)
    if precision is Precision.INT8 and target is Target.CPU and loaded:
        kernels = kernel_count(path)
        console.note(kernels.line())
        record["kernels"] = kernels.to_dict()
        record["speed_vs_fp32"] = _speed_vs_fp32(path, fp32, sample)
    return record


def _speed_vs_fp32(path: Path, fp32: onnx.ModelProto, sample: Batch) -> dict[str, Any]:
    """The INT8 file's speed against ``fp32``'s on ONNX Runtime, said in one line (a warning where it is slower)."""
    if fp32.ByteSize() >= PROTOBUF_LIMIT:
        console.note("No speed check against the FP32 file: over 2 GB, it cannot be handed to ONNX Runtime in memory")
        return {"skipped": "FP32 model over 2 GB"}
    inputs = [i.name for i in graph_inputs(fp32)]
    feed = {name: np.ascontiguousarray(array) for name, array in named(sample, inputs).items()}
    check = paired_speedup_alone(path, fp32, feed, threads=min(MAX_THREADS, os.cpu_count() or 1))
    line = check.line("The INT8 file", "the FP32 file")
    if check.slower:
        console.warn(f"{line}: slower than the FP32 file, so no speed win on ONNX Runtime")
    elif check.undecided:  # flagged in the line itself: amber, as bench shows an unstable figure
        console.warn(line)
    else:
        console.note(line)
    return check.to_dict()
