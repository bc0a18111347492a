"""The pipeline: convert -> optimize (each variant) -> build (where TensorRT and a GPU exist) -> bench ->
select -> report -> optional Triton export. Every stage is keyed by its inputs and reused when unchanged."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trtpipe import __version__, console
from trtpipe._files import sha256_file, write_json_atomic
from trtpipe.errors import MissingDependency
from trtpipe.pipeline.cache import RunManifest, StageRecord, data_identity, stage_key
from trtpipe.pipeline.config import Pipeline, Variant
from trtpipe.pipeline.select import batch_advice, choose

VERSION_DIR = "1"


def _artifact_path(repository: Path, name: str, filename: str = "model.onnx") -> Path:
    folder = repository / name / VERSION_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / filename


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
    path = Path(pipeline.source.split(":")[0]) if ":" in pipeline.source else Path(pipeline.source)
    return sha256_file(path) if path.is_file() else pipeline.source


def run_pipeline(pipeline: Pipeline) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the run manifest's content."""
    import onnxruntime
    import torch

    from trtpipe.hardware import cpu_model

    start = time.perf_counter()
    reports = pipeline.reports / pipeline.name
    reports.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(reports / "run.json")
    versions = {"trtpipe": __version__, "torch": torch.__version__, "onnxruntime": onnxruntime.__version__}
    loaded_model: list[Any] = []

    def model() -> Any:
        if not loaded_model:
            from trtpipe.models.loader import load_model

            loaded_model.append(load_model(pipeline.source, arch=pipeline.arch, input_shape=pipeline.input_shape,
                                           trust_checkpoint=pipeline.trust_checkpoint))
        return loaded_model[0]

    # convert
    onnx_path = _artifact_path(pipeline.repository, pipeline.name)
    convert_key = stage_key(stage="convert", source=_source_identity(pipeline), arch=pipeline.arch,
                            input_shape=pipeline.input_shape, opset=pipeline.opset,
                            dynamic_batch=pipeline.dynamic_batch, versions=versions)

    def do_convert() -> list[Path]:
        from trtpipe.convert import convert

        result = convert(model(), onnx_path, opset=pipeline.opset, dynamic_batch=pipeline.dynamic_batch)
        return [result.path]

    converted = _stage(manifest, "convert", convert_key, do_convert)[0]
    converted_sha = sha256_file(converted)

    # optimize, one stage per variant
    artifacts: list[Path] = [converted]
    for variant in pipeline.variants:
        artifacts.append(_optimize_stage(manifest, pipeline, variant, converted, converted_sha, versions))

    # build: TensorRT engines where TensorRT and a GPU exist
    artifacts += _build_stages(manifest, pipeline, list(artifacts))

    # bench
    bench_path = reports / "bench.json"
    bench_key = stage_key(stage="bench", artifacts=[sha256_file(a) for a in artifacts], batches=pipeline.batches,
                          threads=pipeline.threads, warmup=pipeline.warmup, iters=pipeline.iters,
                          duration=pipeline.duration, cpu=cpu_model(), versions=versions)

    def do_bench() -> list[Path]:
        from trtpipe.bench import BenchSettings, run_benchmark
        from trtpipe.bench.report import print_table, write_reports

        settings = BenchSettings(batches=pipeline.batches, warmup=pipeline.warmup, iters=pipeline.iters,
                                 duration_s=None if pipeline.iters else pipeline.duration)
        if pipeline.threads:
            settings.threads = pipeline.threads
        report = run_benchmark(model(), artifacts, settings)
        print_table(report)
        write_reports(report, bench_path, reports / "bench.md")
        return [bench_path]

    _stage(manifest, "bench", bench_key, do_bench)
    results = json.loads(bench_path.read_text())

    # select and advise
    choice = choose(results["results"], batch=pipeline.select_batch, latency_budget_ms=pipeline.latency_budget_ms,
                    max_accuracy_drop=pipeline.max_accuracy_drop)
    advice = batch_advice(results["results"], choice.variant, pipeline.latency_budget_ms) if choice else None
    summary: dict[str, Any] = {"choice": choice.__dict__ if choice else None, "batch_advice": advice}
    if choice:
        (console.success if choice.artifact else console.warn)(f"Chosen: {choice.variant} — {choice.reason}")
        if choice.artifact:
            write_json_atomic(pipeline.repository / pipeline.name / "chosen.json", summary)
    if advice:
        console.note(f"Batch advice: {advice['reason']}")

    # report
    report_key = stage_key(stage="report", bench=sha256_file(bench_path), summary=summary, versions=versions)

    def do_report() -> list[Path]:
        from trtpipe.bench.html_report import load_results, write_report

        html_path, markdown_path = reports / "report.html", reports / "report.md"
        write_report(load_results(bench_path), html_path, markdown_path, summary, batch=pipeline.select_batch)
        console.success(f"Report: {html_path} and {markdown_path}")
        return [html_path, markdown_path]

    _stage(manifest, "report", report_key, do_report)

    if pipeline.triton:
        triton_key = stage_key(stage="export-triton", artifacts=[sha256_file(a) for a in artifacts],
                               output=str(pipeline.triton))

        def do_export() -> list[Path]:
            from trtpipe.runtime.artifacts import artifact_name
            from trtpipe.serve.triton import export

            named = {artifact_name(a): a for a in artifacts}
            return [p for p in export(named, pipeline.triton) if p.is_file()]  # type: ignore[arg-type]

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


def _optimize_stage(manifest: RunManifest, pipeline: Pipeline, variant: Variant, converted: Path,
                    converted_sha: str, versions: dict[str, str]) -> Path:
    from trtpipe.optimize import OptimizeOptions, optimize

    output = _artifact_path(pipeline.repository, f"{pipeline.name}_{variant.name}")
    options = OptimizeOptions(precision=variant.precision, target=variant.target, fuse=variant.fuse,
                              calib=variant.calib if variant.precision != "fp32" else None,
                              calib_method=variant.calib_method, calib_samples=variant.calib_samples,
                              eval=variant.eval, max_accuracy_drop=variant.max_accuracy_drop)
    key = stage_key(stage="optimize", onnx=converted_sha, options=options.to_dict(),
                    calib=data_identity(options.calib), eval=data_identity(options.eval), versions=versions)
    return _stage(manifest, f"optimize:{variant.name}", key,
                  lambda: [optimize(converted, output, options).path])[0]


def _build_stages(manifest: RunManifest, pipeline: Pipeline, onnx_files: list[Path]) -> list[Path]:
    if not pipeline.build.get("enabled", True):
        manifest.record(StageRecord("build", "", "skipped", note="disabled in the pipeline file"))
        return []
    from trtpipe.build import require_cuda_gpu
    from trtpipe.build.tensorrt import import_tensorrt

    try:
        trt = import_tensorrt("Building TensorRT engines")
        gpu_name, capability = require_cuda_gpu("Building TensorRT engines")
    except MissingDependency as missing:
        console.note(f"build: skipped — {missing.message}")
        manifest.record(StageRecord("build", "", "skipped", note=missing.message))
        return []
    from trtpipe.build import BuildOptions, build_engine
    from trtpipe.build.specs import parse_size
    from trtpipe.runtime.artifacts import artifact_name

    engines = []
    for onnx_path in onnx_files:
        name = f"{artifact_name(onnx_path)}_trt"
        output = _artifact_path(pipeline.repository, name, "model.plan")
        workspace = parse_size(pipeline.build["workspace"]) if "workspace" in pipeline.build else None
        options = BuildOptions(workspace=workspace, opt_level=pipeline.build.get("opt_level"),
                               hardware_compat=pipeline.build.get("hardware_compat", "none"),
                               version_compat=pipeline.build.get("version_compat", False),
                               timing_cache=pipeline.repository / ".trt-timing.cache")
        key = stage_key(stage="build", onnx=sha256_file(onnx_path), options=repr(options), tensorrt=trt.__version__,
                        gpu=gpu_name, capability=capability)
        engines += _stage(manifest, f"build:{name}", key,
                          lambda onnx_path=onnx_path, output=output, options=options: [
                              build_engine(onnx_path, output, options).engine])
    return engines
