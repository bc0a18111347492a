"""``trtpipe inspect`` on engine-inspector JSON in TensorRT 10.x and 11.x layouts (read anywhere), and the
engine-file path up to TensorRT: the trust check, the missing-TensorRT error, and a trtpipe-built engine read
through a stand-in for TensorRT's inspector."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import error_line
from trtpipe.artifact.records.engine import EngineSidecar, commit_engine
from trtpipe.engine.inspect import inspect_file, layer_table, short_format
from trtpipe.engine.specs import ProfileShapes
from trtpipe.errors import MissingDependency

INT8_10X = "Thirty-two wide channel vectorized row major Int8 format"


def _tensor_10x(name: str, fmt: str) -> dict[str, object]:
    return {"Name": name, "Dimensions": [1, 16, 32, 32], "Format/Datatype": fmt}


def _tensor_11x(name: str, fmt: str, datatype: str) -> dict[str, object]:
    return {"Name": name, "Dimensions": [1, 16, 32, 32], "Format": fmt, "Datatype": datatype}


def _layers(tensor: Any, int8: tuple[str, ...], fp32: tuple[str, ...], half: tuple[str, ...]) -> list[object]:
    """A Conv+Relu fused in INT8 (with the DQ in front), a reformat, an FP32 Conv and an FP16 Conv, as TensorRT's
    inspector writes them at detailed verbosity."""
    return [
        {"Name": "node_conv1 + node_relu1", "LayerType": "CaskConvolution", "ParameterType": "Convolution",
         "Inputs": [tensor("x", *int8)], "Outputs": [tensor("r1", *int8)],
         "Metadata": "[ONNX Layer: node_dq1]\x1e[ONNX Layer: node_conv1]\x1e[ONNX Layer: node_relu1]",
         "TacticName": "sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32"},
        {"Name": "Reformatting CopyNode for Input Tensor 0 to node_conv2", "LayerType": "Reformat",
         "Inputs": [tensor("r1", *int8)], "Outputs": [tensor("r1'", *fp32)], "ParameterType": "Reformat"},
        {"Name": "node_conv2", "LayerType": "CaskConvolution", "ParameterType": "Convolution",
         "Inputs": [tensor("r1'", *fp32)], "Outputs": [tensor("c2", *fp32)],
         "Metadata": "[ONNX Layer: node_conv2]", "TacticName": "sm80_xmma_fprop_implicit_gemm_f32f32"},
        {"Name": "node_conv3", "LayerType": "CaskConvolution", "ParameterType": "Convolution",
         "Inputs": [tensor("c2h", *half)], "Outputs": [tensor("y", *half)], "Metadata": "[ONNX Layer: node_conv3]"},
    ]


LAYER_INFO = {
    "10.x": {"Layers": _layers(_tensor_10x, (INT8_10X,), ("Row major linear FP32 format",),
                               ("Channel major FP16 format where channel % 8 == 0",)),
             "Bindings": ["x", "y"]},
    "11.x": {"Layers": _layers(_tensor_11x, ("Thirty-two wide channel vectorized row major Int8 format (kCHW32)",
                                             "Int8"),
                               ("Row major linear FP32 format (kLINEAR)", "Float"),
                               ("Channel major FP16 format where channel % 8 == 0 (kHWC8)", "Half")),
             "I/O Tensors": [{"Name": "x", "IOMode": "Input", "DataType": "Float"},
                             {"Name": "y", "IOMode": "Output", "DataType": "Half"}]},
}


@pytest.mark.parametrize("layout", ["10.x", "11.x"])
def test_layer_table_reads_both_tensorrt_layouts(layout: str) -> None:
    table = layer_table(LAYER_INFO[layout], "model.plan.layers.json")
    assert table.layout == layout
    assert [layer.precision for layer in table.layers] == ["int8", "int8", "fp32", "fp16"]
    fused = table.layers[0]
    assert fused.onnx_nodes == ("node_dq1", "node_conv1", "node_relu1") and fused.compute
    assert fused.tactic.startswith("sm80_xmma") and fused.outputs[0].precision == "int8"
    assert "Int8" in fused.inputs[0].format and table.layers[1].outputs[0].precision == "fp32"
    assert table.compute_precisions == {"int8": 1, "fp32": 1, "fp16": 1} and table.reformats == 1
    assert table.io[0].startswith("x")
    assert "4 layers, 3 compute (fp16 1, fp32 1, int8 1), 1 reformat" in table.summary()


def test_format_texts_of_both_layouts_name_their_tensor_format() -> None:
    assert short_format(INT8_10X) == "kCHW32" and short_format("Row major linear FP32 format") == "kLINEAR"
    assert short_format("Channel major FP16 format where channel % 8 == 0") == "kHWC8"
    assert short_format("Two wide channel vectorized row major FP16 format") == "kCHW2"
    assert short_format("Row major linear BF16 format (kLINEAR)") == "kLINEAR"
    assert short_format("N/A due to dynamic shapes") == "N/A due to dynamic shapes"


def test_a_names_only_build_still_lists_its_layers() -> None:
    table = layer_table({"Layers": ["node_conv1 + node_relu1", "node_conv2"], "Bindings": ["x", "y"]}, "f.json")
    assert table.layout == "names only" and [layer.onnx_nodes for layer in table.layers] == [
        ("node_conv1", "node_relu1"), ("node_conv2",)]
    assert "below detailed profiling verbosity" in table.summary()


@pytest.mark.parametrize("layout", ["10.x", "11.x"])
def test_cli_prints_the_table_and_writes_json(run_cli, tmp_path: Path, layout: str) -> None:  # type: ignore[no-untyped-def]
    source, out = tmp_path / "model.plan.layers.json", tmp_path / "table.json"
    source.write_text(json.dumps(LAYER_INFO[layout]))
    result = run_cli("inspect", source, "--json", out)
    assert result.exit_code == 0, result.output
    for text in ("node_conv1 + node_relu1", "node_dq1, node_conv1, node_relu1", "int8 kCHW32", "fp32 kLINEAR",
                 "fp16 kHWC8", "Reformat", "sm80_xmma", "1 reformat"):
        assert text in result.output
    data = json.loads(out.read_text())
    assert data["layout"] == layout and len(data["layers"]) == 4 and data["compute_precisions"]["int8"] == 1
    assert data["layers"][0]["inputs"][0]["tensor_format"] == "kCHW32" and data["layers"][1]["onnx_nodes"] == []


def test_trtexec_layer_info_without_json_suffix_is_read(tmp_path: Path) -> None:
    source = tmp_path / "layers.txt"  # trtexec --exportLayerInfo names the file as it is told
    source.write_text(json.dumps(LAYER_INFO["10.x"]))
    assert len(inspect_file(source).layers) == 4


@pytest.mark.parametrize(("content", "expected"), [
    ('{"schema": "trtpipe.engine/1", "engine_sha256": "0"}', "is the trtpipe sidecar of model.plan, which lists no "
                                                              "layers: inspect model.plan.layers.json"),
    ('{"Bindings": []}', 'is not TensorRT layer information (a JSON object with a "Layers" list'),
    ("{not json", "is not TensorRT layer information (Expecting property name"),
])
def test_cli_refuses_json_that_is_no_layer_information(run_cli, tmp_path: Path, content: str,  # type: ignore[no-untyped-def]
                                                       expected: str) -> None:
    source = tmp_path / "model.plan.json"
    source.write_text(content)
    result = run_cli("inspect", source)
    assert result.exit_code == 1 and expected in error_line(result.output)


def _no_tensorrt(purpose: str) -> Any:
    raise AssertionError(f"TensorRT was imported for {purpose} before the engine was trusted")


def test_an_engine_trtpipe_did_not_build_is_not_deserialized(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from trtpipe.runtime.tensorrt import loader

    monkeypatch.setattr(loader, "import_tensorrt_runtime", _no_tensorrt)
    engine = tmp_path / "downloaded.plan"
    engine.write_bytes(b"\x00 not from here")
    line = error_line(run_cli("inspect", engine).output)
    assert "has no trtpipe sidecar (downloaded.plan.json)" in line and "--trust-engine" in line
    assert "must only be deserialized from trusted sources" in line


def test_an_engine_that_does_not_match_its_sidecar_is_refused(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from trtpipe.runtime.tensorrt import loader

    monkeypatch.setattr(loader, "import_tensorrt_runtime", _no_tensorrt)
    engine = tmp_path / "model.plan"
    commit_engine(engine, b"engine bytes", EngineSidecar("10.13.0", "NVIDIA H100", "9.0"))
    engine.write_bytes(b"engine bytes, swapped")
    line = error_line(run_cli("inspect", engine).output)
    assert "does not match its sidecar" in line and "--trust-engine" in line


def test_a_trusted_engine_without_tensorrt_names_the_install(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from trtpipe.runtime.tensorrt import loader

    def missing(purpose: str) -> Any:
        raise MissingDependency("TensorRT", purpose, loader.INSTALL_TENSORRT)

    monkeypatch.setattr(loader, "import_tensorrt_runtime", missing)
    engine = tmp_path / "vendor.plan"
    engine.write_bytes(b"\x00")
    result = run_cli("inspect", engine, "--trust-engine")
    assert result.exit_code == 3  # a missing optional dependency
    assert "Inspecting a TensorRT engine needs TensorRT, which is not installed: pip install 'trtpipe[gpu]'" in \
        error_line(result.output)


def test_an_engine_trtpipe_built_is_read_through_the_inspector(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT cannot run here: its import, the GPU query and the deserialization are stand-ins; what is checked
    is that a trusted engine reaches the inspector with the sidecar's opt shapes and its answer becomes the
    table."""
    from trtpipe.engine import builder
    from trtpipe.runtime.tensorrt import loader

    engine = tmp_path / "model.plan"
    profile = [{"input": "x", "min": [1, 3, 32, 32], "opt": [8, 3, 32, 32], "max": [32, 3, 32, 32]}]
    commit_engine(engine, b"engine bytes", EngineSidecar("10.13.0", "NVIDIA H100", "9.0", profiles=[profile]))
    seen: dict[str, Any] = {}

    def describe(trt: Any, engine_bytes: bytes, shapes: list[ProfileShapes], log: Any,
                 *, version_compat: bool = False) -> tuple[list[Any], list[Any], dict[str, Any]]:
        seen.update(bytes=engine_bytes, shapes=shapes, host_code=version_compat)
        return [], [], LAYER_INFO["11.x"]

    monkeypatch.setattr(loader, "import_tensorrt_runtime", lambda purpose: (SimpleNamespace(__version__="10.13.0"),
                                                                             False))
    monkeypatch.setattr(loader, "require_cuda_gpu", lambda purpose: ("NVIDIA H100", "9.0"))
    monkeypatch.setattr(builder, "describe", describe)
    result = run_cli("inspect", engine)
    assert result.exit_code == 0, result.output
    assert "node_conv1 + node_relu1" in result.output and "kCHW32" in result.output
    assert seen["bytes"] == b"engine bytes" and seen["shapes"][0].opt == (8, 3, 32, 32) and not seen["host_code"]
