"""ONNX Runtime through IO binding: the code the CUDA provider runs with by default (device buffers, one CUDA graph
per batch shape) runs on the CPU provider too, where it is tested; the GPU test runs it on CUDA where one exists."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

from trtpipe.errors import BadInput
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.onnxruntime.binding import BoundSession
from trtpipe.runtime.onnxruntime.providers import with_run_settings, without_cuda_graph
from trtpipe.runtime.onnxruntime.settings import CudnnSearch
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import Device


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


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_provider(), reason="needs a CUDA GPU and onnxruntime-gpu's CUDA provider")
def test_cuda_graphs_of_more_shapes_than_the_cache_holds_each_answer_for_their_own(digits_onnx: Path) -> None:
    """On CUDA, where a reused graph id would replay another shape's graph and leave this shape's outputs unwritten."""
    providers = (("CUDAExecutionProvider", {"use_tf32": 0}),)
    with OnnxRuntimeBackend(digits_onnx, RunOptions(providers=providers, io_binding=False)) as plain, \
            OnnxRuntimeBackend(digits_onnx, RunOptions(providers=providers, cuda_graph=True)) as graphed:
        assert graphed._bound is not None
        graphed._bound.max_shapes = 2
        for step, batch in enumerate((1, 2, 3, 4, 1, 2, 3, 4)):
            for seed in (step, step + 100):  # twice per shape: the second run replays the captured graph
                x = _images(batch, seed)
                np.testing.assert_allclose(graphed.run(x)[0], plain.run(x)[0], rtol=1e-4, atol=1e-4)
        assert len(set(graphed._bound.graph_ids().values())) == 2


def test_every_shape_keeps_a_graph_id_of_its_own_beyond_the_caches_capacity(digits_onnx: Path) -> None:
    """More shapes than the cache holds: each shape gets an id no other shape ever had (ONNX Runtime replays an id
    it has captured, so a reused id would replay another shape's graph), the dropped shapes' graphs are released,
    and every output is its own shape's."""
    with OnnxRuntimeBackend(digits_onnx) as plain:
        cache = BoundSession(plain.session, Device.CPU, graphs=True, max_shapes=3)
        seen: dict[int, int] = {}  # graph id -> the batch it was given to
        for step, batch in enumerate((1, 2, 3, 4, 5, 6, 1, 2)):
            x = _images(batch, step)
            np.testing.assert_array_equal(cache.run({"input": x})[0], plain.run(x)[0])
            ids = cache.graph_ids()
            assert len(ids) <= 3 and len(set(ids.values())) == len(ids)
            graph_id = ids[(("input", x.shape),)]
            assert graph_id not in seen, f"batch {batch} was given graph {graph_id}, batch {seen.get(graph_id)}'s"
            seen[graph_id] = batch
        assert sorted(seen) == list(range(1, 9))  # never 0: an unset gpu_graph_id is 0
        assert cache.released_graphs == [1, 2, 3, 4, 5]  # the oldest shapes' graphs, in the order dropped
        cache.close()
        assert cache.graph_ids() == {} and cache.released_graphs == [1, 2, 3, 4, 5, 6, 7, 8]


def test_cuda_graph_without_io_binding_is_refused_in_one_line(digits_onnx: Path) -> None:
    with pytest.raises(BadInput, match=r"cuda_graph setting needs io_binding .* pass cuda_graph=False"):
        OnnxRuntimeBackend(digits_onnx, RunOptions(cuda_graph=True, io_binding=False))


def test_the_graph_less_fallback_keeps_the_layout_and_search_it_was_given() -> None:
    settings = RunOptions(cuda_graph=True, prefer_nhwc=True, cudnn_search="heuristic")
    asked = with_run_settings((("CUDAExecutionProvider", {"use_tf32": 0}), "CPUExecutionProvider"), settings)
    name, options = without_cuda_graph(asked)[0]
    assert name == "CUDAExecutionProvider" and options["enable_cuda_graph"] == "0"
    assert options["prefer_nhwc"] == "1" and options["cudnn_conv_algo_search"] == "HEURISTIC"
    assert options["use_tf32"] == 0 and without_cuda_graph(asked)[1] == "CPUExecutionProvider"


def test_close_lets_the_session_and_its_bound_buffers_go(digits_onnx: Path) -> None:
    backend = OnnxRuntimeBackend(digits_onnx, RunOptions(io_binding=True))
    backend.run(_images(2, 0))
    session = weakref.ref(backend.session)
    backend.close()
    gc.collect()
    assert session() is None, "the closed backend still holds its session (and its arena and graphs)"


def test_load_maps_device_cuda_to_the_cuda_provider_and_refuses_a_contradiction(digits_onnx: Path) -> None:
    import trtpipe

    with pytest.raises(BadInput, match="Requested ONNX Runtime providers CUDAExecutionProvider"):
        trtpipe.load(digits_onnx, device="cuda")  # this ONNX Runtime has no CUDA provider: named, not ignored
    with pytest.raises(BadInput, match=r"device=cpu and providers CUDAExecutionProvider disagree"):
        trtpipe.load(digits_onnx, device="cpu", providers=("CUDAExecutionProvider",))
    with pytest.raises(BadInput, match=r"runs on cpu \(openvino\), not cuda"):
        trtpipe.load(digits_onnx, runtime="openvino", device="cuda")
    with trtpipe.load(digits_onnx, device="cpu") as model:
        assert model.predict(_images(2, 0)).shape == (2, 10)


LOAD_WITHOUT_TORCH = """
import sys
import numpy as np
import trtpipe
device = sys.argv[2]
with trtpipe.load(sys.argv[1], device=device) as model:
    out = model.predict(np.zeros((2, 1, 32, 32), np.float32))
    print(model.backend.session.get_providers()[0], out.shape, "torch" in sys.modules)
"""


def _load_in_a_fresh_process(path: Path, device: str) -> str:
    result = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_TORCH, str(path), device], capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_load_runs_an_onnx_file_in_a_process_that_never_imports_torch(digits_onnx: Path) -> None:
    assert _load_in_a_fresh_process(digits_onnx, "cpu") == "CPUExecutionProvider (2, 10) False"


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_provider(), reason="needs a CUDA GPU and onnxruntime-gpu's CUDA provider")
def test_load_on_cuda_in_a_fresh_process_that_never_imported_torch(digits_onnx: Path) -> None:
    """ONNX Runtime's CUDA provider finds cuDNN and cuBLAS only once they are loaded: torch does that, and in a
    process without torch trtpipe preloads them (onnxruntime.preload_dlls), else the session falls back to the CPU."""
    assert _load_in_a_fresh_process(digits_onnx, "cuda") == "CUDAExecutionProvider (2, 10) False"
