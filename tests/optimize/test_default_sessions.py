"""Every file optimize writes loads in a plain ONNX Runtime session (all graph optimisations): INT8 with FP16
elsewhere keeps FP32 scales around a Concat ONNX Runtime fuses into QLinearConcat, and the load check names a file
that does not load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.optimize.checks.loads import check_loads
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.steps.high_precision.algorithm import fp16_elsewhere
from trtpipe.runtime.capabilities import ChecksLoads
from trtpipe.runtime.registry import ability, who_can
from trtpipe.vocab import BackendKind, CalibMethod, Precision, Target

RNG = np.random.default_rng(5)


def _concat_net() -> onnx.ModelProto:
    """Two convolutions of x, concatenated, read by a third: the FPN join of a detector's neck."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("wa", (4, 3, 3, 3)), ("wb", (4, 3, 3, 3)), ("wc", (2, 8, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["ab"], name="concat", axis=1),
        helper.make_node("Conv", ["ab", "wc"], ["y"], name="conv_c"),
    ]
    graph = helper.make_graph(nodes, "concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_int8_with_fp16_elsewhere_loads_in_a_default_session(tmp_path: Path) -> None:
    model = _concat_net()
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    profile = profile_for(Target.TENSORRT)
    quantized = quantize(model, calibrate(model, batches, CalibMethod.MINMAX, symmetric=True), profile)
    converted, report = fp16_elsewhere(quantized, batches)
    path = tmp_path / "int8_fp16.onnx"
    onnx.save(converted, str(path))
    [check] = check_loads(path, Precision.INT8, Target.TENSORRT)
    assert check.runtime == BackendKind.ONNXRUNTIME and check.loaded, check.error
    kept = {item["node"]: item["reason"] for item in report.kept_fp32}
    assert "QLinearConcat" in kept["concat"]
    assert report.fp16_scales > 0  # the convolutions' Q/DQ still go FP16: only the Concat's stay FP32


def _fp16_scaled_concat() -> onnx.ModelProto:
    """DQ -> Concat -> Q with FP16 scales (opset 19): what ONNX Runtime fuses into a QLinearConcat and then refuses."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float16), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [node for i in range(2) for node in (
        helper.make_node("QuantizeLinear", [f"x{i}", "s", "z"], [f"q{i}"]),
        helper.make_node("DequantizeLinear", [f"q{i}", "s", "z"], [f"d{i}"]))]
    nodes += [helper.make_node("Concat", ["d0", "d1"], ["c"], axis=1),
              helper.make_node("QuantizeLinear", ["c", "s", "z"], ["qc"]),
              helper.make_node("DequantizeLinear", ["qc", "s", "z"], ["y"])]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT16, [1, 4, 8, 8]) for i in (0, 1)]
    graph = helper.make_graph(nodes, "fp16_concat", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def test_the_load_check_names_a_file_a_default_session_refuses(tmp_path: Path) -> None:
    path = tmp_path / "refused.onnx"
    onnx.save(_fp16_scaled_concat(), str(path))
    onnx.checker.check_model(str(path))  # a valid ONNX file: only ONNX Runtime's fusion breaks it
    [check] = check_loads(path, Precision.INT8, Target.TENSORRT)  # a TensorRT-flavour file: ONNX Runtime's alone
    assert not check.loaded and check.error is not None and "QLinearConcat" in check.error
    assert check.to_dict()["loaded"] is False


def test_every_file_is_checked_in_onnx_runtime_first_and_openvino_only_for_its_own() -> None:
    for precision in (Precision.FP32, Precision.FP16, Precision.INT8):
        for target in Target:
            meant = [kind for kind in who_can(ChecksLoads) if ability(kind, ChecksLoads).meant_for(precision, target)]
            assert meant[0] == BackendKind.ONNXRUNTIME
            assert (BackendKind.OPENVINO in meant) == (precision is not Precision.INT8 or target is Target.OPENVINO)
