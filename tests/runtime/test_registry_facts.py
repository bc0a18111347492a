"""What the other layers ask the registry instead of naming a backend (issue #51 item 2): which row is the eager
reference, which packages are optional, the settings that run an ONNX file one way, what a server asks of each
backend, and the probe session and in-memory model that optimize and debug run on. Each answer comes from the
backends' entries, and each is checked against what the backend itself does."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tests.builders import constant, onnx_model, tensor, x_to_y
from trtpipe.artifact.description import ArtifactDescription
from trtpipe.bench.environment import OPTIONAL_PACKAGES
from trtpipe.bench.options import BenchOptions
from trtpipe.errors import BadInput, TrtpipeError
from trtpipe.runtime.capabilities import QuantizesAsPeer, RunsModules, TakesBenchFlags
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import (
    BACKENDS,
    ability,
    backend_class,
    bench_settings,
    check_execution,
    compute_capability,
    describe_unrecorded,
    execution_of,
    execution_settings,
    failed_node,
    gpu_execution,
    gpu_run_settings,
    is_eager,
    module_output_names,
    open_model,
    open_module,
    open_trusted,
    optional_packages,
    peer_quantizers,
    probe_session,
    refused_by_runtime,
    runs_on_gpu,
    unrecorded_label,
    who_can,
)
from trtpipe.serve.repository.serving import serving_options
from trtpipe.vocab import ArtifactKind, BackendKind, Device, OnnxExecution, Precision


def _double_then_add_one() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "two"], ["doubled"]), helper.make_node("Add", ["doubled", "one"], ["y"])]
    return x_to_y(nodes, [constant(2.0, "two"), constant(1.0, "one")], ["n", 3], ["n", 3])


def test_the_eager_reference_is_the_one_entry_that_says_so_by_kind_or_by_its_name_in_a_report() -> None:
    assert who_can(RunsModules) == (BackendKind.TORCH,)
    assert is_eager(BackendKind.TORCH) and is_eager("torch")  # a row's backend, or its name in a report's JSON
    assert not any(is_eager(name) for name in ("onnxruntime", "aoti", "tensorrt", "pytorch", "", None))


def test_optional_packages_are_the_optional_backends_libraries_each_with_its_peers_tools() -> None:
    assert optional_packages() == OPTIONAL_PACKAGES
    for entry in BACKENDS.values():  # each optional backend's library, followed by its peers' tools
        if entry.optional:
            at = OPTIONAL_PACKAGES.index(entry.library)
            tools = entry.ability(QuantizesAsPeer).tools if entry.offers(QuantizesAsPeer) else ()
            assert OPTIONAL_PACKAGES[at + 1:at + 1 + len(tools)] == tools
        else:
            assert entry.library not in OPTIONAL_PACKAGES
    assert {"openvino", "nncf", "tensorrt"} <= set(OPTIONAL_PACKAGES)  # the shipped ones
    assert any("cudnn.benchmark on" in words for words in gpu_run_settings())  # PyTorch's GPU rows, its own words


def _conv() -> onnx.ModelProto:
    """One 3x3 convolution: the smallest graph both peers quantize (weights per channel, activations per tensor)."""
    weights = constant(np.random.default_rng(0).standard_normal((2, 1, 3, 3)), "w")
    return onnx_model([helper.make_node("Conv", ["x", "w"], ["y"])], [weights], [tensor("x", ["n", 1, 4, 4])],
                      [tensor("y", ["n", 2, 2, 2])])


def test_the_peer_quantizers_are_listed_in_registry_order_each_with_the_backend_its_file_runs_on(
        tmp_path: Path) -> None:
    """bench --peers asks the registry: ONNX Runtime's quantize_static (its file run on ONNX Runtime), then NNCF
    (its IR run on OpenVINO); each folder's quantizer really quantizes and its file opens on that backend."""
    peers = list(peer_quantizers())
    assert [kind for kind, _ in peers] == [BackendKind.ONNXRUNTIME, BackendKind.OPENVINO]
    fp32 = tmp_path / "conv.onnx"
    onnx.save(_conv(), str(fp32))
    calibration = np.random.default_rng(1).standard_normal((20, 1, 4, 4)).astype(np.float32)  # 2 reader batches
    with open_model(_conv(), RunOptions(threads=1)) as backend:
        expected = backend.run(calibration[:2])[0]
    [(onnxruntime, quantize_static), (openvino, nncf)] = peers
    label, tool, path = quantize_static(fp32, calibration, tmp_path)
    assert (label, tool, path) == ("peer: onnxruntime-int8 (quantize_static U8S8)", "onnxruntime.quantization",
                                   tmp_path / "onnxruntime_u8s8.onnx")
    assert {"QuantizeLinear", "DequantizeLinear"} <= {node.op_type for node in onnx.load(str(path)).graph.node}
    with backend_class(onnxruntime)(path, RunOptions(threads=1)) as backend:
        _close_but_quantized(backend.run(calibration[:2])[0], expected)
    pytest.importorskip("nncf", reason="NNCF is not installed: its peer says so and is skipped")
    pytest.importorskip("openvino", reason="OpenVINO is not installed: its peer says so and is skipped")
    made = nncf(fp32, calibration, tmp_path)
    assert made is not None
    label, tool, path = made
    assert label == "peer: openvino-int8 (NNCF PTQ)" and tool.startswith("nncf ")
    assert path == tmp_path / "openvino_nncf_int8.xml" and path.with_suffix(".bin").is_file()
    with backend_class(openvino)(path, RunOptions(threads=1)) as backend:
        _close_but_quantized(backend.run(calibration[:2])[0], expected)


def _close_but_quantized(actual: np.ndarray, expected: np.ndarray) -> None:
    """INT8 outputs: not the FP32 ones, yet close for most elements (NNCF's default ranges clip the inputs'
    outliers, so a few elements may be far off)."""
    assert actual.shape == expected.shape and not np.array_equal(actual, expected)
    assert np.median(np.abs(actual - expected)) < 0.05 * np.abs(expected).max()


def test_an_execution_settings_are_its_backends_providers_over_the_callers_settings() -> None:
    base = RunOptions(threads=2, spinning=False)
    cuda = execution_settings(OnnxExecution.CUDA, base)
    assert cuda.threads == 2 and not cuda.spinning
    assert cuda.provider_names == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert execution_of(cuda) is OnnxExecution.CUDA and runs_on_gpu(cuda)
    # the first provider decides, as ONNX Runtime places each node on the first that has its kernel
    assert execution_of(RunOptions(providers=("CPUExecutionProvider", "CUDAExecutionProvider"))) is OnnxExecution.CPU
    assert not runs_on_gpu(RunOptions()) and execution_of(RunOptions()) is OnnxExecution.default()
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


def test_where_a_backend_runs_is_its_entrys_fact_and_a_gpu_is_asked_for_by_its_executions() -> None:
    """trtpipe.load's device check reads these: an engine runs on the GPU, ONNX Runtime's providers choose."""
    shipped = {BackendKind.TORCH: Device.CPU, BackendKind.ONNXRUNTIME: None, BackendKind.OPENVINO: Device.CPU,
               BackendKind.TENSORRT: Device.CUDA, BackendKind.AOTI: Device.CPU}
    assert all(BACKENDS[kind].runs_on == device for kind, device in shipped.items())
    assert gpu_execution(BackendKind.ONNXRUNTIME) is OnnxExecution.CUDA
    with pytest.raises(BadInput, match="openvino has no way to run on a GPU"):
        gpu_execution(BackendKind.OPENVINO)


def test_the_gpus_compute_capability_is_read_by_the_backend_that_records_it() -> None:
    with pytest.raises(TypeError, match="onnxruntime does not declare ReadsGpu"):
        compute_capability(BackendKind.ONNXRUNTIME)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: nothing to read")
    major, minor = torch.cuda.get_device_capability()
    assert compute_capability(BackendKind.AOTI) == f"{major}.{minor}"


def test_a_modules_outputs_are_named_as_the_eager_backend_flattens_them() -> None:
    pair = collections.namedtuple("pair", ["logits", "boxes"])
    t = torch.zeros(1)
    assert module_output_names(t) == ["output"]
    assert module_output_names((t, [t, t])) == ["output_0", "output_1_0", "output_1_1"]
    assert module_output_names({"a": t, "b": pair(t, t)}) == ["a", "b_logits", "b_boxes"]
    with open_module(_TwoHeads(), (3,)) as backend:  # the names a live module's backend reports
        assert [o.name for o in backend.outputs] == module_output_names(_TwoHeads()(torch.zeros(1, 3)))


class _TwoHeads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scores": x * 2, "extra": x + 1}


def _gather_refusal() -> Exception:
    """ONNX Runtime's own error for an index out of a Gather's table: the request's data refused."""
    data = helper.make_tensor("table", TensorProto.FLOAT, [10, 2], [0.0] * 20)
    indices = helper.make_tensor_value_info("i", TensorProto.INT64, [1])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    graph = helper.make_graph([helper.make_node("Gather", ["table", "i"], ["y"], name="lookup")], "gather",
                              [indices], [out], initializer=[data])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    try:
        probe_session(model, silent=True).run(None, {"i": np.array([100], np.int64)})
    except Exception as error:  # onnxruntime's InvalidArgument
        return error
    raise AssertionError("ONNX Runtime ran a Gather out of its table")


def test_a_runtimes_refusal_of_the_data_and_its_failing_node_are_read_by_its_folder() -> None:
    error = _gather_refusal()
    assert refused_by_runtime(error)
    where, rest = failed_node(str(error).strip().splitlines()[0])
    assert where == "Gather node 'lookup': " and "ONNXRuntimeError" not in rest and "out of" in rest
    assert not refused_by_runtime(ValueError("cannot reshape array"))  # not a runtime's: the model's own failure
    assert failed_node("cannot reshape array") == ("", "cannot reshape array")
    assert failed_node("[ONNXRuntimeError] : 1 : FAIL : bad model") == ("", "bad model")


def test_benchs_run_flags_go_only_to_the_backend_that_declares_them() -> None:
    """--cuda-graph and --spin-wait are TensorRT's: ONNX Runtime's cuda_graph, a setting of the same name, is its
    tuning's choice, so a filter by setting name would hand it bench's flag (on by default)."""
    assert ability(BackendKind.TENSORRT, TakesBenchFlags).names == ("cuda_graph", "spin_wait")
    flags = BenchOptions(cuda_graph=True, spin_wait=True)
    tensorrt = bench_settings(BackendKind.TENSORRT, RunOptions(threads=2), flags)
    assert tensorrt == RunOptions(threads=2, cuda_graph=True, spin_wait=True)
    assert tensorrt.only(BACKENDS[BackendKind.TENSORRT].settings, BackendKind.TENSORRT).spin_wait
    assert not bench_settings(BackendKind.TENSORRT, RunOptions(), BenchOptions(cuda_graph=False)).cuda_graph
    for kind in (kind for kind in BACKENDS if kind not in who_can(TakesBenchFlags)):
        assert bench_settings(kind, RunOptions(threads=2), flags) == RunOptions(threads=2)


def test_a_file_without_its_record_is_described_and_opened_only_on_the_users_trust(tmp_path: Path) -> None:
    engine = tmp_path / "from_trtexec.plan"
    engine.write_bytes(b"a plan from elsewhere")
    with pytest.raises(BadInput, match=r"has no metadata sidecar .* pass --trust-engine"):
        describe_unrecorded(ArtifactKind.TENSORRT_ENGINE, engine, trusted=False)
    trusted = describe_unrecorded(ArtifactKind.TENSORRT_ENGINE, engine, trusted=True)
    assert trusted.kind is ArtifactKind.TENSORRT_ENGINE and trusted.engine is None
    assert trusted.size_bytes == len(b"a plan from elsewhere") and unrecorded_label(trusted) == "trusted"
    try:  # past the sidecar check: what stops it here is TensorRT, the GPU, or the bytes themselves
        with open_trusted(trusted):
            pass
        raise AssertionError("TensorRT deserialised a file that is no engine")
    except TrtpipeError as error:
        assert "sidecar" not in str(error)
    onnx_file = tmp_path / "m.onnx"
    onnx.save(_double_then_add_one(), onnx_file)
    with pytest.raises(TypeError, match="onnxruntime opens only files with their record"):
        describe_unrecorded(ArtifactKind.ONNX, onnx_file, trusted=True)
    with pytest.raises(TypeError, match="onnxruntime opens only files with their record"):
        open_trusted(ArtifactDescription(onnx_file, ArtifactKind.ONNX, Precision.FP32))
