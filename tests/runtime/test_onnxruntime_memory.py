"""ONNX Runtime's memory pool under a server: what a large batch grew is handed back after the run."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend


def _resident_mb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


def test_a_server_backend_hands_back_the_memory_a_large_batch_grew() -> None:
    """Serving options ask ONNX Runtime to shrink its arena after each run: once a 270 MB batch has run, a small
    one leaves the process near where it started (without it, the arena keeps the whole peak)."""
    from trtpipe.serve.repository.serving import serving_options
    from trtpipe.vocab import BackendKind

    weight = numpy_helper.from_array(np.random.default_rng(0).random((64, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    options = serving_options(BackendKind.ONNXRUNTIME, threads=1)
    assert options.release_memory
    with OnnxRuntimeBackend(model, options) as backend:
        backend.run({"x": np.zeros((1, 3, 32, 32), np.float32)})
        start = _resident_mb()
        del backend.run({"x": np.zeros((16, 3, 256, 256), np.float32)})[0]
        backend.run({"x": np.zeros((1, 3, 32, 32), np.float32)})
        assert _resident_mb() < start + 100
