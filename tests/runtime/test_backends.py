"""The runtime seam: both backends agree, and misuse gets a message naming the tensor."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import trtpipe
from trtpipe.errors import BadInput
from trtpipe.models.loader import load_model
from trtpipe.runtime import RunOptions, artifact_kind, describe_artifact, open_artifact
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.onnxruntime.settings import GraphOptimization
from trtpipe.runtime.torch.backend import TorchBackend
from trtpipe.vocab import ArtifactKind, BackendKind, Precision


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((4, 1, 32, 32), dtype=np.float32)


def test_torch_and_onnxruntime_backends_agree(digits_onnx: Path, batch: np.ndarray) -> None:
    loaded = load_model("digits_resnet")
    reference = TorchBackend(loaded.module, loaded.sample_shape)
    with open_artifact(digits_onnx, RunOptions(threads=1)) as candidate:
        assert candidate.kind is BackendKind.ONNXRUNTIME and candidate.precision is Precision.FP32
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
    plain_options = RunOptions(optimization=GraphOptimization.DISABLE)
    with OnnxRuntimeBackend(digits_onnx, plain_options) as plain, OnnxRuntimeBackend(digits_onnx) as fused:
        np.testing.assert_allclose(plain.run(batch)[0], fused.run(batch)[0], atol=1e-4)
    with pytest.raises(BadInput, match=r"Requested ONNX Runtime providers NoSuchExecutionProvider; available "
                                       r"providers are .*CPUExecutionProvider"):
        OnnxRuntimeBackend(digits_onnx, RunOptions(providers=("NoSuchExecutionProvider",)))


def test_backends_refuse_settings_they_do_not_have(digits_onnx: Path) -> None:
    """A setting a backend would ignore makes a row or a server run otherwise than asked: refused, named."""
    with pytest.raises(BadInput, match=r"The onnxruntime backend has no setting hint, spin_wait \(its settings: "
                                       r"cuda_graph, cudnn_search, io_binding, optimization, prefer_nhwc, "
                                       r"providers, release_memory, round_fp16, spinning, threads\)"):
        open_artifact(digits_onnx, RunOptions(spin_wait=True, hint="throughput"))
    with pytest.raises(BadInput, match=r"Unknown run setting trheads: the settings are threads, "):
        trtpipe.load(digits_onnx, trheads=2)
    with pytest.raises(BadInput, match=r"Run setting optimization is 'fastest': choose from disable, basic"):
        RunOptions(optimization="fastest")
    assert RunOptions(optimization="disable").optimization is GraphOptimization.DISABLE  # typed at the edge


def test_one_description_of_an_artifact(digits_onnx: Path) -> None:
    """Precision, IO and run settings are read once, from the manifest (or the graph), for every consumer."""
    described = describe_artifact(digits_onnx)
    assert described.kind is ArtifactKind.ONNX and described.precision is Precision.FP32
    assert [(t.name, t.dtype, t.shape) for t in described.inputs] == [("input", "float32", ("batch", 1, 32, 32))]
    assert [t.name for t in described.outputs] == ["output"] and not described.simulated
    with open_artifact(described) as backend:  # the description itself opens, without reading the file again
        assert backend.inputs[0].name == described.inputs[0].name and backend.precision is described.precision


def test_artifact_kinds() -> None:
    assert artifact_kind(Path("m.onnx")).backend == "onnxruntime"
    assert artifact_kind(Path("m.plan")) == artifact_kind(Path("m.engine")) == "tensorrt_engine"
    with pytest.raises(BadInput, match=r"trtpipe runs \.onnx, \.plan, \.engine, \.pt2 artifacts"):
        artifact_kind(Path("m.pt"))


def test_providers_for_each_execution_choice() -> None:
    from trtpipe.runtime.onnxruntime.installation import check_active
    from trtpipe.runtime.onnxruntime.providers import provider_list
    from trtpipe.vocab import OnnxExecution

    assert provider_list(OnnxExecution.CPU) == ["CPUExecutionProvider"]
    cuda = provider_list(OnnxExecution.CUDA)
    assert cuda[0] == ("CUDAExecutionProvider", {"use_tf32": 0})  # FP32 rows compute in FP32
    trt = provider_list(OnnxExecution.TENSORRT, trt_profile=("input:1x3", "input:8x3", "input:64x3"))
    name, options = trt[0]
    assert name == "TensorrtExecutionProvider" and options["trt_profile_min_shapes"] == "input:1x3"
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
        (out,) = backend.run_chunked(images, 64)
    assert out.shape == (100, 10) and max(ProfileLimited.seen) == 16 and sum(ProfileLimited.seen) == 100
