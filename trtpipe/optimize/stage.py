"""Stage 2, optimize: graph passes, then the precision pass, written into the ONNX graph itself.

TensorRT 11 builds only strongly typed networks and reads INT8 from Q/DQ nodes, so precision lives in the
ONNX: the same optimized file then runs on TensorRT, ONNX Runtime's GPU providers and ONNX Runtime CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe import console
from trtpipe.artifact.inputs import resolve_inputs
from trtpipe.artifact.records.manifest import ArtifactManifest, commit_artifact, read_manifest
from trtpipe.artifact.records.sections import (
    CpuRecord,
    DataDescription,
    DataRecord,
    JudgedOn,
    MadeFrom,
    RecordedPreprocessing,
)
from trtpipe.errors import BadInput, VerificationFailed
from trtpipe.files import require_parent_dir, sha256_file, staged_path
from trtpipe.inputs import InputSpec, random_batch, take
from trtpipe.onnx_info import detect_precision, input_signature, load_onnx, name_nodes, op_counts, topologically_sorted
from trtpipe.optimize.data import Dataset, ImagePreprocessing, load_dataset
from trtpipe.optimize.graph.opset import upgrade_for_precision
from trtpipe.optimize.int8.recipes import recipe_for
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.passes.loader import graph_pass, precision_pass
from trtpipe.optimize.records import Int8Record
from trtpipe.options import to_plain
from trtpipe.vocab import CpuClass, Precision, Target, Task


@dataclass
class OptimizeResult:
    path: Path
    manifest_path: Path
    manifest: ArtifactManifest


def default_target() -> Target:
    """tensorrt where a CUDA GPU is visible (the artifact is headed there), else cpu."""
    try:
        import torch

        return Target.TENSORRT if torch.cuda.is_available() else Target.CPU
    except ImportError:
        return Target.CPU


def optimize(source: Path, output: Path, options: OptimizeOptions | None = None) -> OptimizeResult:
    """Optimize the FP32 ONNX at ``source`` into ``output`` and prove what it costs in accuracy."""
    started = time.perf_counter()
    options = options or OptimizeOptions()
    source, output = Path(source), Path(output)
    options.validate()
    precision = options.precision
    target = options.target or default_target()
    options = replace(options, cpu_class=_cpu_class(options, precision, target))  # the resolved class is recorded
    model, opset_note = _open_fp32_source(source, output, options)

    # The source's hash and manifest, read once: its preprocessing, its task and the record below all use them.
    source_sha, source_manifest = sha256_file(source), read_manifest(source, on_other_layout=console.warn)
    data = _load_data(model, options, source, source_manifest)
    task, decoder, batch_axes = _task(options, source, source_manifest, model, data.probe, data.static_batch,
                                      _decoder(options, source, source_sha))
    evaluation = _labelled_by_fp32(model, data.evaluation, task, data.static_batch)
    context = PassContext(options, target, data.calib, evaluation, data.probe, data.static_batch, output, task,
                          decoder, folds=data.folds)
    context.details.update({
        "input": MadeFrom(str(source), source_sha, Precision.FP32).to_dict(),
        "options": to_plain(options) | {"target": str(target)},
        "data": DataRecord(_describe(data.calib, fingerprints=True), _describe(evaluation if options.eval else None),
                           data.judged_on or _judged_by_eval(evaluation)).to_dict(),
        "input_specs": [spec.to_dict() for spec in data.specs],
        **({"opset_upgrade": opset_note} if opset_note else {}),
        "output_batch_axes": batch_axes,
    })
    result = _run_passes(model, context)
    manifest, manifest_file = _write(result, output, context, started=started, fp32=model)
    console.success(f"Wrote {output} ({precision}, {output.stat().st_size / 1e6:.2f} MB) and its manifest")
    return OptimizeResult(output, manifest_file, manifest)


def _open_fp32_source(source: Path, output: Path, options: OptimizeOptions) -> tuple[onnx.ModelProto, str | None]:
    """The source ONNX, ready for the passes: refused where the output would overwrite it or where it is not the
    FP32 graph convert writes (already FP16 or quantised), made batch-dynamic when asked, raised to the opset the
    precision needs (ONNX from elsewhere is often below opset 13), and every node named; and the upgrade's note
    for the manifest (None: no upgrade)."""
    require_parent_dir(output)
    if source.resolve() == output.resolve():
        raise BadInput("The output would overwrite the input ONNX: choose another -o path.")
    model = load_onnx(source)
    found = detect_precision(model)
    if found is not Precision.FP32:
        kind = "quantised (it has Q/DQ or integer ops)" if found is Precision.INT8 else f"already {found}"
        raise BadInput(f"{source} is {kind}: give the FP32 ONNX that 'trtpipe convert' wrote.")
    if options.dynamic_batch:
        from trtpipe.optimize.graph.dynamic_batch import make_batch_dynamic

        model = make_batch_dynamic(model)
    model, opset_note = upgrade_for_precision(model, options.precision)
    name_nodes(model)
    return model, opset_note


@dataclass
class _StageData:
    """The inputs and data the passes work with, as the stage resolved them."""

    specs: tuple[InputSpec, ...]
    static_batch: int | None  # the graph's batch size (None: dynamic)
    calib: Dataset | None
    evaluation: Dataset | None
    probe: Dataset  # calibration, eval or seeded random inputs: what graph passes are checked on
    judged_on: JudgedOn | None  # without --eval: which data judges (a held-out share, else the calibration)
    folds: tuple[np.ndarray, ...] | None = None  # cross-fitted: each fold's judging indices (optimize.held_out)


def _load_data(model: onnx.ModelProto, options: OptimizeOptions, source: Path,
               source_manifest: ArtifactManifest | None) -> _StageData:
    """The graph's inputs, the calibration and eval data read with the model's preprocessing, and the probe. A
    precision that calibrates without --eval is judged on a share held out of calibration (what was fit never
    judges it)."""
    specs, static_batch = input_specs(model, options, source_manifest)
    preprocessing = _preprocessing(options, source, source_manifest)
    calib = _load(options.calib, specs, "calibration", options.calib_samples, preprocessing)
    if calib is not None and options.precision is Precision.INT8:
        from trtpipe.optimize.judging.sample_plan import within_budget  # a large dense model keeps the time budget

        calib = within_budget(model, calib, static_batch, named=options.calib_samples is not None)
    evaluation = _load(options.eval, specs, "eval", None, preprocessing)
    judged_on, folds = None, None
    if calib is not None and evaluation is None and options.precision.needs_calibration:
        from trtpipe.optimize.judging.held_out import judge_without_eval  # what was fit never judges it

        judging = judge_without_eval(calib, options, specs, static_batch, preprocessing)
        calib, evaluation, judged_on, folds = judging.calibration, judging.held_out, judging.record, judging.folds
    if calib is None and options.precision is Precision.FP16:
        calib = _fp16_range_data(source, specs, evaluation, preprocessing)
    probe = calib or evaluation or _random_probe(specs)
    return _StageData(specs, static_batch, calib, evaluation, probe, judged_on, folds)


def _fp16_range_data(source: Path, specs: tuple[InputSpec, ...], evaluation: Dataset | None,
                     preprocessing: ImagePreprocessing) -> Dataset:
    """What FP16's range check runs on without --calib, as every other converter just converts: the --eval data,
    else the inputs the file's source brings (a packaged model's natural inputs), else seeded random inputs; said in
    one line, since inputs like the ones the model will see (--calib) find the ranges that overflow FP16 more
    surely."""
    from trtpipe.models.sources import for_file

    natural = for_file(source).data_spec
    if evaluation is not None:
        data = evaluation
    elif natural is not None:
        data = load_dataset(natural, specs, purpose="calibration", samples=None, preprocessing=preprocessing)
    else:
        data = _random_probe(specs)
    count = "" if data.source.startswith(f"{len(data)} ") else f" ({len(data)} samples)"
    console.note(f"FP16 range check on {data.source}{count}, no --calib given: --calib DATA, inputs like the ones "
                 "the model will see, is preferred (they find overflowing ranges more surely)")
    return data


def _decoder(options: OptimizeOptions, source: Path,
             source_sha: str) -> Callable[[Sequence[np.ndarray]], list[Any]] | None:
    """The detection decoder the figures are measured through: --postprocess's, else the one the file's source
    brings for its head (a packaged real model's), else none."""
    if options.postprocess:
        from trtpipe.models.user_code import load_postprocess

        return load_postprocess(options.postprocess)
    from trtpipe.models.sources import for_file

    return for_file(source, source_sha).decoder()


def _labelled_by_fp32(model: onnx.ModelProto, evaluation: Dataset | None, task: Task,
                      static_batch: int | None) -> Dataset | None:
    """Unlabelled classification eval data labelled with FP32's own top-1, so accuracy there is agreement with
    FP32 (other tasks are judged by their agreement with FP32 directly); any other data as it is."""
    if evaluation is None or evaluation.labels is not None or task is not Task.CLASSIFY:
        return evaluation
    from trtpipe.optimize.judging.evaluate import logits

    labels = logits(model, evaluation.images, batch=static_batch).argmax(1)
    evaluation = replace(evaluation, images=take(evaluation.images, 0, len(labels)), labels=labels)
    console.note(f"{evaluation.source}: labelled by the FP32 model's top-1, so accuracy here is agreement "
                 "with FP32, not ImageNet accuracy")
    return evaluation


def _run_passes(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """The graph passes asked for, then the precision pass. INT8 first picks the --quality recipe (said in one
    line when the data steps it down) and runs that recipe's graph passes too, after the ones asked for."""
    options = context.options
    passes = options.passes
    if options.precision is Precision.INT8:
        assert context.calib is not None
        context.recipe, step_down = recipe_for(options.quality, len(context.calib), random=options.calib == "random")
        if step_down:
            console.warn(step_down)
        passes = (*passes, *(p for p in context.recipe.passes if p not in passes))
    result = model
    for index, name in enumerate(passes):
        if index == len(options.passes):
            context.float_graph = result
        result = graph_pass(name).apply(result, context)
    writer = precision_pass(options.precision)
    if writer is not None:
        result = writer.apply(result, context)
    return result


def _write(result: onnx.ModelProto, output: Path, context: PassContext, *,
           started: float, fp32: onnx.ModelProto) -> tuple[ArtifactManifest, Path]:
    """Check ``result`` against its target runtime (nothing is written if it fails), then write it to ``output``
    through a staging file, checked as written (checks/written.py: default sessions; cpu INT8: integer kernels and speed
    against ``fp32``), committed with its manifest; the manifest and its path. ``started``: the stage's start
    (time.perf_counter), for the manifest's duration."""
    from trtpipe.optimize.checks.written import check_written

    options, precision, target = context.options, context.options.precision, context.target
    topologically_sorted(result)
    _check_conformance(result, precision, target, context)
    context.details["ops"] = op_counts(result)
    with staged_path(output) as tmp:
        onnx.save(result, str(tmp))
        onnx.checker.check_model(str(tmp))
        context.details["written_checks"] = check_written(tmp, fp32, precision, target,
                                                          take(context.probe.images, 0, context.static_batch or 1))
        manifest = ArtifactManifest.describe(
            output, precision, content=tmp, target=target if precision is Precision.INT8 else None,
            seconds=time.perf_counter() - started, fp32_nodes=context.fp32_nodes,
            details=context.manifest_details(), task=context.task, cpu=_cpu_record(options, target, context))
        manifest_file = commit_artifact(tmp, output, manifest)
    return manifest, manifest_file


def _cpu_class(options: OptimizeOptions, precision: Precision, target: Target) -> CpuClass | None:
    """The CPU class a cpu or openvino INT8 artifact is made for: as asked, else this machine's, said in one line;
    None for anything else (TensorRT and the float precisions have no CPU class)."""
    from trtpipe.optimize.int8.qdq.profiles import CPU_TARGETS

    if precision is not Precision.INT8 or target not in CPU_TARGETS:
        if options.cpu_class is not None:
            what = f"INT8 for {target}" if precision is Precision.INT8 else str(precision)
            console.note(f"--cpu-class {options.cpu_class} is ignored: it chooses the weights of cpu and openvino "
                         f"INT8, and this is {what}")
        return None
    if options.cpu_class is not None:
        console.note(f"INT8 made for CPU class {options.cpu_class} (as asked)")
        return options.cpu_class
    from trtpipe.hardware import cpu_class

    here = cpu_class()
    console.note(f"INT8 made for CPU class {here}, this machine's (--cpu-class names the CPU it will run on: "
                 f"{', '.join(CpuClass)})")
    return here


def _cpu_record(options: OptimizeOptions, target: Target, context: PassContext) -> CpuRecord | None:
    """A cpu or openvino INT8 artifact's CPU record: the class it was made for, its final figure as measured on
    this machine's class, and the classes it is known unsafe on."""
    record = context.recorded(Int8Record)
    if options.cpu_class is None or record is None:
        return None
    final = record.final.to_dict()
    from trtpipe.hardware import cpu_class
    from trtpipe.optimize.int8.qdq.profiles import cpu_record, profile_for

    figure = {key: final[key] for key in ("agreement", "agreement_name", "agreement_interval", "accuracy",
                                          "accuracy_name", "accuracy_interval", "cosine", "samples")
              if final.get(key) is not None}
    return cpu_record(profile_for(target, options.cpu_class), cpu_class(), figure)


def _check_conformance(model: onnx.ModelProto, precision: Precision, target: Target, context: PassContext) -> None:
    """The result must be a graph its target runtime accepts: checked before anything is written."""
    from trtpipe.conformance.check import check_model, failure_message, print_report

    report = check_model(model, target if precision is Precision.INT8 else Target.TENSORRT)
    if report.findings:
        print_report(report)
    context.details["conformance"] = report.to_dict()
    if not report.passed:
        raise VerificationFailed(failure_message(report) + " Nothing was written.")


def _preprocessing(options: OptimizeOptions, source: Path,
                   manifest: ArtifactManifest | None) -> ImagePreprocessing:
    """Image preprocessing for data made from images: the options', else what the model's weights were trained
    with (recorded by convert from the registry). Options that contradict the recorded values are refused."""
    source_model = manifest.source_model if manifest is not None else None
    recorded = source_model.preprocessing if source_model is not None else RecordedPreprocessing()
    for key in ("resize", "mean", "std"):
        given, known = getattr(options, key), getattr(recorded, key)
        if given is not None and known is not None and tuple(np.atleast_1d(given)) != tuple(np.atleast_1d(known)):
            raise BadInput(f"--{key} {given} does not match the {key} the model's weights were trained with "
                           f"({known if isinstance(known, int) else list(known)}, recorded in "
                           f"{source.stem}.manifest.json): drop --{key} or fix it.")
    return ImagePreprocessing(resize=options.resize or recorded.resize, mean=options.mean or recorded.mean,
                              std=options.std or recorded.std, channel_order=options.channel_order)


def input_specs(model: onnx.ModelProto, options: OptimizeOptions,
                manifest: ArtifactManifest | None) -> tuple[tuple[InputSpec, ...], int | None]:
    """The graph's inputs as :class:`InputSpec` (name, dims, dtype from the graph), with what the options declare
    laid over them and, where the options say nothing, the ranges and layouts convert recorded in the manifest
    (:func:`trtpipe.artifact.inputs.resolve_inputs`); and the static batch size (None: dynamic). A dynamic axis stays
    dynamic in the written artifact: only calibration and accuracy runs take a size (from --input-shape or the data)."""
    graph = input_signature(model)
    specs = resolve_inputs(graph, manifest, shapes=options.input_shape, dtypes=options.input_dtype,
                           ranges=options.input_range)
    batch = graph[0][1][0] if graph and graph[0][1] else None
    return specs, batch


Decoder = Callable[[Sequence[np.ndarray]], list[Any]]
PROBED_SAMPLES = 8  # FP32's outputs on this many probe samples show the task (a detector's boxes are checked on them)


def _task(options: OptimizeOptions, source: Path, recorded: ArtifactManifest | None, model: onnx.ModelProto,
          probe: Dataset, static_batch: int | None,
          decoder: Decoder | None) -> tuple[Task, Decoder | None, dict[str, object]]:
    """The model's task, and the detection decoder its figures are measured through: as asked, else as its
    source's manifest records it, else as FP32's outputs on a few probe samples show (trtpipe.tasks.infer_task);
    a detector's built-in decoder is the one that reads plausible boxes from those outputs. One line says which
    and why; a budget on a task with no figure to judge it by is refused before any work. Also each output's batch
    axis (trtpipe.runtime.batch_axes), as the manifest records it, said in a line where one is not the first."""
    from trtpipe.optimize.judging.evaluate import outputs_and_axes
    from trtpipe.tasks import check_fits, detect, infer_task
    from trtpipe.tasks.registry import NAMED

    samples = take(probe.images, 0, max(static_batch or 0, min(PROBED_SAMPLES, len(probe))))
    found, axes = outputs_and_axes(model, samples, batch=static_batch)
    shapes = [tuple(o.shape) for o in found]
    names = [o.name for o in model.graph.output]
    if (unusual := axes.describe(names)) is not None:
        console.note(f"Outputs: {unusual}; runs in chunks join each output on its own batch axis")
    size = _image_size(probe.images)
    decoded = decoder is not None
    task = options.task or (Task.DETECT if decoded else None) or (recorded.task if recorded else None)
    if decoded and task is not Task.DETECT:
        raise BadInput(f"--postprocess decodes detections, but the task is {task}: give --task detect or drop it.")
    if task is None:
        inference = infer_task(found, size, axes.axes)
        task, line = inference.task, inference.line()
        if inference.decoder is not None:
            decoder = _built_in(inference.decoder, size)
    else:
        if not decoded:
            check_fits(task, shapes)
        how = ("as asked" if options.task else "its detection decoder" if decoded else "from the manifest")
        line = f"Task: {task} ({how})"
        if task is Task.DETECT and not decoded:
            chosen, readings = detect.choose(found, size)
            if chosen is None:
                raise BadInput(f"--task detect: {detect.unrecognised(readings)} on {len(samples)} samples of "
                               f"{probe.source}: give --postprocess MODULE:FN that decodes it, or --task generic.")
            decoder, line = _built_in(chosen.decoder, size), f"{line}, {chosen.line()}"
    if options.max_accuracy_drop is not None and task is Task.GENERIC:
        raise BadInput(f"--max-accuracy-drop cannot be judged on {source}: its outputs "
                       f"({', '.join(str(list(s)) for s in shapes)}) name no task, so nothing measures accuracy. Give "
                       f"{NAMED}, or drop the budget.")
    console.note(line)
    return task, decoder, axes.record(names)


def _built_in(name: str, size: tuple[int, int] | None) -> Decoder:
    """The built-in detection decoder ``name``; yolox at the input's own size where it is known."""
    from trtpipe.tasks import detect

    return detect.yolox_decoder(*size) if name == "yolox" and size is not None else detect.DECODERS[name]


def _image_size(images: Any) -> tuple[int, int] | None:
    """The height and width of the first input where it is an image batch (its layout says which axes), else None."""
    from trtpipe.inputs import Layout, guess_layout

    first = images if isinstance(images, np.ndarray) else next(iter(images.values()), None)
    layout = guess_layout(first.shape) if first is not None else None
    if first is None or layout is None:
        return None
    return (first.shape[2], first.shape[3]) if layout is Layout.NCHW else (first.shape[1], first.shape[2])


def _load(spec: str | None, specs: tuple[InputSpec, ...], purpose: str, samples: int | None,
          preprocessing: ImagePreprocessing) -> Dataset | None:
    if spec is None:
        return None
    dataset = load_dataset(spec, specs, purpose=purpose, samples=samples, preprocessing=preprocessing)
    console.note(f"{purpose.capitalize()} data: {dataset.source}, {len(dataset)} samples")
    return dataset


def _random_probe(specs: tuple[InputSpec, ...]) -> Dataset:
    """Seeded random inputs to check graph passes on, without data: every input drawn from its range. A dynamic
    axis nothing sizes is refused (InputSpec.random names the input and --input-shape)."""
    batch = random_batch(specs, 16, np.random.default_rng(0))
    return Dataset(batch, None, "16 seeded random inputs")


def _judged_by_eval(evaluation: Dataset | None) -> JudgedOn | None:
    """The manifest's ``data.judged_on`` where --eval judges (its own data, never fit to)."""
    described = _describe(evaluation)
    return None if described is None else JudgedOn("eval", described.source, described.samples, described.sha256,
                                                   labelled=described.labelled)


def _describe(dataset: Dataset | None, *, fingerprints: bool = False) -> DataDescription | None:
    """A data set's manifest record; ``fingerprints``: with each sample's (what calibration was fit to, so a
    figure measured on any of them can be told)."""
    if dataset is None:
        return None
    return DataDescription(dataset.source, len(dataset), dataset.sha256, dataset.labels is not None,
                           tuple(dataset.fingerprints()) if fingerprints else None)
