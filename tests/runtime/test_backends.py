"""The runtime seam: both backends agree, and misuse gets a message naming the tensor."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from trtpipe.errors import BadInput
from trtpipe.models.loader import load_model
from trtpipe.runtime import artifact_kind, open_artifact
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.torch.backend import TorchBackend


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((4, 1, 32, 32), dtype=np.float32)


def test_torch_and_onnxruntime_backends_agree(digits_onnx: Path, batch: np.ndarray) -> None:
    loaded = load_model("digits_resnet")
    reference = TorchBackend(loaded.module, loaded.sample_shape)
    with open_artifact(digits_onnx, threads=1) as candidate:
        assert candidate.kind == "onnxruntime" and candidate.precision == "fp32"
        assert candidate.inputs[0].name == "input" and candidate.inputs[0].shape == ("batch", 1, 32, 32)
        assert [o.name for o in candidate.outputs] == ["output"]
        np.testing.assert_allclose(candidate.run(batch)[0], reference.run(batch)[0], atol=1e-4)
        np.testing.assert_allclose(candidate.run({"input": batch})[0], candidate.run([batch])[0])


def test_wrong_dtype_shape_and_names_are_named(digits_onnx: Path, batch: np.ndarray) -> None:
    with OnnxRuntimeBackend(digits_onnx) as backend:
        with pytest.raises(BadInput, match=r"Input .input. has dtype float64; the model expects float32"):
            backend.run(batch.astype(np.float64))
        with pytest.raises(BadInput, match=r"Input 'input' has shape 4x3x32x32; the model expects batchx1x32x32"):
            backend.run(np.zeros((4, 3, 32, 32), np.float32))
        with pytest.raises(BadInput, match=r"missing \['input'\], unexpected \['image'\]"):
            backend.run({"image": batch})


def test_optimisation_level_and_unknown_provider(digits_onnx: Path, batch: np.ndarray) -> None:
    with OnnxRuntimeBackend(digits_onnx, optimization="disable") as plain, OnnxRuntimeBackend(digits_onnx) as fused:
        np.testing.assert_allclose(plain.run(batch)[0], fused.run(batch)[0], atol=1e-4)
    with pytest.raises(BadInput, match=r"Requested ONNX Runtime providers NoSuchExecutionProvider; available "
                                       r"providers are .*CPUExecutionProvider"):
        OnnxRuntimeBackend(digits_onnx, providers=["NoSuchExecutionProvider"])


def test_artifact_kinds() -> None:
    assert artifact_kind(Path("m.onnx")).backend == "onnxruntime"
    assert artifact_kind(Path("m.plan")) == artifact_kind(Path("m.engine")) == "tensorrt_engine"
    with pytest.raises(BadInput, match=r"trtpipe runs \.onnx, \.plan, \.engine artifacts"):
        artifact_kind(Path("m.pt"))


def test_providers_for_each_execution_choice() -> None:
    from trtpipe.runtime.onnxruntime.providers import check_active, provider_list
    from trtpipe.vocab import OnnxExecution

    assert provider_list(OnnxExecution.CPU) == ["CPUExecutionProvider"]
    cuda = provider_list(OnnxExecution.CUDA)
    assert cuda[0] == ("CUDAExecutionProvider", {"use_tf32": 0})  # FP32 rows compute in FP32
    trt = provider_list(OnnxExecution.TENSORRT, trt_workspace=2**30, trt_profile=("input:1x3", "input:8x3",
                                                                                  "input:64x3"))
    name, options = trt[0]
    assert name == "TensorrtExecutionProvider" and options["trt_max_workspace_size"] == 2**30
    assert options["trt_profile_max_shapes"] == "input:64x3"
    with pytest.raises(BadInput, match=r"did not use CUDAExecutionProvider.*active providers: CPUExecutionProvider"):
        check_active(cuda, ["CPUExecutionProvider"], "model.onnx")
    check_active(cuda, ["CUDAExecutionProvider", "CPUExecutionProvider"], "model.onnx")


def test_chunked_runs_stay_within_a_backends_max_batch(digits_onnx: Path) -> None:
    from trtpipe.models.data import load_split
    from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend

    class ProfileLimited(OnnxRuntimeBackend):
        """ONNX Runtime standing in for an engine whose profile stops at batch 16."""

        seen: ClassVar[list[int]] = []

        @property
        def max_batch(self) -> int | None:
            return 16

        def _run(self, feeds):  # type: ignore[no-untyped-def]
            self.seen.append(len(next(iter(feeds.values()))))
            return super()._run(feeds)

    images = load_split("digits", "eval").images[:100]
    with ProfileLimited(digits_onnx) as backend:
        out = backend.run_chunked(images, 64)
    assert out.shape == (100, 10) and max(ProfileLimited.seen) == 16 and sum(ProfileLimited.seen) == 100
