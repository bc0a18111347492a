"""Precision checks on engine-inspector JSON, in the shape TensorRT writes at DETAILED verbosity."""

from __future__ import annotations

import pytest

from trtpipe.engine.layers import check_precision, precision_counts, summarise, tensor_precision
from trtpipe.errors import TrtpipeError
from trtpipe.vocab import Precision


def _layer(name: str, fmt: str, parameter: str = "Convolution", metadata: str = "") -> dict[str, object]:
    return {"Name": name, "LayerType": "CaskConvolution" if parameter == "Convolution" else "Reformat",
            "Inputs": [{"Name": "x", "Dimensions": [8, 16, 32, 32], "Format/Datatype": fmt}],
            "Outputs": [{"Name": "y", "Dimensions": [8, 16, 32, 32], "Format/Datatype": fmt}],
            "ParameterType": parameter, "Metadata": metadata}


INT8 = "Thirty-two wide channel vectorized row major Int8 format"
ENGINE = {"Layers": [
    _layer("node_Conv_0 + node_relu", INT8, metadata="[ONNX Layer: node_Conv_0]\x1e[ONNX Layer: node_relu]"),
    _layer("node_Conv_2", "Row major linear FP32 format"),
    _layer("Reformatting CopyNode for Input Tensor 0", "Row major linear FP32 format", parameter="Reformat"),
    _layer("node_Conv_4", "N/A due to dynamic shapes"),
], "Bindings": ["input", "output"]}


def test_formats() -> None:
    assert tensor_precision(INT8) == "int8"
    assert tensor_precision("Channel major FP16 format where channel % 8 == 0") == "fp16"
    assert tensor_precision("Row major linear FP32 format") == "fp32" and tensor_precision("Float") == "fp32"
    assert tensor_precision("N/A due to dynamic shapes") == "unknown"


def test_summary_maps_layers_to_onnx_nodes() -> None:
    layers = summarise(ENGINE)
    assert layers[0].onnx_nodes == ("node_Conv_0", "node_relu") and layers[0].precision == "int8"
    assert layers[1].onnx_nodes == ("node_Conv_2",) and layers[1].compute
    assert not layers[2].compute
    assert precision_counts(layers) == {"int8": 1, "fp32": 1, "unknown": 1}


def test_silent_fp32_fallback_is_an_error_naming_the_layer() -> None:
    with pytest.raises(TrtpipeError, match=r"runs 1 of 3 compute layers in a wider precision than int8 "
                                           r"\(node_Conv_2 \(fp32\)\)"):
        check_precision(summarise(ENGINE), Precision.INT8)


def test_nodes_kept_fp32_on_purpose_are_allowed() -> None:
    check_precision(summarise(ENGINE), Precision.INT8, allowed_fp32_nodes={"node_Conv_2"})
    check_precision(summarise(ENGINE), Precision.FP32)  # nothing to check for FP32 engines
    with pytest.raises(TrtpipeError, match="wider precision than fp16"):
        check_precision(summarise(ENGINE), Precision.FP16)


def test_a_precision_check_that_checked_nothing_fails() -> None:
    from trtpipe.engine.layers import LayerSummary
    from trtpipe.errors import TrtpipeError
    from trtpipe.vocab import Precision

    names_only = [LayerSummary("conv1 + relu1", "?", "unknown", ("conv1", "relu1"), False)]
    with pytest.raises(TrtpipeError, match="Cannot confirm the engine runs in int8"):
        check_precision(names_only, Precision.INT8)
    check_precision(names_only, Precision.FP32)  # an FP32 engine accepts any layer precision


# The same layer in TensorRT 10.x's layout (one "Format/Datatype" text) and 11.x's ("Format" and "Datatype"; keys
# as NVIDIA's layer-info schema spells them, .agents/skills/trt-perf-analysis/schemas/analyze-data.schema.json in
# NVIDIA/TensorRT; the migration guide's I/O tensors spell the type "DataType").
def _tensor_10x(fmt: str) -> dict[str, object]:
    return {"Name": "x", "Dimensions": [8, 16, 32, 32], "Format/Datatype": fmt}


def _tensor_11x(fmt: str, datatype: str, key: str = "Datatype") -> dict[str, object]:
    return {"Name": "x", "Dimensions": [8, 16, 32, 32], "Format": fmt, key: datatype}


def _conv(name: str, tensor: dict[str, object], metadata: str = "") -> dict[str, object]:
    return {"Name": name, "LayerType": "CaskConvolution", "ParameterType": "Convolution", "Inputs": [tensor],
            "Outputs": [tensor], "Metadata": metadata}


@pytest.mark.parametrize("layer_info", [
    {"Layers": [_conv("conv_a", _tensor_10x(INT8)), _conv("conv_b", _tensor_10x("Row major linear FP32 format")),
                _conv("conv_c", _tensor_10x("Half")), _conv("conv_d", _tensor_10x("BFloat16"))],
     "Bindings": ["input", "output"]},
    {"Layers": [_conv("conv_a", _tensor_11x("Thirty-two wide channel vectorized row major Int8 format (kCHW32)",
                                            "Int8")),
                _conv("conv_b", _tensor_11x("Row major linear FP32 format (kLINEAR)", "Float")),
                _conv("conv_c", _tensor_11x("Channel major FP16 format where channel % 8 == 0 (kHWC8)", "Half")),
                _conv("conv_d", _tensor_11x("Row major linear BF16 format (kLINEAR)", "BFloat16", "DataType"))],
     "I/O Tensors": [{"Name": "input", "IOMode": "Input", "DataType": "Float"}]},
], ids=["tensorrt-10.x", "tensorrt-11.x"])
def test_layer_precision_in_both_tensorrt_layouts(layer_info: dict[str, object]) -> None:
    layers = summarise(layer_info)
    assert [layer.precision for layer in layers] == ["int8", "fp32", "fp16", "bf16"]
    with pytest.raises(TrtpipeError, match=r"conv_b \(fp32\)"):
        check_precision(layers, Precision.INT8)


def test_an_11x_datatype_wins_over_its_layout_text() -> None:
    # The layout names no type of its own here; the Datatype beside it decides.
    layer = summarise({"Layers": [_conv("conv", _tensor_11x("Row major linear format (kLINEAR)", "Half"))]})[0]
    assert layer.precision == "fp16"
    assert tensor_precision("BFloat16") == "bf16"  # not "fp32" from the word "float" in it


# A Conv the INT8 fallback kept in FP32, fused by TensorRT with its Relu (and the DQ in front of it): the manifest
# records only the Conv.
FUSED = {"Layers": [
    _conv("node_conv1 + node_relu1", _tensor_10x("Row major linear FP32 format"),
          "[ONNX Layer: node_dq1]\x1e[ONNX Layer: node_conv1]\x1e[ONNX Layer: node_relu1]"),
    _conv("node_conv2 + node_relu2", _tensor_10x(INT8), "[ONNX Layer: node_conv2]\x1e[ONNX Layer: node_relu2]"),
]}
OP_TYPES = {"node_dq1": "DequantizeLinear", "node_conv1": "Conv", "node_relu1": "Relu", "node_conv2": "Conv",
            "node_relu2": "Relu", "node_conv3": "Conv"}


def test_a_conv_kept_fp32_with_its_fused_relu_is_accepted() -> None:
    check_precision(summarise(FUSED), Precision.INT8, {"node_conv1"}, OP_TYPES)
    # Without the op types nothing says the Relu and the DQ carry no decision: every node must then be allowed.
    with pytest.raises(TrtpipeError, match="node_conv1 \\+ node_relu1"):
        check_precision(summarise(FUSED), Precision.INT8, {"node_conv1"})


def test_a_conv_not_kept_fp32_still_fails_when_it_runs_fp32() -> None:
    # Only the Relu is "allowed" (it is not the decision): the Conv runs FP32 without having been kept.
    with pytest.raises(TrtpipeError, match=r"runs 1 of 2 compute layers .*node_conv1 \+ node_relu1 \(fp32\)"):
        check_precision(summarise(FUSED), Precision.INT8, {"node_relu1"}, OP_TYPES)
    # Another Conv kept, and this one fused with it: the second Conv carries its own decision.
    two_convs = {"Layers": [_conv("node_conv1 + node_conv3", _tensor_10x("Float"),
                                  "[ONNX Layer: node_conv1]\x1e[ONNX Layer: node_conv3]")]}
    with pytest.raises(TrtpipeError, match="node_conv1 \\+ node_conv3"):
        check_precision(summarise(two_convs), Precision.INT8, {"node_conv1"}, OP_TYPES)
    with pytest.raises(TrtpipeError, match="wider precision than int8"):
        check_precision(summarise(FUSED), Precision.INT8, set(), OP_TYPES)
