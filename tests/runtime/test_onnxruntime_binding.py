"""ONNX Runtime through IO binding: the code the CUDA provider runs with by default (device buffers, one CUDA graph
per batch shape) runs on the CPU provider too, where it is tested; the GPU test runs it on CUDA where one exists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtpipe.errors import BadInput
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.onnxruntime.binding import BoundSession
from trtpipe.runtime.onnxruntime.providers import with_run_settings
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import CudnnSearch, Device


def _images(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 1, 32, 32), dtype=np.float32)


def test_io_binding_gives_the_plain_runs_outputs(digits_onnx: Path) -> None:
    with OnnxRuntimeBackend(digits_onnx) as plain, \
            OnnxRuntimeBackend(digits_onnx, RunOptions(io_binding=True)) as bound:
        assert bound.io_binding and not plain.io_binding
        for batch in (1, 7, 32):
            x = _images(batch, batch)
            np.testing.assert_array_equal(bound.run(x)[0], plain.run(x)[0])


def test_fixed_buffers_per_shape_are_refilled_and_never_hand_out_their_memory(digits_onnx: Path) -> None:
    """What a CUDA graph needs (a buffer set per input shape, refilled in place), on the CPU: shapes taken in turn
    keep their own buffers, and an output a caller holds is not overwritten by the next call."""
    with OnnxRuntimeBackend(digits_onnx) as plain:
        fixed = BoundSession(plain.session, Device.CPU, fixed=True)
        held = []
        for batch, seed in ((4, 0), (2, 1), (4, 2), (2, 3)):
            x = _images(batch, seed)
            out = fixed.run({"input": x})[0]
            np.testing.assert_array_equal(out, plain.run(x)[0])
            held.append((out.copy(), out))
        assert len(fixed._shapes) == 2
        assert all(np.array_equal(copy, out) for copy, out in held)  # earlier results unchanged by later calls


def test_cuda_graph_needs_a_gpu_provider(digits_onnx: Path) -> None:
    with pytest.raises(BadInput, match="cuda_graph setting needs a GPU provider"):
        OnnxRuntimeBackend(digits_onnx, RunOptions(cuda_graph=True))


def test_run_settings_become_the_cuda_providers_options() -> None:
    settings = RunOptions(cuda_graph=True, prefer_nhwc=True, cudnn_search="heuristic")
    assert settings.cudnn_search is CudnnSearch.HEURISTIC
    providers = with_run_settings((("CUDAExecutionProvider", {"use_tf32": 0}), "CPUExecutionProvider"), settings)
    name, options = providers[0]
    assert name == "CUDAExecutionProvider" and options["use_tf32"] == 0
    assert options["enable_cuda_graph"] == "1" and options["prefer_nhwc"] == "1"
    assert options["cudnn_conv_algo_search"] == "HEURISTIC" and providers[1] == "CPUExecutionProvider"
    with pytest.raises(BadInput, match="io_binding must be true or false"):
        RunOptions(io_binding="yes")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="cudnn_search"):
        RunOptions(cudnn_search="fastest")  # type: ignore[arg-type]


def _cuda_provider() -> bool:
    import onnxruntime
    import torch

    return torch.cuda.is_available() and "CUDAExecutionProvider" in onnxruntime.get_available_providers()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_provider(), reason="needs a CUDA GPU and onnxruntime-gpu's CUDA provider")
def test_cuda_graph_per_batch_shape_matches_the_plain_cuda_run(digits_onnx: Path) -> None:
    providers = (("CUDAExecutionProvider", {"use_tf32": 0}),)
    with OnnxRuntimeBackend(digits_onnx, RunOptions(providers=providers, io_binding=False)) as plain, \
            OnnxRuntimeBackend(digits_onnx, RunOptions(providers=providers, cuda_graph=True)) as graphed:
        assert graphed.replays_graph and graphed.io_binding and not graphed.thread_safe
        for batch, seed in ((4, 0), (16, 1), (4, 2), (16, 3), (4, 4)):  # shapes in turn: each replays its own graph
            x = _images(batch, seed)
            np.testing.assert_allclose(graphed.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-4)
        call = graphed.device_resident_call({"input": _images(4, 5)})
        assert call is not None
        call()
