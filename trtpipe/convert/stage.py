"""Stage 1, convert: a PyTorch model to a verified ONNX file with a manifest beside it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from trtpipe import console
from trtpipe.artifact.records.manifest import ArtifactManifest, commit_artifact
from trtpipe.artifact.records.sections import SourceModel
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.comparison import Tolerance
from trtpipe.convert.checks import one_line_failures, runs_checked
from trtpipe.convert.export import ExportResult, export_onnx
from trtpipe.convert.options import ConvertOptions
from trtpipe.convert.records import ConvertRecord, ExportRecord
from trtpipe.convert.verify import VerificationReport, tolerance_of, verify_backends
from trtpipe.errors import VerificationFailed
from trtpipe.files import require_parent_dir, staged_path
from trtpipe.models.loader import LoadedModel
from trtpipe.vocab import BackendKind, Precision, Task


@dataclass
class ConvertResult:
    path: Path
    manifest_path: Path
    verification: VerificationReport


def convert(loaded: LoadedModel, output: Path, options: ConvertOptions | None = None) -> ConvertResult:
    """Export ``loaded`` to ONNX at ``output`` and prove it matches PyTorch FP32 on ONNX Runtime CPU.

    The file appears at ``output`` only once it has passed onnx.checker and verification; a failure leaves
    whatever was there before untouched.
    """
    options = options or ConvertOptions()
    output = Path(output)
    require_parent_dir(output)
    loaded.check_runs(batch=2 if options.dynamic_batch else loaded.input_shape[0])
    with staged_path(output) as tmp, one_line_failures(loaded):
        with console.step(f"Exporting {loaded.name} to ONNX (opset {options.opset})..."):
            exported = export_onnx(loaded, tmp, opset=options.opset, dynamic_batch=options.dynamic_batch)
        with console.step(f"Verifying against PyTorch FP32 on {options.runtime} (CPU)..."), \
                runs_checked("The exported ONNX", options.runtime, " Nothing was written."):
            report, inputs, outputs = _verify_file(loaded, tmp, options.dynamic_batch, tolerance_of(options),
                                                   options.runtime)
        if not report.passed:
            raise VerificationFailed(report.failure_message("The exported ONNX") + " Nothing was written.")
        # The manifest describes the bytes this run wrote (the temporary file), and is committed with them: another
        # run writing the same path can never leave its file beside this manifest. The task is as given, or as the
        # outputs implied when verification measured it: optimize and bench read it here. A task read from the
        # outputs' values on random inputs is not recorded (:func:`_recorded_task`).
        task, task_line = _recorded_task(loaded, report)
        manifest = ArtifactManifest.describe(output, Precision.FP32, content=tmp, seconds=exported.seconds,
                                             details=_record(loaded, exported, report, inputs,
                                                             outputs).to_details(),
                                             task=task)
        manifest_file = commit_artifact(tmp, output, manifest)
    # Only now, so that a failure above is the command's one line, with no ✓ before it.
    console.success(f"Exported {loaded.name} with the {exported.exporter} exporter in {exported.seconds:.1f} s "
                    f"(opset {exported.opset}, {'dynamic' if exported.dynamic_batch else 'static'} batch)")
    console.success(_verification_line(report, options.runtime))
    if task_line:  # the task recorded in the manifest: which, and why
        console.note(task_line)
    return ConvertResult(output, manifest_file, report)


def _recorded_task(loaded: LoadedModel, report: VerificationReport) -> tuple[Task | None, str | None]:
    """The task the manifest records, and the line that says it. Verification runs random inputs: a task they show
    by the outputs' shape (a classifier's scores) or by decoding (a detector's boxes) is recorded as inferred, but
    one read from the values of several maps (class scores, an image, or neither: trtpipe.tasks.Inference.from_values)
    says nothing about the model's own inputs (an image-restoration net's output on noise is no image, and reads as
    class scores): it is left to optimize and bench, which infer it on real data, unless --task named it."""
    overall = report.overall
    if loaded.task is not None or not overall.inferred_from_values:
        return overall.task, overall.inference
    seen = (overall.inference or "").removeprefix("Task: ")
    return None, (f"Task: not recorded: on random inputs the outputs read as {seen}, but whether several maps are "
                  "class scores or an image only the model's real inputs show: optimize and bench infer it on their "
                  "data (give --task to record one)")


def verify(loaded: LoadedModel, onnx_path: Path, options: ConvertOptions | None = None) -> VerificationReport:
    """Check an existing ONNX file against the PyTorch model; raises VerificationFailed when it differs."""
    options = options or ConvertOptions()
    with console.step(f"Verifying {onnx_path} against PyTorch FP32 on {options.runtime}..."), \
            runs_checked(str(onnx_path), options.runtime):
        report, _, _ = _verify_file(loaded, Path(onnx_path), None, tolerance_of(options), options.runtime)
    if not report.passed:
        raise VerificationFailed(report.failure_message(str(onnx_path)))
    console.success(_verification_line(report, options.runtime))
    return report


def _verify_file(
    loaded: LoadedModel, path: Path, dynamic_batch: bool | None, tolerance: Tolerance, runtime: BackendKind
) -> tuple[VerificationReport, list[TensorInfo], list[TensorInfo]]:
    from trtpipe.artifact.description import describe_model
    from trtpipe.onnx_info import load_onnx
    from trtpipe.runtime.registry import backend_class, open_module

    # By runtime, not by suffix: convert checks its temporary file before renaming it into place.
    description = describe_model(load_onnx(path, load_weights=False), path)
    with backend_class(runtime)(description, None) as candidate:
        if dynamic_batch is None:  # an existing file: its own batch axis decides
            dynamic_batch = candidate.static_batch is None
        reference = open_module(loaded.module, loaded.inputs)
        report = verify_backends(reference, candidate, loaded, dynamic_batch=dynamic_batch, tolerance=tolerance,
                                 task=loaded.task)
        return report, candidate.inputs, candidate.outputs


def _verification_line(report: VerificationReport, runtime: BackendKind) -> str:
    overall = report.overall
    line = (f"Verified on {runtime}: max abs error {overall.max_abs_err:.2e}, max rel error {overall.max_rel_err:.2e}, "
            f"cosine {overall.cosine:.6f}")
    if overall.top1_agreement is not None:
        line += f", top-1 agreement {100 * overall.top1_agreement:.2f}%"
    if report.candidate_accuracy is not None and report.reference_accuracy is not None:
        line += (f"; held-out accuracy {100 * report.candidate_accuracy:.2f}% (PyTorch "
                 f"{100 * report.reference_accuracy:.2f}%, {report.eval_samples} images)")
    return line


def _record(loaded: LoadedModel, exported: ExportResult, report: VerificationReport, inputs: list[TensorInfo],
            outputs: list[TensorInfo]) -> ConvertRecord:
    import onnx
    import torch

    from trtpipe.runtime.registry import reference_versions

    dynamic_axes = {t.name: {str(i): d for i, d in enumerate(t.shape) if not isinstance(d, int)}
                    for t in [*inputs, *outputs]}
    return ConvertRecord(
        SourceModel(loaded.describe()), ExportRecord.of(exported),
        {"torch": torch.__version__, "onnx": onnx.__version__, **reference_versions()},
        tuple(inputs),
        # The batch is None where the exported axis is dynamic.
        tuple(replace(spec, shape=(None, *spec.sample_shape)) if exported.dynamic_batch else spec
              for spec in loaded.inputs),
        tuple(outputs), {k: v for k, v in dynamic_axes.items() if v}, report.record())
