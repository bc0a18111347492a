"""``trtpipe export-triton``: a Triton Inference Server model repository for trtpipe's artifacts.

Each model gets ``<name>/config.pbtxt`` (platform, max_batch_size, inputs and outputs without the batch
dimension, dynamic batching with preferred sizes from the engine's optimisation profile, instance groups) and
``<name>/<version>/model.onnx|model.plan``. Every config is built as Triton's own protobuf message
(tritonclient's model_config_pb2) and printed by protobuf's text format.

Two ways to run it: ``native`` names Triton's onnxruntime_onnx/tensorrt_plan platforms (NVIDIA's container has
those backends); ``python`` writes the same config for Triton's Python backend plus a ``model.py`` that runs the
artifact through trtpipe's runtime, with its manifest or sidecar beside it (any Triton with the Python backend
and trtpipe installed: the whole Triton feature set in front of trtpipe's runtimes).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe import console
from trtpipe.errors import BadInput, import_failure
from trtpipe.files import atomic_path, write_text_atomic
from trtpipe.runtime.registry import runtimes, triton_facts
from trtpipe.serve.options import ServeOptions
from trtpipe.vocab import (
    REPOSITORY_VERSION,
    ArtifactKind,
    BackendKind,
    Device,
    Precision,
    TritonBackend,
    dtype,
)

if TYPE_CHECKING:
    pass

# The Python-backend model (copied, never imported here: it imports Triton's stub utilities) and the config
# parameters it reads.
PYTHON_MODEL = Path(__file__).with_name("triton_python_model.py")
ARTIFACT_PARAMETER = "trtpipe_artifact"
THREADS_PARAMETER = "trtpipe_threads"
RUNTIME_PARAMETER = "trtpipe_runtime"
DEVICE_PARAMETER = "trtpipe_device"
SAFE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # TYPE_FP32...
    dims: tuple[int, ...]  # without the batch dimension; -1 for dynamic


@dataclass(frozen=True)
class TritonModel:
    name: str
    kind: ArtifactKind
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int = 1000
    instance_count: int = 1
    backend: TritonBackend = TritonBackend.NATIVE
    threads: int | None = None  # ONNX Runtime / OpenVINO threads per instance
    # what runs it: the first backend the registry lists for ONNX files (its default), or the one asked for
    runtime: BackendKind = field(default_factory=lambda: runtimes(ArtifactKind.ONNX)[0])
    bf16: bool = False  # a BF16 file: OpenVINO with BF16 inference precision
    gpu: bool = False  # an artifact that runs on a GPU whatever its kind's default (a CUDA AOTInductor package)
    # ONNX Runtime CUDA provider options from the artifact's tuned record (model.tuned.json), for Triton's
    # onnxruntime backend's "cuda" accelerator; an artifact with such a record was tuned for a GPU and runs on one.
    cuda_options: tuple[tuple[str, str], ...] = ()
    # A cpu/openvino INT8 artifact: the CPU class it was made and measured for, and where it is unsafe (its manifest's
    # record in one line), written into the config as a comment for whoever deploys it.
    cpu_requirement: str | None = None

    @property
    def platform(self) -> str:
        return triton_facts(self.kind.backend).platform

    @property
    def instance_kind(self) -> str:
        return "KIND_GPU" if self.gpu else triton_facts(self.kind.backend).instance_kind


MAX_NAME_LENGTH = 255  # a folder name's limit on common filesystems


def check_name(name: str) -> str:
    """Model names become folder names and URL paths: refuse anything that could leave the repository, or be read
    as an option by the tools that take a model's name on their command line (``-rf``)."""
    if (not name or not set(name) <= SAFE_NAME_CHARS or name[0] in ".-" or len(name) > MAX_NAME_LENGTH):
        raise BadInput(f"Model name '{name}' is not allowed: use letters, digits, '_', '-' and '.', starting with a "
                       f"letter, digit or '_', at most {MAX_NAME_LENGTH} characters (it becomes a folder of the "
                       "repository).")
    return name


def _model_config() -> Any:
    """Triton's ModelConfig protobuf class (from tritonclient), or the install line."""
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as error:
        raise import_failure(error, "tritonclient", "Writing Triton configs", "pip install 'trtpipe[triton]'",
                             ("tritonclient", "google", "grpc")) from None
    return model_config_pb2


def config_pbtxt(model: TritonModel) -> str:
    """The config as Triton's own ModelConfig message, printed by protobuf's text format: tensor names and every
    other string are escaped by protobuf, so no name can break out of its field."""
    from google.protobuf import text_format

    pb = _model_config()
    config = pb.ModelConfig(name=model.name, max_batch_size=model.max_batch_size)
    if model.backend is TritonBackend.PYTHON:
        config.backend = str(TritonBackend.PYTHON)
        config.parameters[ARTIFACT_PARAMETER].string_value = model.kind.repository_file
        config.parameters[RUNTIME_PARAMETER].string_value = str(model.runtime)
        if model.threads:
            config.parameters[THREADS_PARAMETER].string_value = str(model.threads)
    elif (runs := triton_facts(model.runtime)).backend:
        # a Triton backend of the runtime's own (OpenVINO's) reads the artifact given its file name
        config.backend = runs.backend
        config.default_model_filename = model.kind.repository_file
        for key, value in (runs.parameters(model.bf16, model.threads) if runs.parameters else {}).items():
            config.parameters[key].string_value = value
    else:
        config.platform = model.platform
        if model.cuda_options:
            # Triton's onnxruntime backend passes these to the CUDA provider. Not enable_cuda_graph: Triton binds
            # its own buffers per request, which a captured graph cannot follow.
            accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
            accelerator = accelerators.add(name=str(Device.CUDA))
            for key, value in model.cuda_options:
                accelerator.parameters[key] = value
    if model.backend is TritonBackend.PYTHON and model.cuda_options:
        config.parameters[DEVICE_PARAMETER].string_value = str(Device.CUDA)
    for target, specs in ((config.input, model.inputs), (config.output, model.outputs)):
        for spec in specs:
            target.add(name=spec.name, data_type=pb.DataType.Value(spec.datatype), dims=list(spec.dims))
    if model.max_batch_size > 0:
        config.dynamic_batching.preferred_batch_size.extend(model.preferred_batch_sizes)
        config.dynamic_batching.max_queue_delay_microseconds = model.max_queue_delay_us
    config.instance_group.add(count=model.instance_count,
                              kind=pb.ModelInstanceGroup.Kind.Value(model.instance_kind))
    text = text_format.MessageToString(config)
    if model.cpu_requirement:  # a comment in Triton's text format, whitespace collapsed so that it stays one line
        text = f"# trtpipe: {' '.join(model.cpu_requirement.split())} (model.manifest.json beside the model)\n" + text
    return text


def triton_model(name: str, artifact: Path, options: ServeOptions) -> TritonModel:
    """An artifact's description (tensors and, for an engine, its profile) as a TritonModel."""
    from trtpipe.artifact.description import describe_artifact

    description = describe_artifact(artifact)
    kind, max_batch_size = description.kind, options.max_batch_size
    if description.engine is not None:
        sidecar = description.engine
        profile = sidecar.profiles[0][0] if sidecar.profiles and sidecar.profiles[0] else None
        top = int(profile["max"][0]) if profile else max_batch_size
        preferred = tuple(sorted({int(profile["opt"][0]), top})) if profile else (max_batch_size,)
        batch = min(max_batch_size, top)
    else:
        dynamic = bool(description.inputs) and not isinstance(description.inputs[0].shape[0], int)
        batch = max_batch_size if dynamic else 0
        preferred = tuple(b for b in (8, 16, 32) if b <= batch) or (batch,)
    inputs = [(t.name, t.dtype, list(t.shape)) for t in description.inputs]
    outputs = [(t.name, t.dtype, list(t.shape)) for t in description.outputs]
    if options.preferred_batch_sizes:
        preferred = options.preferred_batch_sizes
    # Triton refuses a preferred size above max_batch_size (found by loading an engine whose profile reaches 64
    # with --max-batch-size 32 into a real server).
    preferred = tuple(b for b in preferred if b <= batch) or (batch,)

    def spec(entry: tuple[str, str, list[int | str | None]]) -> TensorSpec:
        tensor_name, numpy_name, shape = entry
        dims = shape[1:] if batch > 0 else shape
        found = dtype(numpy=numpy_name)
        if found is None:
            raise BadInput(f"{artifact}: tensor '{tensor_name}' has type {numpy_name}, which Triton has no type for.")
        return TensorSpec(tensor_name, found.triton, tuple(d if isinstance(d, int) and d >= 0 else -1 for d in dims))

    runtime = description.backend if description.pinned_runtime or kind is not ArtifactKind.ONNX else options.runtime
    accelerator = triton_facts(runtime).accelerator_options
    cuda_options = accelerator(description) if accelerator is not None else ()
    backend = options.triton_backend
    if not triton_facts(kind.backend).platform and backend is TritonBackend.NATIVE:  # no AOTInductor platform
        console.note(f"{name}: Triton has no backend for {artifact.name} ({kind}), so it is exported for Triton's "
                     f"{TritonBackend.PYTHON} backend, which runs it with trtpipe's runtime.")
        backend = TritonBackend.PYTHON
    if description.package is not None:  # what runs an AOTInductor package is fixed when it is compiled
        batch = min(batch, description.package.record.batch_range[1])
        preferred = tuple(b for b in preferred if b <= batch) or (batch,)
    return TritonModel(check_name(name), kind, batch, tuple(map(spec, inputs)), tuple(map(spec, outputs)),
                       preferred if batch > 0 else (), max_queue_delay_us=int(options.max_queue_delay_ms * 1000),
                       instance_count=options.instances, backend=backend, threads=options.threads,
                       runtime=runtime, bf16=description.precision is Precision.BF16,
                       gpu=(description.package is not None and description.package.device is Device.CUDA)
                       or bool(cuda_options), cuda_options=cuda_options,
                       cpu_requirement=description.cpu.requirement() if description.cpu is not None else None)


def export(artifacts: dict[str, Path], output: Path, options: ServeOptions | None = None, *,
           version: str = REPOSITORY_VERSION, runtimes: dict[str, BackendKind] | None = None) -> list[Path]:
    """Write a Triton repository at ``output`` with one model per (name, artifact); ``runtimes`` names the
    runtime of some ONNX models (the pipeline's chosen pair), the others take ``options.runtime``."""
    from dataclasses import replace

    options = options or ServeOptions()
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for name, artifact in artifacts.items():
        own = replace(options, runtime=runtimes[name]) if runtimes and name in runtimes else options
        model = triton_model(check_name(name), artifact, own)
        text = config_pbtxt(model)
        model_dir = output / model.name
        files = _version_files(artifact, model)
        targets = [model_dir / version / name for name in files]
        _refuse_links(output, [model_dir, model_dir / version, *targets, model_dir / "config.pbtxt"])
        (model_dir / version).mkdir(parents=True, exist_ok=True)
        for target, source in zip(targets, files.values(), strict=True):
            with atomic_path(target) as tmp:
                shutil.copyfile(source, tmp)
        write_text_atomic(model_dir / "config.pbtxt", text)
        written += [model_dir / "config.pbtxt", *targets]
        runs_on = (f"python backend ({model.runtime})" if model.backend is TritonBackend.PYTHON
                   else config_runs_on(model))
        console.success(f"{model.name}: {runs_on}, max_batch_size {model.max_batch_size}, preferred "
                        f"{list(model.preferred_batch_sizes)}")
    write_text_atomic(output / "trtpipe-export.json", json.dumps(
        {name: str(path) for name, path in artifacts.items()}, indent=2) + "\n")
    return written


def config_runs_on(model: TritonModel) -> str:
    runs = triton_facts(model.runtime).backend
    return f"{runs} backend" if runs else model.platform


def _version_files(artifact: Path, model: TritonModel) -> dict[str, Path]:
    """{file name in the version folder: source}: the artifact under Triton's default name and its manifest (for
    either backend: it records what the artifact was made and measured for); for the Python backend also model.py
    and an engine's sidecar, which with the manifest tell trtpipe's runtime how to run it."""
    from trtpipe.artifact.records.engine import sidecar_path
    from trtpipe.artifact.records.manifest import manifest_path
    from trtpipe.artifact.records.tuned import tuned_path
    target = Path(model.kind.repository_file)
    files = {target.name: artifact}
    if model.kind is not ArtifactKind.TENSORRT_ENGINE and manifest_path(artifact).is_file():
        files[manifest_path(target).name] = manifest_path(artifact)  # what it was made and measured for, e.g. its CPU
    if model.backend is TritonBackend.PYTHON:
        files["model.py"] = PYTHON_MODEL
        if model.kind is ArtifactKind.TENSORRT_ENGINE:
            files[sidecar_path(target).name] = sidecar_path(artifact)
        if tuned_path(artifact).is_file():  # run there as tuned here
            files[tuned_path(target).name] = tuned_path(artifact)
    return files


def _refuse_links(root: Path, paths: list[Path]) -> None:
    """Nothing is written through a link: a symlink already in the output folder could send a write anywhere."""
    top = root.resolve()
    for path in paths:
        if path.is_symlink() or (path.exists() and top not in path.resolve().parents):
            raise BadInput(f"{path} is a link (or leads outside {root}): refusing to write through it. Remove it or "
                           "export into an empty folder.")


def artifacts_from_repository(repository: Path) -> dict[str, Path]:
    """The newest version of every model in a trtpipe repository."""
    from trtpipe.serve.repository.loading import discover

    return {name: versions[-1][1] for name, versions in discover(repository).items()}
