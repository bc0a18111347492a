"""The TensorRT backend's GPU paths: one CUDA graph per shape on its own context, spin waits, several optimisation
profiles, per-layer timing and trusted foreign engines. Needs a CUDA GPU and the full TensorRT; skipped with the
reason elsewhere (the pure halves are tested in test_graph_cache.py, test_profiles.py, test_layer_timing.py and
test_foreign_engine.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.engine.test_gpu import needs_tensorrt

pytestmark = [pytest.mark.gpu, pytest.mark.tensorrt, needs_tensorrt]
TWO_PROFILES = "input:1x1x32x32:8x1x32x32:16x1x32x32,input:17x1x32x32:32x1x32x32:64x1x32x32"


@pytest.fixture(scope="module")
def digits_plan(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Path:
    from trtpipe.engine.build import build_engine

    return build_engine(digits_onnx, tmp_path_factory.mktemp("plan") / "d.plan").engine


def test_each_shape_replays_its_own_graph_when_shapes_alternate(digits_plan: Path) -> None:
    from trtpipe.models.data import load_split
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    images = load_split("digits", "eval").images
    with TensorRTBackend(digits_plan) as plain, \
            TensorRTBackend(digits_plan, RunOptions(cuda_graph=True)) as graphed, \
            TensorRTBackend(digits_plan, RunOptions(cuda_graph=True, spin_wait=True)) as spinning:
        for batch in (4, 16, 4, 16, 4, 16):  # every switch used to replay a graph against the other shape's state
            for start in (0, 100):
                x = images[start : start + batch]
                expected = plain.run(x)[0]
                np.testing.assert_allclose(graphed.run(x)[0], expected, rtol=1e-4, atol=1e-4)
                np.testing.assert_allclose(spinning.run(x)[0], expected, rtol=1e-4, atol=1e-4)
        for batch in (4, 16):
            assert graphed.replays_graph(graphed.feeds(images[:batch]))
        assert not plain.replays_graph(plain.feeds(images[:4]))


def test_an_engine_with_two_profiles_runs_each_batch_in_the_one_that_holds_it(digits_onnx: Path,
                                                                               tmp_path: Path) -> None:
    from trtpipe.engine import EngineOptions
    from trtpipe.engine.build import build_engine
    from trtpipe.errors import BadInput
    from trtpipe.models.data import load_split
    from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.tensorrt.backend import TensorRTBackend

    result = build_engine(digits_onnx, tmp_path / "two.plan", EngineOptions(profiles=TWO_PROFILES))
    assert [[shapes["max"][0] for shapes in profile] for profile in result.sidecar.profiles] == [[16], [64]]
    images = load_split("digits", "eval").images
    with OnnxRuntimeBackend(digits_onnx) as ort, \
            TensorRTBackend(result.engine, RunOptions(cuda_graph=True)) as engine:
        assert [p.index for p in engine.profiles] == [0, 1] and engine.max_batch == 64
        for batch in (4, 40, 4, 40, 17, 16):  # profile 0, 1, back, and the bounds of each
            x = images[:batch]
            np.testing.assert_allclose(engine.run(x)[0], ort.run(x)[0], rtol=1e-3, atol=1e-3)
        with pytest.raises(BadInput, match=r"fit none of its optimisation profiles \(profile 0: input 1x1x32x32 to "
                                           r"16x1x32x32; profile 1: input 17x1x32x32 to 64x1x32x32\)"):
            engine.run(images[:100])
        assert engine.run_chunked(images, 64)[0].shape == (len(images), 10)  # chunks of 64 and a remainder


def test_bench_times_layers_and_says_which_rows_replayed_a_graph(digits_plan: Path, tmp_path: Path,
                                                                  run_cli) -> None:  # type: ignore[no-untyped-def]
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", digits_plan, "--device", "cuda", "--batch", "1,8", "--iters", "20",
                     "--profile-layers", "--spin-wait", "--json", json_path)
    assert result.exit_code == 0, result.output
    assert "Per-layer times from TensorRT's profiler" in result.output
    report = json.loads(json_path.read_text())
    engine_rows = [r for r in report["results"] if r["backend"] == "tensorrt"]
    assert engine_rows and all(r["cuda_graph"] for r in engine_rows)
    assert [(e["batch"], e["runs"]) for e in report["layer_timing"]] == [(1, 20), (8, 20)]
    for entry in report["layer_timing"]:
        assert entry["layers"] and sum(layer["share"] for layer in entry["layers"]) == pytest.approx(1.0)
    assert report["settings"]["spin_wait"] and report["settings"]["cuda_graph"]
    plain = run_cli("bench", "digits_resnet", digits_plan, "--device", "cuda", "--batch", "8", "--iters", "10",
                    "--no-cuda-graph", "--json", json_path)
    assert plain.exit_code == 0, plain.output
    rows = json.loads(json_path.read_text())["results"]
    assert all(r["cuda_graph"] is False for r in rows if r["backend"] == "tensorrt")


def test_an_engine_without_a_sidecar_is_benched_only_on_trust(digits_plan: Path, tmp_path: Path,
                                                               run_cli) -> None:  # type: ignore[no-untyped-def]
    from trtpipe.runtime.tensorrt.backend import FOREIGN_NOTE

    foreign = tmp_path / "from_trtexec.trt"
    shutil.copyfile(digits_plan, foreign)  # the same engine, without the sidecar trtpipe wrote
    refused = run_cli("bench", "digits_resnet", "--load-engine", foreign, "--device", "cuda", "--iters", "5")
    assert refused.exit_code == 1 and "--trust-engine" in refused.output
    json_path = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", "--load-engine", foreign, "--trust-engine", "--device", "cuda",
                     "--batch", "8", "--iters", "10", "--json", json_path)
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(json_path.read_text())["results"] if r["backend"] == "tensorrt"]
    assert rows and all(r["variant"].startswith("tensorrt-trusted (from_trtexec)") for r in rows)
    assert all(FOREIGN_NOTE in (r["note"] or "") and r["precision"] == "fp32" for r in rows)
    assert all(r["top1_agreement"] >= 0.99 for r in rows)  # IO names and shapes read from the engine itself
