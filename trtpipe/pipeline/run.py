"""The pipeline: convert -> optimize (each variant; an AOTInductor variant is compiled from the PyTorch model
instead) -> build (where TensorRT and a GPU exist) -> bench -> select -> report -> optional Triton export. Every
stage is keyed by its inputs and reused when unchanged.

The source is a PyTorch model, or an FP32 ONNX file (or a packaged model's name): that file is then the converted
model (placed in the repository as it is, keyed by its SHA-256), optimize starts from it, and bench measures the
variants against it on ONNX Runtime, as ``trtpipe bench`` does with an ONNX MODEL."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe import console
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.compile.options import CompileOptions
from trtpipe.convert.options import ConvertOptions
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file, write_json_atomic
from trtpipe.models.registry import factory_spec
from trtpipe.options import to_plain
from trtpipe.pipeline.cache import RunManifest, StageRecord, stage_key
from trtpipe.pipeline.config import Pipeline, Variant
from trtpipe.pipeline.select import Choice, Limit, batch_advice, choose, outside_limits, undecided_limits
from trtpipe.pipeline.stages import artifact_path, build_stages, optimize_stage, place_onnx, run_stage
from trtpipe.vocab import ArtifactKind, Device, Precision, __version__

if TYPE_CHECKING:
    from trtpipe.bench.reference import OnnxReference
    from trtpipe.models.loader import LoadedModel
    from trtpipe.optimize.options import OptimizeOptions


def _source_identity(pipeline: Pipeline, model: Callable[[], LoadedModel]) -> str | dict[str, str | None]:
    """What the convert key knows of the model. A registry name is itself (its weights ship with trtpipe or are
    seeded); a checkpoint or TorchScript file is its content. A factory is its name, its code's hash and the hash
    of the weights it builds: two factories of one file are two models, and a factory that reads a checkpoint or
    draws weights builds a new model when those change although its code did not. Only calling the factory tells
    its weights, so a factory is loaded even when every stage is reused (once: the stages share that model)."""
    source = str(pipeline.model.source)
    factory = factory_spec(source)
    if factory is not None:
        loaded = model()
        return {"factory": factory.factory, "code": loaded.source_sha256 or factory.module,
                "weights": loaded.weights_sha256()}
    path = Path(source)
    return sha256_file(path) if path.is_file() else source


def run_pipeline(pipeline: Pipeline, *, rebench: bool = False) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the run manifest's content. ``rebench``: measure again even where the
    bench's inputs are unchanged (``trtpipe run --rebench``: a noisy machine left select undecided)."""
    run = _PipelineRun(pipeline, rebench=rebench)
    converted = run.convert()
    artifacts = [converted, *run.optimize(converted)]
    artifacts += run.build(artifacts)
    bench_path, rows = run.bench(artifacts)
    selection = run.select(rows)
    run.report(bench_path, selection)
    if pipeline.output.triton:
        run.export_triton(artifacts, selection)
    return run.finish(selection)


@dataclass(frozen=True)
class _Selection:
    """The chosen variant and batch advice, and the batch size they were judged at."""

    choice: Choice | None
    advice: dict[str, Any] | None
    batch: int
    outside: dict[str, str] = field(default_factory=dict)  # variant -> the limits it breaks (the report marks it)
    undecided: dict[str, str] = field(default_factory=dict)  # variant -> the limits it could not be judged on
    decide: str | None = None  # how to decide what select could not (how_to_decide)

    @property
    def summary(self) -> dict[str, Any]:
        choice = self.choice.__dict__ | {"status": self.choice.status} if self.choice else None
        return {"choice": choice, "batch_advice": self.advice, "decide": self.decide}


class _PipelineRun:
    """One run of a pipeline: where it writes, the run manifest that keys and records every stage, the versions
    that enter each key, and the PyTorch model, loaded once and only by the stages that need it."""

    def __init__(self, pipeline: Pipeline, *, rebench: bool = False) -> None:
        import torch

        from trtpipe.runtime.registry import reference_versions

        self.pipeline = pipeline
        self.rebench = rebench
        self.started = time.perf_counter()
        self.reports = pipeline.output.reports / pipeline.name
        self.repository = pipeline.output.repository
        self.reports.mkdir(parents=True, exist_ok=True)
        self.manifest = RunManifest(self.reports / "run.json")
        self.versions = {"trtpipe": __version__, "torch": torch.__version__, **reference_versions()}
        self._model: LoadedModel | None = None
        self.onnx = _onnx_source(pipeline)  # an FP32 ONNX source: the converted model and bench's reference

    def model(self) -> LoadedModel:
        if self._model is None:
            from trtpipe.models.loader import load_model

            source = self.pipeline.model
            self._model = load_model(str(source.source), **source.loader_keywords())
        return self._model

    def reference(self) -> LoadedModel | OnnxReference:
        """What bench measures every variant against: an FP32 ONNX source itself, else the PyTorch model."""
        return self.onnx if self.onnx is not None else self.model()

    def convert(self) -> Path:
        pipeline = self.pipeline
        onnx_path = artifact_path(self.repository, pipeline.name)
        if self.onnx is not None:  # nothing to convert: the file is placed in the repository as it is
            source = self.onnx.path
            key = stage_key(stage="source", onnx=sha256_file(source), output=str(onnx_path))
            return run_stage(self.manifest, "source", key, lambda: place_onnx(source, onnx_path))[0]
        model_options = to_plain(pipeline.model) | {"source": _source_identity(pipeline, self.model), "name": None}
        key = stage_key(stage="convert", model=model_options, options=to_plain(pipeline.convert),
                        versions=self.versions)

        def do_convert() -> list[Path]:
            from trtpipe.bench.identity import warn_if_unseeded
            from trtpipe.convert.stage import convert

            warn_if_unseeded(self.model())  # such a model's stages are never reused: say why
            return [convert(self.model(), onnx_path, pipeline.convert).path]

        return run_stage(self.manifest, "convert", key, do_convert)[0]

    def optimize(self, converted: Path) -> list[Path]:
        """One optimize stage per variant (a compile stage for an AOTInductor one); a variant this machine cannot
        make useful is skipped with its reason."""
        converted_sha = sha256_file(converted)
        made = []
        for variant in self.pipeline.variants:
            skip = _unavailable(variant) or self._not_compilable(variant)
            if skip:
                console.warn(f"Variant {variant.name} skipped: {skip}")
                self.manifest.record(StageRecord(f"{_variant_stage(variant)}:{variant.name}", "", "skipped",
                                                 note=skip))
                continue
            if isinstance(variant.options, CompileOptions):
                made.append(self.compile(variant.name, variant.options))
                continue
            options = variant.options
            if self.onnx is not None:  # no convert manifest carries [model]'s task and decoder: each variant does
                options = _with_model_task(options, self.pipeline)
            made.append(optimize_stage(self.manifest, self.pipeline, variant.name, options, converted, converted_sha,
                                        self.versions))
        return made

    def compile(self, name: str, options: CompileOptions) -> Path:
        """An AOTInductor variant, compiled from the PyTorch model: keyed by the model as convert is, its options,
        the versions and the machine it is compiled on (its code is made for that CPU or GPU)."""
        from trtpipe.hardware import cpu_model

        pipeline = self.pipeline
        output = artifact_path(self.repository, f"{pipeline.name}_{name}", ArtifactKind.AOTI)
        model_options = to_plain(pipeline.model) | {"source": _source_identity(pipeline, self.model), "name": None}
        key = stage_key(stage="compile", model=model_options, options=to_plain(options), versions=self.versions,
                        cpu=cpu_model(), gpu=_gpu_name() if options.device is Device.CUDA else None)

        def do_compile() -> list[Path]:
            from trtpipe.compile.stage import compile_aoti

            result = compile_aoti(self.model(), output, options)
            return [result.path, result.manifest_path]  # a package is loaded only beside its manifest

        return run_stage(self.manifest, f"compile:{name}", key, do_compile)[0]

    def _not_compilable(self, variant: Variant) -> str | None:
        if isinstance(variant.options, CompileOptions) and self.onnx is not None:
            return (f"an AOTInductor package is compiled from the PyTorch model, and [model] source "
                    f"{self.pipeline.model.source} is an ONNX file")
        return None

    def build(self, onnx_files: list[Path]) -> list[Path]:
        """TensorRT engines, where TensorRT and a GPU exist (from the ONNX files among the artifacts)."""
        onnx_files = [f for f in onnx_files if ArtifactKind.for_path(f.name) is ArtifactKind.ONNX]
        return build_stages(self.manifest, self.pipeline, onnx_files)

    def bench(self, artifacts: list[Path]) -> tuple[Path, list[BenchRow]]:
        from trtpipe.hardware import cpu_model

        bench_path = self.reports / "bench.json"
        # An ONNX source is the reference row: its copy is not benched beside it; how it is read ([model]) is keyed.
        benched = self._runnable_here(artifacts[1:] if self.onnx is not None else artifacts)
        reference = {"reference": to_plain(self.pipeline.model)} if self.onnx is not None else {}
        key = stage_key(stage="bench", artifacts=[sha256_file(a) for a in artifacts],
                        options=to_plain(self.pipeline.bench), cpu=cpu_model(), schema=BENCH_SCHEMA,
                        versions=self.versions, benched=[str(p) for p in benched], **reference)

        def do_bench() -> list[Path]:
            from trtpipe.bench.runner import run_benchmark
            from trtpipe.report.tables import print_table, write_reports

            report = run_benchmark(self.reference(), benched, self.pipeline.bench)
            print_table(report)
            write_reports(report, bench_path, self.reports / "bench.md")
            return [bench_path]

        run_stage(self.manifest, "bench", key, do_bench, force="--rebench" if self.rebench else None)
        results = json.loads(bench_path.read_text())
        return bench_path, [BenchRow.from_dict(r) for r in results["results"]]

    def _runnable_here(self, artifacts: list[Path]) -> list[Path]:
        """The artifacts this CPU may run: a CPU-target INT8 file recorded unsafe on this CPU's class (8-bit weights
        without VNNI) is left out of bench and selection with one line, unless [bench] allow_cpu_mismatch."""
        from trtpipe.artifact.description import check_cpu, describe_artifact
        from trtpipe.hardware import cpu_class

        here, kept = cpu_class(), []
        for path in artifacts:
            try:
                if path.suffix == ArtifactKind.ONNX.suffixes[0]:
                    check_cpu(describe_artifact(path), here, allow=self.pipeline.bench.allow_cpu_mismatch)
                kept.append(path)
            except BadInput as unsafe:
                console.warn(f"{path.parent.parent.name} left out of bench and selection: {unsafe.message}")
                self.manifest.record(StageRecord(f"bench:{path.parent.parent.name}", "", "skipped",
                                                 note=unsafe.message))
        return kept

    def select(self, rows: list[BenchRow]) -> _Selection:
        """The variant to deploy and the batch advice, from the bench rows; the choice is written beside the
        model's folder in the repository."""
        select = self.pipeline.select
        batch = select.batch or min(r.batch for r in rows)
        choice = choose(rows, batch=batch, latency_budget_ms=select.latency_budget_ms,
                        max_accuracy_drop=select.max_accuracy_drop, memory_budget_mb=select.memory_budget_mb,
                        fit_to=_fit_to(rows))
        advice = batch_advice(rows, choice.variant, select.latency_budget_ms, select.memory_budget_mb) \
            if choice else None
        outside = outside_limits(rows, batch=batch, latency_budget_ms=select.latency_budget_ms,
                                 max_accuracy_drop=select.max_accuracy_drop, memory_budget_mb=select.memory_budget_mb)
        decide = None
        if choice and choice.undecided:
            decide = how_to_decide(choice.undecided, self.pipeline)
        elif choice and choice.over:
            decide = over_budget(self.pipeline)
        undecided = undecided_limits(rows, batch=batch, latency_budget_ms=select.latency_budget_ms,
                                     max_accuracy_drop=select.max_accuracy_drop,
                                     memory_budget_mb=select.memory_budget_mb)
        selection = _Selection(choice, advice, batch, outside, decide=decide, undecided=undecided)
        if choice and choice.status == "chosen":
            if choice.flagged:  # amber: the measurement it rests on is flagged (ranking.py)
                console.warn(f"Chosen under load: {choice.variant} — {choice.reason}" if "under load" in choice.flagged
                             else f"Chosen from an unstable measurement: {choice.variant} — {choice.reason}")
            elif str(Limit.ACCURACY) in choice.undecided:  # amber: within the budget on the best estimate only
                console.warn(f"Chosen, undecided on accuracy: {choice.variant} — {choice.reason}")
            else:
                console.success(f"Chosen: {choice.variant} — {choice.reason}")
            write_json_atomic(self.repository / self.pipeline.name / "chosen.json", selection.summary)
        elif choice and choice.status == "undecided":
            console.warn(f"Undecided — {choice.reason}")
        elif choice:
            console.warn(f"Chosen: none — {choice.reason}")
        if decide:
            console.note(decide)
        if advice:
            console.note(f"Batch advice: {advice['reason']}")
        return selection

    def report(self, bench_path: Path, selection: _Selection) -> None:
        """The HTML and Markdown report: the bench rows, the choice, and what the pipeline left out on this
        machine and why (a reader of the report was not there to see the warnings)."""
        left_out = [f"{_stage_title(s.stage)}: {s.note}" for s in self.manifest.stages
                    if s.status == "skipped" and s.note]
        summary = selection.summary | {"left_out": left_out, "outside": selection.outside,
                                       "undecided": selection.undecided}
        key = stage_key(stage="report", bench=sha256_file(bench_path), summary=summary, versions=self.versions)

        def do_report() -> list[Path]:
            from trtpipe.report.html import load_results, write_report

            html_path, markdown_path = self.reports / "report.html", self.reports / "report.md"
            write_report(load_results(bench_path), html_path, markdown_path, summary, batch=selection.batch)
            console.success(f"Report: {html_path} and {markdown_path}")
            return [html_path, markdown_path]

        run_stage(self.manifest, "report", key, do_report)

    def export_triton(self, artifacts: list[Path], selection: _Selection) -> None:
        """A Triton repository of every artifact; the chosen pair runs there on the runtime it was chosen on."""
        triton = self.pipeline.output.triton
        if triton is None:  # run() exports only where [output] names a folder
            return
        choice = selection.choice
        key = stage_key(stage="export-triton", artifacts=[sha256_file(a) for a in artifacts], output=str(triton),
                        serve=to_plain(self.pipeline.serve), chosen=choice.__dict__ if choice else None)

        def do_export() -> list[Path]:
            from trtpipe.artifact.description import artifact_name
            from trtpipe.runtime.registry import runtimes
            from trtpipe.serve.repository.triton import export

            named = {artifact_name(a): a for a in artifacts}
            chosen_runtime = {}
            if choice and choice.artifact and choice.runtime in runtimes(ArtifactKind.ONNX):
                chosen_runtime[artifact_name(Path(choice.artifact))] = choice.runtime
            return [p for p in export(named, triton, self.pipeline.serve, runtimes=chosen_runtime) if p.is_file()]

        run_stage(self.manifest, "export-triton", key, do_export)

    def finish(self, selection: _Selection) -> dict[str, Any]:
        """Write the run manifest and say what ran; returns its content."""
        total = time.perf_counter() - self.started
        pipeline, manifest = self.pipeline, self.manifest
        content = {"pipeline": str(pipeline.path) if pipeline.path else None, "model": pipeline.name,
                   "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                   "total_seconds": round(total, 2), **selection.summary}
        manifest.write(content)
        ran = sum(s.status == "ran" for s in manifest.stages)
        console.success(f"{pipeline.name}: {ran} stage(s) ran, {len(manifest.stages) - ran} reused or skipped, "
                        f"in {total:.1f} s; run manifest {manifest.path}")
        return {**content, "stages": [s.__dict__ for s in manifest.stages]}


def how_to_decide(limits: tuple[str, ...], pipeline: Pipeline) -> str:
    """What decides a limit select could not: for latency, a new measurement (longer, on a quieter machine); for
    accuracy, more held-out samples (a new measurement would give the same figure)."""
    target = pipeline.path or pipeline.model.source
    steps = []
    if str(Limit.LATENCY) in limits:
        longer = max(2 * pipeline.bench.duration, 10.0)
        steps.append(f"the machine was too noisy to decide on latency: measure again with `trtpipe run {target} "
                     f"--rebench --set bench.duration={longer:g}`, on a quieter machine (stop other work, or leave it "
                     "cores with --set bench.threads=N)")
    if str(Limit.ACCURACY) in limits:
        steps.append("the held-out samples were too few to decide on accuracy: judge on more of them (the number "
                     "that would decide is in the line above), or loosen max_accuracy_drop")
    return "To decide: " + "; ".join(steps) + "."


def over_budget(pipeline: Pipeline) -> str:
    """What to do when every variant's tail certainly exceeds the latency budget: on a shared machine the tail moves
    with the other work, so measure where the model will run, or set a budget this CPU holds."""
    target = pipeline.path or pipeline.model.source
    return (f"No variant holds the latency budget on this machine as it ran: measure again where nothing else runs "
            f"(`trtpipe run {target} --rebench`; with other work beside it, --set bench.threads=N leaves it cores), "
            "or set a budget this CPU holds (--latency-budget-ms).")


def _onnx_source(pipeline: Pipeline) -> OnnxReference | None:
    """The FP32 ONNX file (or packaged model) ``[model] source`` names, as bench's reference; None for a PyTorch
    model. A quantised file is refused: variants are made from, and judged against, FP32."""
    from trtpipe.artifact.description import describe_artifact
    from trtpipe.bench.reference import onnx_reference

    source = str(pipeline.model.source)
    where = f"{pipeline.path}: " if pipeline.path else ""
    if source.lower().endswith(".onnx"):
        if not Path(source).is_file():
            raise BadInput(f"{where}[model] source {source} does not exist.")
        precision = describe_artifact(Path(source)).precision
        if precision is not Precision.FP32:
            raise BadInput(f"{where}[model] source {source} is {precision}: a pipeline starts from the FP32 ONNX "
                           "(the file it was quantised from) or from the PyTorch model.")
    reference = onnx_reference(source, pipeline.model)
    if reference is not None and pipeline.convert != ConvertOptions():
        console.warn(f"{where}[convert] is not used: the source {source} is an ONNX file already, so nothing is "
                     "converted (remove the section, or give the PyTorch model as the source).")
    return reference


def _with_model_task(options: OptimizeOptions, pipeline: Pipeline) -> OptimizeOptions:
    """A variant's options with [model]'s task and postprocess where it names none of its own."""
    model = pipeline.model
    return replace(options, task=options.task or model.task, postprocess=options.postprocess or model.postprocess)


def _unavailable(variant: Variant) -> str | None:
    """Why a variant cannot be made useful on this machine, or None: BF16 needs BF16 hardware and OpenVINO; an
    AOTInductor variant needs its device, and kernels there for its precision."""
    if isinstance(variant.options, CompileOptions):
        from trtpipe.compile.devices import unsupported

        return unsupported(variant.options.precision, variant.options.device)
    if variant.options.precision is not Precision.BF16:
        return None
    from trtpipe.hardware import has_bf16

    if not has_bf16():
        return "this CPU has neither AVX512-BF16 nor AMX, so BF16 would be emulated (slower than FP32)"
    from trtpipe.runtime.registry import backend_name, install_line, installed

    pinned = Precision.BF16.pinned_runtime
    if pinned is not None and not installed(pinned):
        return f"BF16 kernels come from {backend_name(pinned)}, which is not installed ({install_line(pinned)})"
    return None


def _variant_stage(variant: Variant) -> str:
    """The stage that makes a variant: optimize, or compile for an AOTInductor one."""
    return "compile" if isinstance(variant.options, CompileOptions) else "optimize"


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def _fit_to(rows: list[BenchRow]) -> dict[str, str]:
    """Variant -> why its accuracy figure is on data it was fit to, from each artifact's optimize manifest (select
    then prefers a variant judged on data it was not fit to, and says so)."""
    from trtpipe.artifact.records.manifest import read_manifest
    from trtpipe.pipeline.select import fit_to_caveat

    caveats: dict[str, str] = {}
    for row in rows:
        if row.artifact and Path(row.artifact).suffix == ArtifactKind.ONNX.suffixes[0] and Path(row.artifact).is_file():
            manifest = read_manifest(Path(row.artifact))
            data = manifest.data if manifest is not None else None
            caveat = fit_to_caveat(data)
            if caveat:
                caveats[row.variant] = caveat
    return caveats


def _stage_title(stage: str) -> str:
    """A stage's name as the report's reader knows it: ``optimize:bf16`` is the variant bf16."""
    kind, _, name = stage.partition(":")
    if kind in ("optimize", "compile") and name:
        return f"Variant {name}"
    if kind == "bench" and name:
        return f"Artifact {name}, not benched"
    return {"build": "TensorRT engine build"}.get(stage, stage)
