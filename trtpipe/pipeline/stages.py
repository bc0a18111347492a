"""One stage of the pipeline, run or reused: where a stage's artifact goes in the repository, running a stage under
its key (or reusing what it made last time with that key), and the stages whose work is more than one call: an ONNX
source placed in the repository as it is, a variant optimized, TensorRT engines built where TensorRT and a GPU
exist. ``trtpipe.pipeline.run`` orders them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from trtpipe import console
from trtpipe.errors import MissingDependency
from trtpipe.files import sha256_file
from trtpipe.options import to_plain
from trtpipe.pipeline.cache import RunManifest, StageRecord, data_identity, stage_key
from trtpipe.pipeline.config import Pipeline
from trtpipe.vocab import REPOSITORY_VERSION, ArtifactKind

if TYPE_CHECKING:
    from trtpipe.engine.options import EngineOptions
    from trtpipe.optimize.options import OptimizeOptions


def artifact_path(repository: Path, name: str, kind: ArtifactKind = ArtifactKind.ONNX) -> Path:
    folder = repository / name / REPOSITORY_VERSION
    folder.mkdir(parents=True, exist_ok=True)
    return folder / kind.repository_file


def run_stage(manifest: RunManifest, stage: str, key: str, run: Callable[[], list[Path]], *,
           force: str | None = None) -> list[Path]:
    """Run a stage, or reuse what it made last time with the same key; ``force``: why it runs regardless."""
    cached = None if force else manifest.reusable(stage, key)
    if force:
        console.note(f"{stage}: running again ({force})")
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


def place_onnx(source: Path, output: Path) -> list[Path]:
    """An ONNX source in the repository, as it is: the file, its external weights and its manifest (convert's
    record of the PyTorch model, when it has one), each written under a temporary name and renamed into place."""
    import shutil

    from trtpipe.artifact.records.manifest import commit_artifact, manifest_path, read_manifest
    from trtpipe.files import atomic_path, staged_path
    from trtpipe.onnx_info import external_data_files, load_onnx

    if source.resolve() == output.resolve():  # run from the repository it writes to
        return [output]
    files = [(source, output)] + [(source.parent / name, output.parent / name)
                                  for name in external_data_files(load_onnx(source, load_weights=False))]
    for origin, destination in files[1:]:
        with atomic_path(destination) as tmp:
            shutil.copyfile(origin, tmp)
    manifest = read_manifest(source)
    with staged_path(output) as tmp:
        shutil.copyfile(source, tmp)
        if manifest is not None:  # the model and its manifest as one commit (another run may write this path)
            commit_artifact(tmp, output, replace(manifest, path=output.name))
        else:  # a manifest left there by an earlier source would describe another file
            manifest_path(output).unlink(missing_ok=True)
            tmp.replace(output)
    return [destination for _, destination in files]


def optimize_stage(manifest: RunManifest, pipeline: Pipeline, name: str, options: OptimizeOptions, converted: Path,
                    converted_sha: str, versions: dict[str, str]) -> Path:
    from trtpipe.optimize.stage import optimize

    output = artifact_path(pipeline.output.repository, f"{pipeline.name}_{name}")
    from trtpipe.hardware import cpu_class

    # The CPU class INT8 is made for defaults to this machine's: another machine's cached file is not this one's.
    key = stage_key(stage="optimize", onnx=converted_sha, options=to_plain(options),
                    calib=data_identity(options.calib), eval=data_identity(options.eval), versions=versions,
                    cpu_class=str(options.cpu_class or cpu_class()))
    return run_stage(manifest, f"optimize:{name}", key,
                  lambda: [optimize(converted, output, options).path])[0]


def build_stages(manifest: RunManifest, pipeline: Pipeline, onnx_files: list[Path]) -> list[Path]:
    if not pipeline.build_enabled:
        manifest.record(StageRecord("build", "", "skipped", note="disabled in the pipeline file"))
        return []
    from trtpipe.engine.build import build_machine

    try:
        version, gpu_name, capability = build_machine("Building TensorRT engines")
    except MissingDependency as missing:
        console.note(f"build: skipped — {missing.message}")
        manifest.record(StageRecord("build", "", "skipped", note=missing.message))
        return []
    from trtpipe.artifact.description import artifact_name, describe_artifact
    from trtpipe.engine.build import build_engine

    repository = pipeline.output.repository
    engines = []
    for onnx_path in onnx_files:
        if describe_artifact(onnx_path).pinned_runtime:  # a BF16 file is OpenVINO's
            continue
        name = f"{artifact_name(onnx_path)}_trt"
        output = artifact_path(repository, name, ArtifactKind.TENSORRT_ENGINE)
        options = pipeline.build
        if options.timing_cache is None:
            options = replace(options, timing_cache=repository / ".trt-timing.cache")
        key = stage_key(stage="build", onnx=sha256_file(onnx_path), options=to_plain(options),
                        tensorrt=version, gpu=gpu_name, capability=capability)

        def do_build(onnx_path: Path = onnx_path, output: Path = output,
                     options: EngineOptions = options) -> list[Path]:
            return [build_engine(onnx_path, output, options).engine]

        engines += run_stage(manifest, f"build:{name}", key, do_build)
    return engines
