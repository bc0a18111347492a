"""INT8 for TensorRT follows TensorRT's placement rules on a real trained model, and `trtpipe check` tells a
graph that follows them from one that does not (the placement ONNX Runtime's quantizer writes by default)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from trtpipe.conformance.check import check_model
from trtpipe.models.data import load_split
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.passes.fuse import simplify
from trtpipe.vocab import CalibMethod, Target


@pytest.fixture(scope="module")
def fused_and_ranges(digits_onnx: Path) -> tuple[onnx.ModelProto, dict[str, tuple[float, float]]]:
    from trtpipe.onnx_info import name_nodes

    model, _ = simplify(onnx.load(str(digits_onnx)))
    name_nodes(model)
    images = load_split("digits", "calibration").images
    return model, calibrate(model, [images[:64], images[64:128]], CalibMethod.MINMAX, symmetric=True)


def test_tensorrt_placement(fused_and_ranges) -> None:  # type: ignore[no-untyped-def]
    model, ranges = fused_and_ranges
    quantized = quantize(model, ranges, profile_for(Target.TENSORRT))
    report = check_model(quantized, Target.TENSORRT)
    assert report.passed and not report.findings, [f.line() for f in report.findings]
    nodes = quantized.graph.node
    producer = {o: n for n in nodes for o in n.output}
    inits = {i.name: i for i in quantized.graph.initializer}
    dequantized = [inits[n.input[0]].data_type for n in nodes if n.op_type == "DequantizeLinear"
                   and n.input[0] in inits]
    assert dequantized and set(dequantized) == {onnx.TensorProto.INT8}  # weights only: no int32 bias
    adds = [n for n in nodes if n.op_type == "Add"]
    assert len(adds) == 3
    for add in adds:  # one branch fused into its convolution, the residual dequantized
        kinds = sorted(producer[i].op_type for i in add.input)
        assert kinds == ["Conv", "DequantizeLinear"], (add.name, kinds)
    weighted = {n.output[0] for n in nodes if n.op_type in ("Conv", "Gemm")}
    quantized_outputs = [n for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] in weighted]
    graph_output = quantized.graph.output[0].name
    assert producer[graph_output].op_type == "Gemm"  # the logits are not quantized
    assert len(quantized_outputs) == 2  # the two projection shortcuts, as residual inputs


def test_onnxruntime_default_placement_fails_with_the_int32_bias_finding(fused_and_ranges, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """ONNX Runtime's quantize_static, S8S8 symmetric as TensorRT needs, with its own default placement."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model, _ = fused_and_ranges
    source, out = tmp_path / "fused.onnx", tmp_path / "ort.onnx"
    onnx.save(model, str(source))
    images = load_split("digits", "calibration").images[:64]

    class Reader:
        def __init__(self) -> None:
            self.items = iter([{model.graph.input[0].name: images[i : i + 16]} for i in range(0, 64, 16)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    quantize_static(str(source), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    calibrate_method=CalibrationMethod.MinMax, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    report = check_model(onnx.load(str(out)), Target.TENSORRT)
    assert not report.passed
    rules = {f.rule for f in report.errors}
    assert rules == {"dq-input-type"}
    assert all("INT32 (a quantized bias)" in f.message for f in report.errors)
    assert {"weighted-output", "residual-add"} <= {f.rule for f in report.warnings}


def test_tensorrt_placement_keeps_accuracy_as_float_qdq(fused_and_ranges) -> None:  # type: ignore[no-untyped-def]
    from trtpipe.comparison import compare
    from trtpipe.optimize.judging.evaluate import logits

    model, ranges = fused_and_ranges
    quantized = quantize(model, ranges, profile_for(Target.TENSORRT))
    split = load_split("digits", "eval")
    result = compare(logits(model, split.images), logits(quantized, split.images, as_written=True),
                     split.labels)
    assert result.accuracy_drop_pp is not None and result.accuracy_drop_pp <= 0.5
    assert np.isfinite(result.max_abs_err)


def test_cli_check_exit_codes(digits_onnx: Path, tmp_path: Path, run_cli, fused_and_ranges) -> None:  # type: ignore[no-untyped-def]
    import json

    model, ranges = fused_and_ranges
    default = profile_for(Target.TENSORRT)
    options = {k: v for k, v in default.extra_options.items() if k != "QuantizeBias"}
    bad = tmp_path / "bad.onnx"
    onnx.save(quantize(model, ranges, replace(default, extra_options=options)), str(bad))
    result = run_cli("check", bad, "--target", "tensorrt", "--json", tmp_path / "f.json")
    assert result.exit_code == 1
    assert "dq-input-type" in result.output
    assert json.loads((tmp_path / "f.json").read_text())["passed"] is False
    assert run_cli("check", bad, "--target", "cpu").exit_code == 0  # ONNX Runtime runs an int32 bias
    assert run_cli("check", digits_onnx).exit_code == 0
    # build refuses the graph with the finding before it even looks for TensorRT
    built = run_cli("build", bad, "-o", tmp_path / "bad.plan")
    assert built.exit_code == 1 and "does not conform to tensorrt" in built.output and "dq-input-type" in built.output


def test_cpu_logits_come_out_of_the_integer_classifier_unquantized(fused_and_ranges, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """ONNX Runtime's quantizer rounds the logits to 256 levels; the cpu placement hands back the float the
    classifier computed, and ONNX Runtime still runs that classifier as an integer QGemm."""
    import onnxruntime as ort

    model, ranges = fused_and_ranges
    quantized = quantize(model, ranges, profile_for(Target.CPU))
    producer = {o: n for n in quantized.graph.node for o in n.output}
    graph_output = quantized.graph.output[0].name
    assert producer[graph_output].op_type == "Gemm"
    assert [n.op_type for n in quantized.graph.node].count("QuantizeLinear") > 0  # the rest stays INT8
    saved, optimized = tmp_path / "int8.onnx", tmp_path / "optimized.onnx"
    onnx.save(quantized, str(saved))
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(optimized)
    ort.InferenceSession(str(saved), options, providers=["CPUExecutionProvider"])
    ran = {o: n for n in onnx.load(str(optimized)).graph.node for o in n.output}
    assert ran[graph_output].op_type == "QGemm"
