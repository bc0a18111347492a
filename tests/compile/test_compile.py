"""trtpipe compile: what it refuses in one line before compiling, and the package it made, benched beside PyTorch,
served from a repository and exported for Triton's Python backend."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.compile.packages import BATCH_RANGE, copy_package, digits_package
from tests.conftest import error_line
from trtpipe.vocab import BackendKind, Device, Precision

BRANCHY = """\
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)

    def forward(self, x):
        y = self.conv(x)
        if y.sum() > 0:  # a branch on the data: torch.export cannot trace it
            return y * 2
        return y


def make():
    torch.manual_seed(0)
    return Branchy()
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return digits_package(tmp_path_factory.getbasetemp())


def test_a_model_torch_export_cannot_take_gets_one_line_naming_why(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "branchy.py").write_text(BRANCHY)
    output = tmp_path / "branchy.pt2"
    result = run_cli("compile", f"{tmp_path / 'branchy.py'}:make", "--input-shape", "1x1x8x8", "-o", output)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert line.startswith("Error: torch.export cannot take make: Could not guard on data-dependent expression")
    assert "convert it to ONNX instead" in line
    assert "def forward" not in result.output  # torch's own dump of the graph stays out of the terminal
    assert not output.exists() and not list(tmp_path.glob("*.manifest.json"))


def test_a_precision_the_device_has_no_kernels_for_is_refused_in_one_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import torch

    from trtpipe.compile.devices import unsupported

    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA GPU here: compiling for cuda is allowed")
    result = run_cli("compile", "digits_resnet", "--device", "cuda", "-o", tmp_path / "gpu.pt2")
    assert result.exit_code == 1
    assert error_line(result.output) == ("Error: Cannot compile digits_resnet in fp32 for cuda: compiling for cuda "
                                         "needs a CUDA GPU, and torch sees none here.")
    if unsupported(Precision.FP16, Device.CPU) is None:
        pytest.skip("this CPU has FP16 kernels: FP16 compiles here")
    result = run_cli("compile", "digits_resnet", "--precision", "fp16", "-o", tmp_path / "half.pt2")
    assert result.exit_code == 1
    assert "in fp16 for cpu: this CPU has no FP16 kernels (AVX512-FP16 or AMX-FP16)" in error_line(result.output)
    assert not list(tmp_path.iterdir())


def test_bench_runs_the_package_beside_pytorch(package: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "bench.json"
    result = run_cli("bench", "digits_resnet", package, "--iters", "5", "--batch", "1,4", "--json", report)
    assert result.exit_code == 0, result.output
    rows = json.loads(report.read_text())["results"]
    ours = [r for r in rows if r["backend"] == BackendKind.AOTI]
    assert [r["batch"] for r in ours] == [1, 4]
    for row in ours:
        assert row["variant"] == "aoti-fp32 (model)" and row["precision"] == Precision.FP32
        assert row["artifact"] == str(package) and row["speedup_vs_torch_fp32"] > 0
        assert row["top1_agreement"] == 1.0 and row["cosine"] > 0.9999


def test_serve_loads_a_package_from_a_repository(package: Path, tmp_path: Path) -> None:
    from trtpipe.models.data import load_split
    from trtpipe.serve.options import ServeOptions
    from trtpipe.serve.repository.loading import close_repository, load_repository

    repository = tmp_path / "repo"
    copy_package(package, repository / "digits_aoti" / "1")
    broken = copy_package(package, repository / "digits_aoti_broken" / "1")
    data = bytearray(broken.read_bytes())
    data[-100] ^= 0x01  # one byte changed: not what its manifest describes
    broken.write_bytes(bytes(data))
    served = load_repository(repository, ServeOptions())
    try:
        entry = served["digits_aoti"]["1"]
        assert entry.ready and entry.model is not None and entry.model.kind is BackendKind.AOTI
        assert entry.max_batch_size == BATCH_RANGE[1]  # the package's range caps the batcher's batches
        images = load_split("digits", "eval").images[:3]
        assert entry.batcher is not None
        assert entry.batcher.predict([images])[0].argmax(1).shape == (3,)
        failed = served["digits_aoti_broken"]["1"]
        assert not failed.ready and "is not the file its manifest describes" in str(failed.error)
    finally:
        close_repository(served)


def test_export_triton_runs_a_package_through_the_python_backend(package: Path, tmp_path: Path) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from trtpipe import console
    from trtpipe.serve.options import ServeOptions
    from trtpipe.serve.repository.triton import export

    with console.recording_warnings():
        export({"digits_aoti": package}, tmp_path / "triton", ServeOptions())
    folder = tmp_path / "triton" / "digits_aoti"
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.backend == "python" and config.max_batch_size == BATCH_RANGE[1]
    assert config.parameters["trtpipe_artifact"].string_value == "model.pt2"
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    for name in ("model.pt2", "model.pt2.manifest.json", "model.py"):
        assert (folder / "1" / name).is_file()
    assert (folder / "1" / "model.pt2").read_bytes() == package.read_bytes()


def test_the_package_runs_as_numpy_in_numpy_out(package: Path) -> None:
    """Read-only and non-contiguous arrays (as a server's request bodies arrive) are fed as they are."""
    import trtpipe

    images = np.ascontiguousarray(np.zeros((4, 1, 32, 32), np.float32))
    images.flags.writeable = False
    strided = np.zeros((4, 1, 32, 64), np.float32)[..., ::2]
    with trtpipe.load(package) as model:
        np.testing.assert_array_equal(model.predict(images), model.predict(strided))


def test_verification_judges_every_case_against_the_precisions_tolerance(package: Path) -> None:
    """The check that guards the commit: a bound the package misses fails it, naming the case and the figures."""
    import trtpipe
    from trtpipe.comparison import Tolerance
    from trtpipe.compile.options import CompileOptions
    from trtpipe.compile.verify import tolerance_of, verify_package
    from trtpipe.models.loader import load_model
    from trtpipe.runtime.torch.backend import TorchBackend

    loaded = load_model("digits_resnet")
    assert tolerance_of(CompileOptions(precision="bf16")) == Tolerance(1e-2, 5e-2, 0.99)
    assert tolerance_of(CompileOptions(atol=0.5)) == Tolerance(0.5, 1e-4, 0.9999)
    with trtpipe.load(package) as model, TorchBackend(loaded.module, loaded.inputs) as reference:
        report = verify_package(reference, model.backend, loaded, BATCH_RANGE, Tolerance(0.0, 0.0, 1.0))
    assert [label for label, _, _ in report.cases][:3] == ["random batch of 1", "random batch of 2",
                                                           "random batch of 5"]
    assert report.dataset == "digits" and not report.passed
    assert report.failure_message("The compiled package").startswith(
        "The compiled package differs from PyTorch FP32 beyond tolerance on random batch of 1: max abs error ")
