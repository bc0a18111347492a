"""Stage 3, engine build: a TensorRT engine from an (optimized) ONNX file, with a sidecar that says what it is for.

Precision comes from the ONNX's description (its manifest, else its FP16 casts and Q/DQ nodes): the network is
strongly typed, which is the only kind TensorRT 11 builds. The pure parts (shape specs, profiles, sizes, sidecar and
precision checks) are planned before TensorRT is imported, so a bad option fails in a second on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from trtpipe import console
from trtpipe.artifact.description import ArtifactDescription, describe_artifact
from trtpipe.artifact.records.engine import EngineSidecar, commit_engine
from trtpipe.engine.layers import check_precision, precision_counts, summarise
from trtpipe.engine.options import EngineOptions
from trtpipe.engine.specs import InputInfo, ProfileShapes, plan_profile, plan_profiles, profile_text
from trtpipe.errors import BadInput
from trtpipe.files import (
    require_file,
    require_parent_dir,
    sha256_file,
    write_json_atomic,
)
from trtpipe.runtime.tensorrt.loader import import_tensorrt, require_cuda_gpu
from trtpipe.runtime.tensorrt.versions import build_features, require
from trtpipe.vocab import Precision

if TYPE_CHECKING:
    from trtpipe.engine.builder import BuiltEngine


@dataclass
class BuildResult:
    engine: Path
    sidecar: EngineSidecar
    layer_info: Path


def _profile_inputs(description: ArtifactDescription) -> list[InputInfo]:
    return [InputInfo(t.name, tuple(d if isinstance(d, int) and d > 0 else None for d in t.shape))
            for t in description.inputs]


def planned_profile(onnx_path: Path, options: EngineOptions,
                    description: ArtifactDescription | None = None) -> list[ProfileShapes]:
    """The first optimisation profile the build will use (the only one without --profiles)."""
    return planned_profiles(onnx_path, options, description)[0]


def planned_profiles(onnx_path: Path, options: EngineOptions,
                     description: ArtifactDescription | None = None) -> list[list[ProfileShapes]]:
    """The optimisation profiles the build will use, planned from the ONNX's inputs and the options: those of
    --profiles, else the one of --shapes/--min-shapes/--opt-shapes/--max-shapes (refused together: which would
    win is not obvious)."""
    description = description or describe_artifact(onnx_path)
    inputs = _profile_inputs(description)
    if options.profiles:
        single = [flag for flag, value in (("--shapes", options.shapes), ("--min-shapes", options.min_shapes),
                                           ("--opt-shapes", options.opt_shapes), ("--max-shapes", options.max_shapes))
                  if value]
        if single:
            raise BadInput(f"--profiles gives every profile; {', '.join(single)} would describe one more: give the "
                           "shapes with --profiles only.")
        return plan_profiles(inputs, options.profiles)
    return [plan_profile(inputs, shapes=options.shapes, min_shapes=options.min_shapes, opt_shapes=options.opt_shapes,
                         max_shapes=options.max_shapes)]


def _check_conformance(onnx_path: Path) -> None:
    """TensorRT would refuse a graph that breaks its rules after minutes of work: say so first, on any machine."""
    from trtpipe.conformance.check import check_file, failure_message, print_report
    from trtpipe.vocab import Target

    report = check_file(onnx_path, Target.TENSORRT)
    if report.findings:
        print_report(report)
    if not report.passed:
        raise BadInput(failure_message(report))


def onnx_op_types(onnx_path: Path) -> dict[str, str]:
    """ONNX node name -> op type, so the precision check can tell a fused activation from a Conv (the weights
    are not read)."""
    from trtpipe.onnx_info import load_onnx

    model = load_onnx(onnx_path, load_weights=False)
    return {node.name: node.op_type for node in model.graph.node if node.name}


def build_engine(onnx_path: Path, output: Path, options: EngineOptions | None = None) -> BuildResult:
    """Build ``output`` (a .plan) from ``onnx_path``; writes the engine, its sidecar, layer information and the
    timing cache (merged with what other builds saved there, under a lock), each atomically."""
    options = options or EngineOptions()
    onnx_path, output = Path(onnx_path), Path(output)
    require_file(onnx_path, "ONNX file")
    require_parent_dir(output)
    # What the ONNX asks for (precision from its manifest or graph) and the nodes optimize kept in FP32 on purpose.
    description = describe_artifact(onnx_path)
    profiles = planned_profiles(onnx_path, options, description)
    precision, allowed_fp32 = description.precision, set(description.fp32_nodes)
    _check_conformance(onnx_path)
    trt, gpu_name, capability = _tensorrt_for_build(options)
    cache_in = bool(options.timing_cache and options.timing_cache.is_file() and options.timing_cache.stat().st_size)
    console.note(f"Building {precision} engine for {gpu_name} (compute capability {capability}) with TensorRT "
                 f"{trt.__version__}; " + "; ".join(f"profile {n}: {profile_text(p)}" for n, p in enumerate(profiles))
                 + ("; reusing timing cache" if cache_in else ""))
    built = _build_with_progress(trt, onnx_path, profiles, options)
    summaries = summarise(built.layer_information)
    check_precision(summaries, precision, allowed_fp32, onnx_op_types(onnx_path) if allowed_fp32 else None)
    if precision is Precision.FP32 and options.tf32:
        precision = Precision.TF32

    sidecar = commit_engine(output, built.engine, EngineSidecar(
        tensorrt_version=built.tensorrt_version, gpu_name=gpu_name, compute_capability=capability,
        hardware_compat=options.hardware_compat, version_compatible=options.version_compat,
        precision=precision,
        inputs=built.inputs, outputs=built.outputs,
        profiles=[[shapes.to_dict() for shapes in profile] for profile in profiles],
        workspace_bytes=options.workspace, opt_level=options.opt_level, build_seconds=round(built.seconds, 2),
        onnx_sha256=sha256_file(onnx_path),
    ))
    layer_info = options.layer_info or Path(f"{output}.layers.json")
    write_json_atomic(layer_info, built.layer_information)
    console.success(f"Built {output} in {built.seconds:.1f} s; compute layers by precision: "
                    f"{precision_counts(summaries)}")
    return BuildResult(output, sidecar, layer_info)


def build_machine(purpose: str) -> tuple[str, str, str]:
    """TensorRT's version, the GPU's name and its compute capability: what an engine built here is built with (a
    pipeline's build stage keys its cache on them); MissingDependency where TensorRT or a CUDA GPU is absent."""
    trt = import_tensorrt(purpose)
    gpu_name, capability = require_cuda_gpu(purpose)
    return str(trt.__version__), gpu_name, capability


def _tensorrt_for_build(options: EngineOptions) -> tuple[ModuleType, str, str]:
    """TensorRT, the GPU's name and its compute capability; refused first where TensorRT is missing, lacks a
    feature the options ask for, or there is no CUDA GPU."""
    trt = import_tensorrt("Building a TensorRT engine")
    require(build_features(hardware_compat=options.hardware_compat, version_compat=options.version_compat,
                           opt_level=options.opt_level, workspace=options.workspace),
            trt.__version__, "Building a TensorRT engine")
    gpu_name, capability = require_cuda_gpu("Building a TensorRT engine")
    return trt, gpu_name, capability


def _build_with_progress(trt: ModuleType, onnx_path: Path, profiles: list[list[ProfileShapes]],
                         options: EngineOptions) -> BuiltEngine:
    """The TensorRT build, each of its phases a progress bar (a sub-phase indented under its parent); builder notes
    become warnings."""
    from trtpipe.engine import builder as trt_layer

    with console.progress() as bar:
        tasks: dict[str, Any] = {}

        def on_phase(phase: str, done: int, total: int, parent: str | None) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase if not parent else f"  {phase}", total=max(total, 1))
            bar.update(tasks[phase], completed=done)

        return trt_layer.build(trt, onnx_path, profiles, workspace=options.workspace,
                               timing_cache=options.timing_cache, opt_level=options.opt_level,
                               hardware_compat=options.hardware_compat, version_compat=options.version_compat,
                               tf32=options.tf32, on_phase=on_phase, on_note=console.warn)
