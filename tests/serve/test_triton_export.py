"""export-triton: configs Triton's own schema accepts, and names that cannot escape the repository."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format

from tests.conftest import error_line
from tests.optional import optional
from tests.serve.conftest import fake_engine
from trtpipe.errors import BadInput
from trtpipe.serve.options import ServeOptions
from trtpipe.serve.repository.triton import check_name, triton_model

model_config_pb2 = optional("tritonclient.grpc.model_config_pb2")


def _config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_export_from_a_repository(repository: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import shutil

    clean = tmp_path / "clean"
    for name in ("digits", "digits_int8_trt"):
        shutil.copytree(repository / name, clean / name)
    result = run_cli("export-triton", "--repository", clean, "-o", tmp_path / "triton", "--max-batch-size", "16")
    assert result.exit_code == 0, result.output
    config = _config(tmp_path / "triton" / "digits" / "config.pbtxt")
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 16
    assert list(config.input[0].dims) == [1, 32, 32] and config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert list(config.output[0].dims) == [10]
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert (tmp_path / "triton" / "digits" / "1" / "model.onnx").is_file()


def test_engine_config_takes_preferred_sizes_from_its_profile(tmp_path: Path) -> None:
    engine = fake_engine(tmp_path, "m.plan")
    model = triton_model("resnet", engine, ServeOptions(max_batch_size=128, instances=2))
    assert model.platform == "tensorrt_plan" and model.max_batch_size == 64
    assert model.preferred_batch_sizes == (8, 64) and model.instance_kind == "KIND_GPU"
    assert model.inputs[0].dims == (3, 224, 224)


def test_static_batch_model_has_no_batching(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    static = tmp_path / "static.onnx"
    assert run_cli("convert", "digits_resnet", "--input-shape", "4x1x32x32", "--static-batch", "-o",
                   static).exit_code == 0
    assert run_cli("export-triton", static, "--name", "fixed", "-o", tmp_path / "t").exit_code == 0
    config = _config(tmp_path / "t" / "fixed" / "config.pbtxt")
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [4, 1, 32, 32]
    assert not config.HasField("dynamic_batching")


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ".hidden", "", "-rf", "-", "--help", "a" * 256])
def test_names_that_would_escape_are_refused(name: str, digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadInput, match="is not allowed"):
        check_name(name)
    result = run_cli("export-triton", digits_onnx, "--name", name, "-o", tmp_path / "t")
    assert result.exit_code == 1 and "is not allowed" in error_line(result.output)
    assert not (tmp_path / "evil").exists()


def test_tensor_names_cannot_inject_config(tmp_path: Path) -> None:
    """Names are escaped by protobuf's text format: a quote, a newline or pbtxt syntax stays inside the name."""
    import onnx
    from onnx import TensorProto, helper

    from trtpipe.serve.repository.triton import export

    evil = 'in"put\n}\nparameters { key: "x" value: { string_value: "y" } }\ninput {'
    graph = helper.make_graph([helper.make_node("Identity", [evil], ["out"])], "g",
                              [helper.make_tensor_value_info(evil, TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "evil.onnx"))
    export({"evil": tmp_path / "evil.onnx"}, tmp_path / "triton", ServeOptions())
    config = text_format.Parse((tmp_path / "triton" / "evil" / "config.pbtxt").read_text(),
                               model_config_pb2.ModelConfig())
    assert config.input[0].name == evil and len(config.input) == 1 and not config.parameters


def test_links_in_the_output_or_the_repository_are_refused(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside"
    outside.mkdir()
    output = tmp_path / "triton"
    output.mkdir()
    (output / "digits").symlink_to(outside)
    result = run_cli("export-triton", digits_onnx, "--name", "digits", "-o", output)
    assert result.exit_code == 1 and "is a link" in result.output and not list(outside.iterdir())
    repository = tmp_path / "repo"
    (repository / "real" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, repository / "real" / "1" / "model.onnx")
    (repository / "linked").symlink_to(repository / "real")
    from trtpipe.serve.repository.loading import discover

    assert set(discover(repository)) == {"real"}


def test_an_onnx_file_tuned_for_onnxruntime_cuda_is_exported_to_run_as_tuned(digits_onnx: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                            run_cli) -> None:
    """The settings bench's probe recorded beside the file (model.tuned.json) reach Triton: the onnxruntime backend's
    CUDA accelerator parameters on a GPU instance, or the record copied beside the file for the Python backend."""
    from trtpipe.artifact.records.tuned import TunedRun, tunable_settings, write_tuned
    from trtpipe.runtime.onnxruntime.settings import CudnnSearch
    from trtpipe.runtime.options import RunOptions
    from trtpipe.vocab import OnnxExecution

    artifact = tmp_path / "tuned" / "model.onnx"
    artifact.parent.mkdir()
    shutil.copy(digits_onnx, artifact)
    write_tuned(artifact, TunedRun(OnnxExecution.CUDA, tunable_settings(RunOptions(
        io_binding=True, cuda_graph=True, prefer_nhwc=True, cudnn_search=CudnnSearch.HEURISTIC)),
                                   "NVIDIA H100 80GB HBM3", "1.32.0", 8))
    native = tmp_path / "native"
    assert run_cli("export-triton", artifact, "--name", "digits", "-o", native).exit_code == 0
    config = _config(native / "digits" / "config.pbtxt")
    [accelerator] = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "cuda" and dict(accelerator.parameters) == {
        "prefer_nhwc": "1", "cudnn_conv_algo_search": "HEURISTIC", "cudnn_conv_use_max_workspace": "1"}
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    python = tmp_path / "python"
    assert run_cli("export-triton", artifact, "--name", "digits", "-o", python, "--backend",
                   "python").exit_code == 0
    config = _config(python / "digits" / "config.pbtxt")
    assert config.parameters["trtpipe_device"].string_value == "cuda"
    copied = python / "digits" / "1" / "model.tuned.json"
    assert copied.read_bytes() == artifact.with_suffix(".tuned.json").read_bytes()
    untuned = tmp_path / "untuned"
    assert run_cli("export-triton", digits_onnx, "--name", "digits", "-o", untuned).exit_code == 0
    config = _config(untuned / "digits" / "config.pbtxt")
    assert not config.optimization.execution_accelerators.gpu_execution_accelerator
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
