"""An AOTInductor package compiled for a CUDA GPU and replayed from CUDA graphs. Needs a CUDA GPU; skipped with the
reason elsewhere. Run on a GPU machine with `pytest -m gpu tests/compile`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="no CUDA GPU visible to torch")]


@pytest.fixture(scope="module")
def cuda_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trtpipe.compile import CompileOptions, compile_aoti
    from trtpipe.models.loader import load_model

    output = tmp_path_factory.mktemp("aoti-cuda") / "model.pt2"
    compile_aoti(load_model("digits_resnet"), output,
                 CompileOptions(precision="fp16", device="cuda", batch_range="1-32", channels_last=True))
    return output


def test_a_cuda_package_replays_a_graph_per_shape_and_matches_pytorch(cuda_package: Path) -> None:
    import trtpipe
    from trtpipe.models.data import load_split
    from trtpipe.models.loader import load_model
    from trtpipe.runtime.torch.backend import TorchBackend
    from trtpipe.vocab import BackendKind, Device, Precision

    images = load_split("digits", "eval").images[:32]
    loaded = load_model("digits_resnet")
    expected = TorchBackend(loaded.module, loaded.inputs).run(images)[0]
    with trtpipe.load(cuda_package) as model:
        backend = model.backend
        assert model.kind is BackendKind.AOTI and model.precision is Precision.FP16 and backend.device is Device.CUDA
        for batch in (1, 8, 32, 8):  # a shape seen before replays its own graph
            got = model.predict(images[:batch])
            assert got.dtype == np.float32
            assert (got.argmax(1) == expected[:batch].argmax(1)).mean() > 0.97
            np.testing.assert_allclose(got, expected[:batch], rtol=0.05, atol=0.05)
        assert backend.graphs is not None and backend.graphs.replays, backend.graphs.failed
        first, again = model.predict(images[:8]), model.predict(images[8:16])
        assert not np.array_equal(first, again)  # each replay's outputs were copied before the next overwrote them
        resident = backend.device_resident_call(backend.feeds(images[:8]))
        assert resident is not None
        resident()


def test_bench_reports_the_cuda_package_with_and_without_transfers(cuda_package: Path, tmp_path: Path,
                                                                   run_cli) -> None:  # type: ignore[no-untyped-def]
    import json

    report = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", cuda_package, "--iters", "20", "--batch", "1,8", "--device", "cuda",
                     "--json", report)
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(report.read_text())["results"] if r["artifact"] == str(cuda_package)]
    assert {(r["batch"], r["includes_transfers"]) for r in rows} == {(1, True), (1, False), (8, True), (8, False)}
    assert all(r["device_memory_mb"] and r["device_memory_mb"] > 0 for r in rows)
    assert all(r["cuda_graph"] is True for r in rows), [(r["variant"], r["cuda_graph"]) for r in rows]
