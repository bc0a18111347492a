"""The pipeline: convert -> optimize (each variant) -> build (where TensorRT and a GPU exist) -> bench ->
select -> report -> optional Triton export. Every stage is keyed by its inputs and reused when unchanged."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.errors import MissingDependency
from trtpipe.files import sha256_file, write_json_atomic
from trtpipe.options import to_plain
from trtpipe.pipeline.cache import RunManifest, StageRecord, data_identity, stage_key
from trtpipe.pipeline.config import Pipeline, Variant
from trtpipe.pipeline.select import batch_advice, choose
from trtpipe.vocab import REPOSITORY_VERSION, ArtifactKind, Precision, __version__


def _artifact_path(repository: Path, name: str, kind: ArtifactKind = ArtifactKind.ONNX) -> Path:
    folder = repository / name / REPOSITORY_VERSION
    folder.mkdir(parents=True, exist_ok=True)
    return folder / kind.repository_file


def _stage(manifest: RunManifest, stage: str, key: str, run: Callable[[], list[Path]]) -> list[Path]:
    cached = manifest.reusable(stage, key)
    if cached is not None:
        console.note(f"{stage}: unchanged (key {key[:12]}), reusing {', '.join(cached) or 'its results'}")
        manifest.record(StageRecord(stage, key, "cached", 0.0, cached))
        return [Path(p) for p in cached]
    console.err.rule(f"[bold]{stage}", style="cyan")
    start = time.perf_counter()
    produced = run()
    seconds = time.perf_counter() - start
    manifest.record(StageRecord(stage, key, "ran", round(seconds, 3), {str(p): sha256_file(p) for p in produced}))
    return produced


def _source_identity(pipeline: Pipeline) -> str:
    source = str(pipeline.model.source)
    path = Path(source.split(":")[0]) if ":" in source else Path(source)
    return sha256_file(path) if path.is_file() else source


def run_pipeline(pipeline: Pipeline) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the run manifest's content."""
    import onnxruntime
    import torch

    from trtpipe.hardware import cpu_model

    start = time.perf_counter()
    reports = pipeline.output.reports / pipeline.name
    repository = pipeline.output.repository
    reports.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(reports / "run.json")
    versions = {"trtpipe": __version__, "torch": torch.__version__, "onnxruntime": onnxruntime.__version__}
    loaded_model: list[Any] = []

    def model() -> Any:
        if not loaded_model:
            from trtpipe.models.loader import load_model

            loaded_model.append(load_model(str(pipeline.model.source), arch=pipeline.model.arch,
                                           input_shape=pipeline.model.input_shape,
                                           trust_checkpoint=pipeline.model.trust_checkpoint))
        return loaded_model[0]

    # convert
    onnx_path = _artifact_path(repository, pipeline.name)
    model_options = to_plain(pipeline.model) | {"source": _source_identity(pipeline), "name": None}
    convert_key = stage_key(stage="convert", model=model_options, options=to_plain(pipeline.convert),
                            versions=versions)

    def do_convert() -> list[Path]:
        from trtpipe.convert.stage import convert

        return [convert(model(), onnx_path, pipeline.convert).path]

    converted = _stage(manifest, "convert", convert_key, do_convert)[0]
    converted_sha = sha256_file(converted)

    # optimize, one stage per variant
    artifacts: list[Path] = [converted]
    for variant in pipeline.variants:
        skip = _unavailable(variant)
        if skip:
            console.warn(f"Variant {variant.name} skipped: {skip}")
            manifest.record(StageRecord(f"optimize:{variant.name}", "", "skipped", note=skip))
            continue
        artifacts.append(_optimize_stage(manifest, pipeline, variant, converted, converted_sha, versions))

    # build: TensorRT engines where TensorRT and a GPU exist
    artifacts += _build_stages(manifest, pipeline, list(artifacts))

    # bench
    bench_path = reports / "bench.json"
    bench_key = stage_key(stage="bench", artifacts=[sha256_file(a) for a in artifacts],
                          options=to_plain(pipeline.bench), cpu=cpu_model(), schema=BENCH_SCHEMA, versions=versions)

    def do_bench() -> list[Path]:
        from trtpipe.bench.runner import run_benchmark
        from trtpipe.report.tables import print_table, write_reports

        report = run_benchmark(model(), artifacts, pipeline.bench)
        print_table(report)
        write_reports(report, bench_path, reports / "bench.md")
        return [bench_path]

    _stage(manifest, "bench", bench_key, do_bench)
    results = json.loads(bench_path.read_text())
    rows = [BenchRow.from_dict(r) for r in results["results"]]

    # select and advise
    select = pipeline.select
    select_batch = select.batch or min(r.batch for r in rows)
    choice = choose(rows, batch=select_batch, latency_budget_ms=select.latency_budget_ms,
                    max_accuracy_drop=select.max_accuracy_drop, memory_budget_mb=select.memory_budget_mb)
    advice = batch_advice(rows, choice.variant, select.latency_budget_ms, select.memory_budget_mb) if choice else None
    summary: dict[str, Any] = {"choice": choice.__dict__ if choice else None, "batch_advice": advice}
    if choice:
        (console.success if choice.artifact else console.warn)(f"Chosen: {choice.variant} — {choice.reason}")
        if choice.artifact:
            write_json_atomic(repository / pipeline.name / "chosen.json", summary)
    if advice:
        console.note(f"Batch advice: {advice['reason']}")

    # report: the choice, and what the pipeline left out on this machine and why (a reader of the report was
    # not there to see the warnings)
    left_out = [f"{_stage_title(s.stage)}: {s.note}" for s in manifest.stages if s.status == "skipped" and s.note]
    report_summary = summary | {"left_out": left_out}
    report_key = stage_key(stage="report", bench=sha256_file(bench_path), summary=report_summary, versions=versions)

    def do_report() -> list[Path]:
        from trtpipe.report.html import load_results, write_report

        html_path, markdown_path = reports / "report.html", reports / "report.md"
        write_report(load_results(bench_path), html_path, markdown_path, report_summary, batch=select_batch)
        console.success(f"Report: {html_path} and {markdown_path}")
        return [html_path, markdown_path]

    _stage(manifest, "report", report_key, do_report)

    triton = pipeline.output.triton
    if triton:
        triton_key = stage_key(stage="export-triton", artifacts=[sha256_file(a) for a in artifacts],
                               output=str(triton), serve=to_plain(pipeline.serve),
                               chosen=choice.__dict__ if choice else None)

        def do_export() -> list[Path]:
            from trtpipe.runtime.artifacts import artifact_name
            from trtpipe.serve.triton import export

            named = {artifact_name(a): a for a in artifacts}
            chosen_runtime = {}  # the chosen pair is exported to run on the runtime it was chosen on
            if choice and choice.artifact and choice.runtime in map(str, ArtifactKind.ONNX.runtimes):
                chosen_runtime[artifact_name(Path(choice.artifact))] = str(choice.runtime)
            return [p for p in export(named, triton, pipeline.serve, runtimes=chosen_runtime) if p.is_file()]

        _stage(manifest, "export-triton", triton_key, do_export)

    total = time.perf_counter() - start
    content = {"pipeline": str(pipeline.path) if pipeline.path else None, "model": pipeline.name,
               "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "total_seconds": round(total, 2),
               **summary}
    manifest.write(content)
    ran = sum(s.status == "ran" for s in manifest.stages)
    console.success(f"{pipeline.name}: {ran} stage(s) ran, {len(manifest.stages) - ran} reused or skipped, "
                    f"in {total:.1f} s; run manifest {manifest.path}")
    return {**content, "stages": [s.__dict__ for s in manifest.stages]}


def _unavailable(variant: Variant) -> str | None:
    """Why a variant cannot be made useful on this machine, or None: BF16 needs BF16 hardware and OpenVINO."""
    if Precision(variant.options.precision) is not Precision.BF16:
        return None
    from trtpipe.hardware import has_bf16

    if not has_bf16():
        return "this CPU has neither AVX512-BF16 nor AMX, so BF16 would be emulated (slower than FP32)"
    try:
        import openvino  # noqa: F401
    except ImportError:
        return "BF16 kernels come from OpenVINO, which is not installed (pip install 'trtpipe[openvino]')"
    return None


def _optimize_stage(manifest: RunManifest, pipeline: Pipeline, variant: Variant, converted: Path,
                    converted_sha: str, versions: dict[str, str]) -> Path:
    from trtpipe.optimize.stage import optimize

    output = _artifact_path(pipeline.output.repository, f"{pipeline.name}_{variant.name}")
    options = variant.options
    key = stage_key(stage="optimize", onnx=converted_sha, options=to_plain(options),
                    calib=data_identity(options.calib), eval=data_identity(options.eval), versions=versions)
    return _stage(manifest, f"optimize:{variant.name}", key,
                  lambda: [optimize(converted, output, options).path])[0]


def _build_stages(manifest: RunManifest, pipeline: Pipeline, onnx_files: list[Path]) -> list[Path]:
    if not pipeline.build_enabled:
        manifest.record(StageRecord("build", "", "skipped", note="disabled in the pipeline file"))
        return []
    from trtpipe.runtime.tensorrt.loader import import_tensorrt, require_cuda_gpu

    try:
        trt = import_tensorrt("Building TensorRT engines")
        gpu_name, capability = require_cuda_gpu("Building TensorRT engines")
    except MissingDependency as missing:
        console.note(f"build: skipped — {missing.message}")
        manifest.record(StageRecord("build", "", "skipped", note=missing.message))
        return []
    from trtpipe.engine.build import build_engine
    from trtpipe.runtime.artifacts import artifact_name, artifact_profile

    repository = pipeline.output.repository
    engines = []
    for onnx_path in onnx_files:
        if artifact_profile(onnx_path).pinned_runtime:  # a BF16 file is OpenVINO's
            continue
        name = f"{artifact_name(onnx_path)}_trt"
        output = _artifact_path(repository, name, ArtifactKind.TENSORRT_ENGINE)
        options = pipeline.build
        if options.timing_cache is None:
            options = replace(options, timing_cache=repository / ".trt-timing.cache")
        key = stage_key(stage="build", onnx=sha256_file(onnx_path), options=to_plain(options),
                        tensorrt=trt.__version__, gpu=gpu_name, capability=capability)
        engines += _stage(manifest, f"build:{name}", key,
                          lambda onnx_path=onnx_path, output=output, options=options: [
                              build_engine(onnx_path, output, options).engine])
    return engines


def _stage_title(stage: str) -> str:
    """A stage's name as the report's reader knows it: ``optimize:bf16`` is the variant bf16."""
    kind, _, name = stage.partition(":")
    return f"Variant {name}" if kind == "optimize" and name else {"build": "TensorRT engine build"}.get(stage, stage)
