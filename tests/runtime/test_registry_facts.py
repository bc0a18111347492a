"""What the other layers ask the registry instead of naming a backend (issue #51 item 2): which row is the eager
reference, which packages are optional, the settings that run an ONNX file one way, what a server asks of each
backend, and the probe session and in-memory model that optimize and debug run on. Each answer comes from the
backends' entries, and each is checked against what the backend itself does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tests.builders import constant, x_to_y
from trtpipe.bench.environment import OPTIONAL_PACKAGES
from trtpipe.errors import BadInput
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import (
    BACKENDS,
    check_execution,
    execution_settings,
    gpu_run_settings,
    is_eager,
    open_model,
    open_module,
    optional_packages,
    probe_session,
)
from trtpipe.serve.repository.serving import serving_options
from trtpipe.vocab import BackendKind, Device, OnnxExecution


def _double_then_add_one() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "two"], ["doubled"]), helper.make_node("Add", ["doubled", "one"], ["y"])]
    return x_to_y(nodes, [constant(2.0, "two"), constant(1.0, "one")], ["n", 3], ["n", 3])


def test_the_eager_reference_is_the_one_entry_that_says_so_by_kind_or_by_its_name_in_a_report() -> None:
    assert [kind for kind, entry in BACKENDS.items() if entry.eager] == [BackendKind.TORCH]
    assert is_eager(BackendKind.TORCH) and is_eager("torch")  # a row's backend, or its name in a report's JSON
    assert not any(is_eager(name) for name in ("onnxruntime", "aoti", "tensorrt", "pytorch", "", None))


def test_optional_packages_are_the_optional_backends_libraries_each_with_its_peers_tools() -> None:
    assert optional_packages() == OPTIONAL_PACKAGES == ("openvino", "nncf", "tensorrt")
    assert any("cudnn.benchmark on" in words for words in gpu_run_settings())  # PyTorch's GPU rows, its own words


def test_an_execution_settings_are_its_backends_providers_over_the_callers_settings() -> None:
    base = RunOptions(threads=2, spinning=False)
    cuda = execution_settings(OnnxExecution.CUDA, base)
    assert cuda.threads == 2 and not cuda.spinning
    assert [p if isinstance(p, str) else p[0] for p in cuda.providers] == list(OnnxExecution.CUDA.providers)
    tensorrt = execution_settings(OnnxExecution.TENSORRT, trt_profile=("x:1x3", "x:4x3", "x:8x3"), workspace=2**20)
    first = tensorrt.providers[0]
    assert isinstance(first, tuple) and first[1]["trt_profile_opt_shapes"] == "x:4x3"
    assert first[1]["trt_max_workspace_size"] == 2**20
    assert execution_settings(OnnxExecution.OPENVINO, base) == base  # OpenVINO has no providers to choose
    check_execution(OnnxExecution.CPU)  # the CPU provider is always here
    check_execution(OnnxExecution.OPENVINO)  # nothing of ONNX Runtime's to check


def test_a_gpu_execution_whose_provider_is_missing_is_refused_in_one_line() -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("the CUDA provider is installed here: nothing to refuse")
    with pytest.raises(BadInput, match="Requested ONNX Runtime providers CUDAExecutionProvider"):
        check_execution(OnnxExecution.CUDA)


@pytest.mark.parametrize("device", [Device.CPU, Device.CUDA])
def test_a_server_asks_each_backend_only_for_settings_it_has(device: Device) -> None:
    for kind, entry in BACKENDS.items():
        options = serving_options(kind, 3, device)
        settings = options.only(entry.settings, kind)  # would raise on another backend's setting
        assert settings.threads == 3
    onnxruntime = serving_options(BackendKind.ONNXRUNTIME, 3, device)
    assert not onnxruntime.spinning  # a server's idle pool sleeps
    assert onnxruntime.release_memory is (device is Device.CPU)  # on a GPU the arena is kept for graph replays
    assert bool(onnxruntime.providers) is (device is Device.CUDA)
    assert serving_options(BackendKind.OPENVINO, 3, device) == RunOptions(threads=3)


def test_the_probe_session_exposes_tensors_and_rounds_fp16_as_a_gpu_writes_it() -> None:
    session = probe_session(_double_then_add_one(), exposing=["doubled"])
    y, doubled = session.run(None, {"x": np.ones((1, 3), np.float32)})
    np.testing.assert_array_equal(doubled, 2.0)
    np.testing.assert_array_equal(y, 3.0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 3])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 3])
    nodes = [helper.make_node("Mul", ["x", "x"], ["square"]), helper.make_node("Div", ["square", "x"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "square", [x], [out]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feed = {"x": np.full((1, 3), 300, np.float16)}  # 300² = 90,000 is past FP16's 65,504
    assert np.isfinite(probe_session(model, silent=True).run(None, feed)[0]).all()  # the CPU's FP32 chain
    assert np.isinf(probe_session(model, round_fp16=True).run(None, feed)[0]).all()  # what a GPU computes


def test_a_model_in_memory_and_a_live_module_open_on_their_entries_backends() -> None:
    with open_model(_double_then_add_one(), RunOptions(threads=1)) as backend:
        assert backend.kind is BackendKind.ONNXRUNTIME and backend.path is None
        np.testing.assert_array_equal(backend.run(np.ones((2, 3), np.float32))[0], 3.0)
    module = torch.nn.Linear(3, 2).eval()
    with open_module(module, (3,), threads=1) as backend:
        assert backend.kind is BackendKind.TORCH
        x = np.ones((2, 3), np.float32)
        expected = module(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(backend.run(x)[0], expected, rtol=1e-6)
