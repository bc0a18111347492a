"""Stage compile: a PyTorch model to a verified AOTInductor package (.pt2) with a manifest beside it.

The package is exported (export.py), compiled by AOTInductor into a private folder, loaded from there through the
runtime seam exactly as ``trtpipe.load`` will load it (its manifest's checks included) and verified against PyTorch
FP32 (verify.py). Only then are the package and its manifest committed to ``output`` as one: a failure at any step
leaves whatever was there untouched.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from trtpipe import console
from trtpipe.artifact.records.manifest import ArtifactManifest, commit_artifact
from trtpipe.artifact.records.package import AotiPackage, AotiRecord
from trtpipe.artifact.records.sections import SourceModel
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.compile.devices import unsupported
from trtpipe.compile.export import Compiled, compile_package, example_batch
from trtpipe.compile.options import CompileOptions
from trtpipe.compile.records import CompileRecord, CompileRunRecord
from trtpipe.compile.verify import Verification, tolerance_of, verify_package
from trtpipe.errors import BadInput, VerificationFailed
from trtpipe.files import require_parent_dir, sha256_file, staged_path
from trtpipe.models.loader import LoadedModel
from trtpipe.options import to_plain
from trtpipe.vocab import ArtifactKind, Device, Precision


@dataclass
class CompileResult:
    path: Path
    manifest_path: Path
    verification: Verification
    compiled: Compiled


def compile_aoti(loaded: LoadedModel, output: Path, options: CompileOptions | None = None) -> CompileResult:
    """Compile ``loaded`` into the AOTInductor package ``output`` (.pt2) and prove it matches PyTorch FP32."""
    options = options or CompileOptions()
    output = Path(output)
    if ArtifactKind.for_path(output.name) is not ArtifactKind.AOTI:
        raise BadInput(f"{output} is not a {'/'.join(ArtifactKind.AOTI.suffixes)} file: an AOTInductor package is "
                       f"written as one (e.g. {ArtifactKind.AOTI.repository_file}).")
    require_parent_dir(output)
    why = unsupported(options.precision, options.device)
    if why:
        raise BadInput(f"Cannot compile {loaded.name} in {options.precision} for {options.device}: {why}.")
    loaded.check_runs(batch=example_batch(options.batch_range))
    what = (f"{options.precision}{' channels_last' if options.channels_last else ''} for {options.device}, batch "
            f"{options.batch_range[0]}-{options.batch_range[1]}")
    with tempfile.TemporaryDirectory(prefix="trtpipe-compile-") as folder, staged_path(output) as staged:
        with console.step(f"Exporting {loaded.name} with torch.export and compiling it with AOTInductor ({what})..."):
            compiled = compile_package(loaded, options, Path(folder))
        shutil.copyfile(compiled.path, staged)
        package = _package(loaded, options, staged)
        with console.step(f"Verifying against PyTorch FP32 (tolerance of {options.precision})..."):
            verification = _verify(loaded, options, package)
        if not verification.passed:
            raise VerificationFailed(verification.failure_message("The compiled package") + " Nothing was written.")
        manifest = ArtifactManifest.describe(
            output, options.precision, content=staged, seconds=compiled.export_seconds + compiled.compile_seconds,
            details=_record(loaded, options, package, compiled, verification).to_details(),
            task=verification.overall.task, device=options.device)
        manifest_file = commit_artifact(staged, output, manifest)
    console.success(f"Compiled {loaded.name} with AOTInductor ({what}) in "
                    f"{compiled.export_seconds + compiled.compile_seconds:.1f} s (export "
                    f"{compiled.export_seconds:.1f} s)")
    console.success(f"Verified against PyTorch FP32: {verification.line()}")
    return CompileResult(output, manifest_file, verification, compiled)


def _package(loaded: LoadedModel, options: CompileOptions, staged: Path) -> AotiPackage:
    """What the staged package is, as its manifest will say: compiled here, for ``options``."""
    import torch

    from trtpipe.runtime.registry import compute_capability, open_module

    low, high = options.batch_range
    batch: int | str = "batch" if low != high else low
    inputs = tuple(TensorInfo(s.name, s.dtype, (batch, *s.sample_shape)) for s in loaded.inputs)
    with open_module(loaded.module, loaded.inputs) as probe:  # the outputs' names and shapes, as the model gives them
        outputs = tuple(TensorInfo(t.name, t.dtype, (batch, *t.shape[1:])) for t in probe.outputs)
    cuda = options.device is Device.CUDA
    record = AotiRecord((low, high), options.channels_last, torch.__version__, inputs, outputs,
                        cuda_version=torch.version.cuda if cuda else None,
                        compute_capability=compute_capability(ArtifactKind.AOTI.backend) if cuda else None,
                        gpu_name=torch.cuda.get_device_name() if cuda else None,
                        cpu_capability=None if cuda else torch.backends.cpu.get_cpu_capability())
    return AotiPackage.of(staged, sha256_file(staged), options.device, record)


def _verify(loaded: LoadedModel, options: CompileOptions, package: AotiPackage) -> Verification:
    """The staged package, opened as trtpipe.load opens one, against PyTorch FP32 eager on the CPU."""
    from trtpipe.artifact.description import ArtifactDescription
    from trtpipe.runtime.registry import backend_class, open_module

    description = ArtifactDescription(package.path, ArtifactKind.AOTI, options.precision, inputs=package.record.inputs,
                                      outputs=package.record.outputs, package=package)
    with _true_fp32(options), backend_class(description.backend)(description) as candidate, \
            open_module(loaded.module, loaded.inputs) as reference:
        return verify_package(reference, candidate, loaded, options.batch_range, tolerance_of(options))


@contextlib.contextmanager
def _true_fp32(options: CompileOptions) -> Iterator[None]:
    """An FP32 package on a GPU verified in FP32: cuDNN's convolutions, which the package calls at run time, take
    TF32 by default (torch's global switch), which would be judged as FP32's error. Restored afterwards."""
    import torch

    if options.device is not Device.CUDA or options.precision is not Precision.FP32:
        yield
        return
    backends = torch.backends
    saved = backends.cudnn.allow_tf32, backends.cuda.matmul.allow_tf32
    backends.cudnn.allow_tf32 = backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        backends.cudnn.allow_tf32, backends.cuda.matmul.allow_tf32 = saved


def _record(loaded: LoadedModel, options: CompileOptions, package: AotiPackage, compiled: Compiled,
            verification: Verification) -> CompileRecord:
    import torch

    run = CompileRunRecord(to_plain(options), round(compiled.export_seconds, 3), round(compiled.compile_seconds, 3))
    specs = tuple(replace(spec, shape=(None, *spec.sample_shape)) for spec in loaded.inputs)  # the batch left free
    return CompileRecord(SourceModel(loaded.describe()), package.record, run, {"torch": torch.__version__},
                         package.record.inputs, specs, package.record.outputs, verification.record())
