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
