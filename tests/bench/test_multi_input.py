"""An ONNX from elsewhere with several inputs, or with NHWC uint8 pixels, as bench's MODEL: every input is drawn from
its dtype and range, every row runs every input, and TensorRT's profile names every input."""

from __future__ import annotations

import json
from pathlib import Path

from tests.builders import nhwc_uint8_onnx, two_input_data, two_input_onnx
from trtpipe.artifact.description import describe_artifact
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.plan import trt_profile
from trtpipe.inputs import InputSpec


def _bench(run_cli, model: Path, artifact: Path, out: Path, *extra: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    result = run_cli("bench", model, artifact, "--batch", "1,2", "--iters", "3", "--rounds", "1", "--threads", "1",
                     "--json", out, *extra)
    assert result.exit_code == 0, result.output
    assert "latency vs the FP32 ONNX on ONNX Runtime CPU" in result.output
    return json.loads(out.read_text())


def test_a_two_input_onnx_is_benched_with_its_artifact(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    model = two_input_onnx(tmp_path / "two_input.onnx")
    int8 = tmp_path / "int8.onnx"
    assert run_cli("optimize", model, "-o", int8, "--precision", "int8", "--target", "cpu", "--calib",
                   two_input_data(tmp_path / "calib.npz")).exit_code == 0
    report = _bench(run_cli, model, int8, tmp_path / "bench.json", "--input-range", "aux:-1..1")
    assert [r["batch"] for r in report["results"]] == [1, 2, 1, 2]
    assert all(r["cosine"] > 0.99 for r in report["results"])
    assert "image: standard normal float32; aux: uniform float32 in [-1, 1]" in report["agreement_inputs"]
    assert [s["name"] for s in report["model"]["inputs"]] == ["image", "aux"]


def test_an_nhwc_uint8_onnx_is_benched_on_uint8_pixels(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    model = nhwc_uint8_onnx(tmp_path / "nhwc_uint8.onnx")
    int8 = tmp_path / "int8.onnx"
    assert run_cli("optimize", model, "-o", int8, "--precision", "int8", "--target", "tensorrt", "--calib",
                   "random").exit_code == 0
    report = _bench(run_cli, model, int8, tmp_path / "bench.json")
    assert "pixels: uniform uint8 integers in [0, 255]" in report["agreement_inputs"]
    assert all(r["host_memory_mb"] is not None for r in report["results"])  # the fresh process fed it uint8 too
    assert report["results"][-1]["agreement"] is not None


def test_the_tensorrt_profile_names_every_input(tmp_path: Path) -> None:
    description = describe_artifact(two_input_onnx(tmp_path / "two_input.onnx"))
    specs = (InputSpec("image", (1, 3, 16, 16)), InputSpec("aux", (1, 4)))
    low, opt, high = trt_profile(description, specs, BenchOptions(batches=(1, 8)))
    assert low == "image:1x3x16x16,aux:1x4"
    assert opt == "image:8x3x16x16,aux:8x4"
    assert high.startswith("image:64x3x16x16,aux:64x4")
