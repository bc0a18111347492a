"""ONNX files whose external data would lead out of their folder are refused before any library reads them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import error_line
from trtpipe.errors import BadInput
from trtpipe.onnx_info import load_onnx

SECRET = b"root:x:0:0:root:/root:/bin/bash\n" * 4  # 128 bytes: 32 float32s


def _model_with_external_weights(folder: Path) -> Path:
    weight = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(1, 32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def _point_weights_at(path: Path, location: str) -> None:
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    path.write_bytes(model.SerializeToString())


def test_weights_inside_the_folder_load_and_run(tmp_path: Path) -> None:
    import trtpipe

    path = _model_with_external_weights(tmp_path)
    assert numpy_helper.to_array(load_onnx(path).graph.initializer[0]).sum() == sum(range(32))
    with trtpipe.load(path) as model:
        assert model.predict(np.zeros((1, 32), np.float32))[0, 31] == 31.0


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_locations_outside_the_folder_are_refused(tmp_path: Path, location: str) -> None:
    (tmp_path / "secret.bin").write_bytes(SECRET)
    folder = tmp_path / "model"
    folder.mkdir()
    path = _model_with_external_weights(folder)
    _point_weights_at(path, location)
    with pytest.raises(BadInput, match="refused"):
        load_onnx(path)


def test_links_leading_out_are_refused_everywhere(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import trtpipe

    (tmp_path / "secret.bin").write_bytes(SECRET)
    folder = tmp_path / "model"
    folder.mkdir()
    path = _model_with_external_weights(folder)
    (folder / "weights.bin").unlink()
    os.symlink(tmp_path / "secret.bin", folder / "weights.bin")
    with pytest.raises(BadInput, match="leads outside the model's folder"):
        trtpipe.load(path)  # the embedding API (and so serve) opens ONNX Runtime only after the check
    (folder / "weights.bin").unlink()
    (folder / "sub").symlink_to(tmp_path)
    _point_weights_at(path, "sub/secret.bin")
    result = run_cli("check", path)
    assert result.exit_code == 1 and "refused" in error_line(result.output)
    os.link(tmp_path / "secret.bin", folder / "hard.bin")
    _point_weights_at(path, "hard.bin")
    with pytest.raises(BadInput, match="single link"):
        load_onnx(path, load_weights=False)


@pytest.mark.parametrize("location", ["weights\x00.bin", "weights.bin\x00/../../secret.bin", "\x00"])
def test_a_location_holding_a_nul_byte_is_one_error_line(tmp_path: Path, location: str,
                                                         run_cli) -> None:  # type: ignore[no-untyped-def]
    path = _model_with_external_weights(tmp_path)
    _point_weights_at(path, location)
    with pytest.raises(BadInput, match="holds a NUL byte: refused"):
        load_onnx(path, load_weights=False)
    result = run_cli("check", path)
    assert result.exit_code == 1 and "Traceback" not in result.output
    line = error_line(result.output)
    assert "NUL byte" in line and "\\x00" in line  # shown escaped, not as a raw control character


def test_a_location_that_cannot_be_checked_is_refused(tmp_path: Path) -> None:
    path = _model_with_external_weights(tmp_path)
    _point_weights_at(path, "loop.bin")
    (tmp_path / "loop.bin").unlink(missing_ok=True)
    os.symlink("loop.bin", tmp_path / "loop.bin")  # a link to itself: resolving it loops
    with pytest.raises(BadInput, match="refused"):
        load_onnx(path, load_weights=False)
