"""ONNX Runtime's sessions for the stages that read or time a graph rather than serve it (capability
``GraphSessions``): the probe session (probe.py: the graph exactly as written, to read tensors inside it), a timing
session as a user's default session runs a file, and the kernels its optimiser picks for a file's convolutions and
matmuls. Other layers reach these through runtime/registry.py. Light at import: ONNX Runtime is imported when a
function is called."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe.runtime.onnxruntime.probe import QUIET, SILENT, probe_session

if TYPE_CHECKING:
    import onnx

# Weighted ops as ONNX Runtime runs them after its graph optimisations, by how: integer kernels (the QDQ fusions
# and the dynamic-quantisation ones) or float ones (the NCHWc, fused-activation and plain forms).
INTEGER_KERNELS = ("QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QGemm",
                   "DynamicQuantizeMatMul", "QLinearConvTranspose")
FLOAT_KERNELS = ("Conv", "FusedConv", "NhwcConv", "NhwcFusedConv", "ConvTranspose", "MatMul", "FusedMatMul",
                 "Gemm", "FusedGemm")


def probe(model_or_path: onnx.ModelProto | Path | str, exposing: tuple[str, ...], silent: bool,
          round_fp16: bool) -> Any:
    """The CPU probe session over the graph (probe.py), exposing ``exposing``; with ``round_fp16`` every FP16
    tensor is rounded where it is written, as a GPU computes it (fp16_rounding.py)."""
    level = SILENT if silent else QUIET
    if not round_fp16:
        return probe_session(model_or_path, exposing=exposing, log_level=level)
    import onnx

    from trtpipe.runtime.onnxruntime.fp16_rounding import round_fp16_tensors
    from trtpipe.runtime.onnxruntime.probe import with_outputs

    model = model_or_path if isinstance(model_or_path, onnx.ModelProto) else onnx.load(str(model_or_path))
    return probe_session(round_fp16_tensors(with_outputs(model, exposing))[0], log_level=level)


def timing_session(model: onnx.ModelProto | Path, threads: int) -> Any:
    """A CPU session with every graph optimisation (a user's default) and ``threads`` threads, whose pool threads
    stop spinning as each run returns (``session.force_spinning_stop``): by default they spin on for a while, and
    sessions timed in turn on a few cores then steal them from each other (optimize/checks/speed_check.py)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    options.add_session_config_entry("session.force_spinning_stop", "1")
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def optimized_graph(model: onnx.ModelProto | Path) -> onnx.ModelProto:
    """The graph ONNX Runtime's CPU provider runs for ``model``, all graph optimisations on, as it saves it
    (``SessionOptions.optimized_model_filepath``)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="trtpipe-kernels-") as tmp:
        source = Path(tmp) / "model.onnx"
        if isinstance(model, Path):
            source = model
        else:
            onnx.save(model, str(source))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3  # ONNX Runtime warns that an NCHWc graph may not load elsewhere: it is read here
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath, load_external_data=False)


def weighted_kernels(model: onnx.ModelProto | Path) -> tuple[dict[str, int], dict[str, int]]:
    """The weighted ops in ONNX Runtime's optimised graph of ``model``: (integer kernels, float kernels) by op."""
    ops = Counter(node.op_type for node in optimized_graph(model).graph.node)
    return ({op: ops[op] for op in INTEGER_KERNELS if ops[op]}, {op: ops[op] for op in FLOAT_KERNELS if ops[op]})
