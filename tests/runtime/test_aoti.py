"""AOTInductor packages through the runtime seam: loaded by trtpipe.load from the .pt2 alone, equal to PyTorch FP32,
held to their batch range, and refused in one line whenever the manifest does not vouch for them (native code)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trtpipe
from tests.compile.packages import BATCH_RANGE, copy_package, digits_package
from trtpipe.artifact.records.manifest import manifest_path
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.vocab import ArtifactKind, BackendKind, Device, Precision


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return digits_package(tmp_path_factory.getbasetemp())


def _digits_inputs(count: int) -> np.ndarray:
    from trtpipe.models.data import load_split

    return load_split("digits", "eval").images[:count]


def test_a_package_loads_without_the_model_and_computes_what_pytorch_does(package: Path) -> None:
    from trtpipe.models.loader import load_model
    from trtpipe.runtime.torch.backend import TorchBackend

    images = _digits_inputs(8)
    with trtpipe.load(package, threads=1) as model:
        assert model.kind is BackendKind.AOTI and model.precision is Precision.FP32
        assert [(t.name, t.dtype, t.shape) for t in model.inputs] == [("input", "float32", ("batch", 1, 32, 32))]
        got = model.predict(images)
    loaded = load_model("digits_resnet")
    expected = TorchBackend(loaded.module, loaded.inputs).run(images)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_the_manifest_records_what_the_package_is_and_how_it_was_verified(package: Path) -> None:
    import torch

    data = json.loads(manifest_path(package).read_text())
    artifact = data["artifact"]
    assert artifact["kind"] == ArtifactKind.AOTI and artifact["precision"] == Precision.FP32
    assert artifact["device"] == Device.CPU and artifact["task"] == "classify"
    assert artifact["sha256"] == sha256_file(package) and artifact["size_bytes"] == package.stat().st_size
    section = data["aotinductor"]
    assert section["batch_range"] == list(BATCH_RANGE) and section["channels_last"] is False
    assert section["torch"] == torch.__version__
    assert section["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert section["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["batch", 1, 32, 32]}]
    assert section["outputs"] == [{"name": "output", "dtype": "float32", "shape": ["batch", 10]}]
    verification = data["verification"]
    assert verification["passed"] and verification["cosine"] > 0.9999
    assert [case["inputs"] for case in verification["cases"]][:3] == [f"random batch of {b}" for b in (1, 2, 5)]
    assert verification["candidate_accuracy"] > 0.98  # the held-out digits, in chunks of at most 16
    assert data["source"]["weights_sha256"]


def test_every_batch_inside_the_range_runs_and_one_outside_is_refused_naming_it(package: Path) -> None:
    low, high = BATCH_RANGE
    with trtpipe.load(package) as model:
        for batch in (low, 7, high):
            assert model.predict(_digits_inputs(batch)).shape == (batch, 10)
        with pytest.raises(BadInput, match=rf"batch of {high + 1}; .* takes batches of {low}-{high} "):
            model.predict(_digits_inputs(high + 1))
        assert model.backend.max_batch == high


def test_a_package_changed_by_one_byte_is_refused(package: Path, tmp_path: Path) -> None:
    tampered = copy_package(package, tmp_path)
    data = bytearray(tampered.read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    with pytest.raises(BadInput, match=r"is not the file its manifest describes .* it is not loaded"):
        trtpipe.load(tampered)


def test_a_package_without_its_manifest_is_refused(package: Path, tmp_path: Path) -> None:
    alone = copy_package(package, tmp_path)
    manifest_path(alone).unlink()
    with pytest.raises(BadInput, match=r"has no manifest beside it \(model\.pt2\.manifest\.json\)"):
        trtpipe.load(alone)


def _edited(package: Path, folder: Path, edit: dict[str, object], section: str = "aotinductor") -> Path:
    copy = copy_package(package, folder)
    data = json.loads(manifest_path(copy).read_text())
    data[section].update(edit)
    manifest_path(copy).write_text(json.dumps(data))
    return copy


def test_a_package_of_another_torch_version_is_refused(package: Path, tmp_path: Path) -> None:
    other = _edited(package, tmp_path, {"torch": "2.0.0+cpu"})
    with pytest.raises(BadInput, match=r"compiled by torch 2\.0\.0\+cpu, and this is torch .*Compile it again here"):
        trtpipe.load(other)


def test_a_cuda_package_is_refused_where_torch_sees_no_gpu(package: Path, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA GPU here")
    cuda = _edited(package, tmp_path, {"device": str(Device.CUDA)}, section="artifact")
    with pytest.raises(BadInput, match=r"compiled for cuda and torch sees no CUDA GPU here"):
        trtpipe.load(cuda)


def test_a_package_for_a_cpu_with_more_than_this_one_is_refused(package: Path, tmp_path: Path) -> None:
    import torch

    # A later instruction set than this CPU's (one outside the known order where this CPU has the last of it).
    later = "AMX_FUTURE" if torch.backends.cpu.get_cpu_capability() == "AVX512" else "AVX512"
    other = _edited(package, tmp_path, {"cpu_capability": later})
    with pytest.raises(BadInput, match=rf"compiled for CPUs with {later}, and this CPU offers"):
        trtpipe.load(other)


def test_a_run_setting_the_backend_does_not_have_is_refused(package: Path) -> None:
    with pytest.raises(BadInput, match=r"The aoti backend has no setting optimization"):
        trtpipe.load(package, optimization="disable")


def test_an_fp32_package_runs_with_tf32_off_and_leaves_the_switches_as_it_found_them(package: Path) -> None:
    """PyTorch lets cuDNN convolutions use TF32 by default; an FP32 package's calls turn it off (on a GPU that is
    the difference between FP32 and TF32 arithmetic) and put the switches back after."""
    import torch

    from trtpipe.runtime.aoti.backend import fp32_math

    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        with fp32_math():
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
        with trtpipe.load(package, threads=1) as model:
            with model.backend._math():
                assert not torch.backends.cudnn.allow_tf32
            assert model.predict(_digits_inputs(2)).shape == (2, 10)
            assert model.backend.replays_cuda_graph(model.backend.feeds(_digits_inputs(2))) is None  # no GPU
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
