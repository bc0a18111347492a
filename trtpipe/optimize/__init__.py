"""Stage 2, optimize: fusion, FP16 and INT8 written into the ONNX graph itself.

TensorRT 11 builds only strongly typed networks and reads INT8 from Q/DQ nodes, so precision lives in the
ONNX: the same optimized file then runs on TensorRT, ONNX Runtime's GPU providers and ONNX Runtime CPU.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe import __version__, console
from trtpipe._files import atomic_path, require_parent_dir, sha256_file, write_json_atomic
from trtpipe.convert import manifest_path
from trtpipe.errors import BadInput, VerificationFailed
from trtpipe.onnx_info import detect_precision, load_onnx, op_counts, topologically_sorted
from trtpipe.optimize.data import Dataset, ImagePreprocessing, load_dataset
from trtpipe.optimize.evaluate import Figures, figures, logits

PRECISIONS = ("fp32", "fp16", "int8")
# FP16 keeps ~3 significant digits; a conversion below this cosine has lost more than rounding.
FP16_MIN_COSINE = 0.999
FUSION_MIN_COSINE = 0.99999


@dataclass
class OptimizeOptions:
    precision: str = "fp32"
    target: str | None = None  # None: tensorrt where a CUDA GPU is visible, else cpu
    fuse: bool = True
    keep_io_fp32: bool = True
    calib: str | None = None
    calib_method: str = "minmax"
    calib_samples: int | None = None
    eval: str | None = None
    max_accuracy_drop: float | None = None
    max_fp32_nodes: int | None = None  # None: half of the quantised nodes
    calib_cache: Path | None = None
    preprocessing: ImagePreprocessing = field(default_factory=ImagePreprocessing)

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k != "preprocessing"} | {"preprocessing": self.preprocessing.__dict__}


@dataclass
class OptimizeResult:
    path: Path
    manifest_path: Path
    manifest: dict[str, Any]


def default_target() -> str:
    try:
        import torch

        return "tensorrt" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def optimize(source: Path, output: Path, options: OptimizeOptions) -> OptimizeResult:
    """Optimize the FP32 ONNX at ``source`` into ``output`` and prove what it costs in accuracy."""
    from trtpipe.optimize.int8.profiles import TARGETS

    started = time.perf_counter()
    source, output = Path(source), Path(output)
    _check_options(options)
    target = options.target or default_target()
    if target not in TARGETS:
        raise BadInput(f"Unknown target '{target}': choose one of {', '.join(TARGETS)}.")
    require_parent_dir(output)
    if source.resolve() == output.resolve():
        raise BadInput("The output would overwrite the input ONNX: choose another -o path.")
    model = load_onnx(source)
    precision = detect_precision(model)
    if precision != "fp32":
        kind = "quantised (it has Q/DQ or integer ops)" if precision == "int8" else "already FP16"
        raise BadInput(f"{source} is {kind}: give the FP32 ONNX that 'trtpipe convert' wrote.")
    _name_nodes(model)
    sample_shape, static_batch = _input_geometry(model, source)

    calib = _load(options.calib, sample_shape, "calibration", options.calib_samples, options.preprocessing)
    evaluation = _load(options.eval, sample_shape, "eval", None, options.preprocessing)
    probe = (calib or evaluation or _random_probe(sample_shape)).images
    manifest: dict[str, Any] = {
        "trtpipe_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "input": {"path": str(source), "sha256": sha256_file(source), "precision": "fp32"},
        "options": options.to_dict() | {"target": target},
        "data": {"calibration": _describe(calib), "eval": _describe(evaluation)},
    }

    fp32 = model
    if options.fuse:
        fp32 = _fuse(model, probe, static_batch, manifest)

    if options.precision == "fp32":
        result = fp32
    elif options.precision == "fp16":
        result = _fp16(fp32, calib, evaluation, options, static_batch, manifest)
    else:
        result = _int8(fp32, calib, evaluation, options, target, static_batch, output, manifest)

    topologically_sorted(result)
    with atomic_path(output) as tmp:
        onnx.save(result, str(tmp))
        onnx.checker.check_model(str(tmp))
    manifest["artifact"] = {"path": output.name, "format": "onnx", "precision": options.precision,
                            "target": target if options.precision == "int8" else None,
                            "sha256": sha256_file(output), "size_bytes": output.stat().st_size,
                            "ops": op_counts(result)}
    manifest["seconds"] = round(time.perf_counter() - started, 3)
    write_json_atomic(manifest_path(output), manifest)
    console.success(f"Wrote {output} ({options.precision}, {output.stat().st_size / 1e6:.2f} MB) and its manifest")
    return OptimizeResult(output, manifest_path(output), manifest)


def _check_options(options: OptimizeOptions) -> None:
    if options.precision not in PRECISIONS:
        raise BadInput(f"Unknown precision '{options.precision}': choose one of {', '.join(PRECISIONS)}.")
    if options.precision in ("fp16", "int8") and not options.calib:
        what = "INT8 calibration" if options.precision == "int8" else "FP16's range check"
        raise BadInput(f"{what} needs --calib DATA: 'digits', a .npy/.npz file, a folder of images, or 'random' "
                       "(speed tests only).")
    if options.max_accuracy_drop is not None and not options.eval:
        raise BadInput("--max-accuracy-drop needs --eval DATA (labelled) to measure accuracy on.")
    from trtpipe.optimize.int8.calibrate import METHODS

    if options.calib_method not in METHODS:
        raise BadInput(f"Unknown calibration method '{options.calib_method}': choose one of {', '.join(METHODS)}.")


def _name_nodes(model: onnx.ModelProto) -> None:
    """Fallback lists and reports address nodes by name; give unnamed ones a stable name."""
    used = {n.name for n in model.graph.node if n.name}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)


def _input_geometry(model: onnx.ModelProto, source: Path) -> tuple[tuple[int, ...], int | None]:
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise BadInput(f"{source} has {len(inputs)} inputs; trtpipe optimizes single-input CNNs.")
    dims = inputs[0].type.tensor_type.shape.dim
    values = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    if any(v is None for v in values[1:]):
        raise BadInput(f"{source} has dynamic dimensions besides the batch: re-export with a fixed --input-shape.")
    return tuple(int(v) for v in values[1:]), values[0]  # type: ignore[arg-type]


def _load(spec: str | None, sample_shape: tuple[int, ...], purpose: str, samples: int | None,
          preprocessing: ImagePreprocessing) -> Dataset | None:
    if spec is None:
        return None
    dataset = load_dataset(spec, sample_shape, purpose=purpose, samples=samples, preprocessing=preprocessing)
    console.note(f"{purpose.capitalize()} data: {dataset.source}, {len(dataset)} samples")
    return dataset


def _random_probe(sample_shape: tuple[int, ...]) -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset(rng.standard_normal((16, *sample_shape), dtype=np.float32), None, "16 seeded random inputs")


def _describe(dataset: Dataset | None) -> dict[str, Any] | None:
    if dataset is None:
        return None
    return {"source": dataset.source, "samples": len(dataset), "sha256": dataset.sha256,
            "labelled": dataset.labels is not None}


def _batches(dataset: Dataset, static_batch: int | None) -> list[np.ndarray]:
    size = static_batch or 32
    batches = dataset.batches(size)
    return [b for b in batches if len(b) == size] if static_batch else batches


def _compare(reference_model: onnx.ModelProto, candidate: onnx.ModelProto, data: Dataset, static_batch: int | None,
             optimization: str = "all") -> Figures:
    reference = logits(reference_model, data.images, batch=static_batch)
    out = logits(candidate, data.images, optimization=optimization, batch=static_batch)
    return figures(reference, out, data.labels)


def _fuse(model: onnx.ModelProto, probe: np.ndarray, static_batch: int | None, manifest: dict[str, Any]
          ) -> onnx.ModelProto:
    from trtpipe.optimize.fusion import simplify

    with console.step("Simplifying the graph (onnxslim)..."):
        fused, report = simplify(model)
    _name_nodes(fused)
    check = _compare(model, fused, Dataset(probe, None, "probe"), static_batch)
    console.success(f"Fusion: {report.nodes_before} → {report.nodes_after} nodes, "
                    f"{report.bytes_before / 1e6:.2f} → {report.bytes_after / 1e6:.2f} MB; vs input: max error "
                    f"{check.max_logit_err:.2e}, cosine {check.cosine:.7f}")
    _print_op_table(report.ops_before, report.ops_after)
    if check.cosine < FUSION_MIN_COSINE:
        raise VerificationFailed(f"The simplified graph differs from the input (cosine {check.cosine:.6f}, max "
                                 f"error {check.max_logit_err:.3g}): rerun with --no-fuse and report the model.")
    manifest["fusion"] = report.to_dict() | {"verification": check.to_dict()}
    return fused


def _print_op_table(before: dict[str, int], after: dict[str, int]) -> None:
    from rich.table import Table

    console.err.print("Operators before and after fusion:")
    table = Table()
    for header in ("Operator", "Before", "After"):
        table.add_column(header, justify="left" if header == "Operator" else "right")
    for op in sorted(set(before) | set(after)):
        table.add_row(op, str(before.get(op, 0)), str(after.get(op, 0)))
    table.add_row("[bold]total", f"[bold]{sum(before.values())}", f"[bold]{sum(after.values())}")
    console.err.print(table)


def _fp16(fp32: onnx.ModelProto, calib: Dataset | None, evaluation: Dataset | None, options: OptimizeOptions,
          static_batch: int | None, manifest: dict[str, Any]) -> onnx.ModelProto:
    from trtpipe.optimize.fp16 import convert_fp16

    assert calib is not None
    converted, report = convert_fp16(fp32, _batches(calib, static_batch), keep_io_fp32=options.keep_io_fp32,
                                     source=calib.source)
    kept = report.kept_fp32
    console.note(f"FP16: {len(kept)} node(s) kept in FP32" + (":" if kept else " (no overflow risk measured)"))
    for item in kept:
        console.note(f"  {item['node']} ({item['op']}): {item['reason']}")
    check = _compare(fp32, converted, evaluation or calib, static_batch)
    console.success(f"FP16 vs FP32: {check.line()}")
    manifest["fp16"] = report.to_dict() | {"verification": check.to_dict()}
    if check.cosine < FP16_MIN_COSINE:
        raise VerificationFailed(f"FP16 output differs from FP32 beyond rounding (cosine {check.cosine:.5f} < "
                                 f"{FP16_MIN_COSINE}): {check.line()}.")
    _check_budget(check, options.max_accuracy_drop, "FP16")
    return converted


def _check_budget(check: Figures, budget: float | None, what: str) -> None:
    if budget is not None and check.drop_pp is not None and check.drop_pp > budget:
        raise VerificationFailed(f"{what} loses {check.drop_pp:.2f} pp of accuracy, over the budget of {budget} pp: "
                                 f"{check.line()}.")


def _int8(fp32: onnx.ModelProto, calib: Dataset | None, evaluation: Dataset | None, options: OptimizeOptions,
          target: str, static_batch: int | None, output: Path, manifest: dict[str, Any]) -> onnx.ModelProto:
    import hashlib

    from trtpipe.optimize.int8.cache import cache_key, load_ranges, save_ranges
    from trtpipe.optimize.int8.calibrate import calibrate
    from trtpipe.optimize.int8.profiles import profile_for
    from trtpipe.optimize.int8.quantize import quantize
    from trtpipe.optimize.int8.sensitivity import PROBE_SAMPLES, fall_back_until_within_budget

    assert calib is not None
    profile = profile_for(target)
    console.note(f"INT8 for {target}: {profile.to_dict()['activations']} activations, "
                 f"{profile.to_dict()['weights']} weights ({profile.reduce_range_reason})")
    model_sha = hashlib.sha256(fp32.SerializeToString()).hexdigest()
    key = cache_key(model_sha, calib.sha256, options.calib_method, profile.symmetric_activations)
    cache = options.calib_cache or output.with_suffix(".calib.json")
    ranges = load_ranges(cache, key)
    if ranges is not None:
        console.note(f"Reusing calibration ranges from {cache} (model and data unchanged)")
    else:
        ranges = calibrate(fp32, _batches(calib, static_batch), options.calib_method,
                           symmetric=profile.symmetric_activations)
        save_ranges(cache, key, ranges)
    with console.step("Writing Q/DQ nodes..."):
        quantized = quantize(fp32, ranges, profile)
    judge = evaluation or calib
    check = _compare(fp32, quantized, judge, static_batch, profile.evaluation_optimization)
    console.success(f"INT8 ({target}) vs FP32 on {judge.source}: {check.line()}")
    section: dict[str, Any] = {
        "profile": profile.to_dict(),
        "calibration": {"method": options.calib_method, "source": calib.source, "samples": len(calib),
                        "sha256": calib.sha256, "cache": str(cache), "tensors": len(ranges)},
        "full_int8": check.to_dict(),
        "fp32_layers": [],
    }
    budget = options.max_accuracy_drop
    if budget is not None and evaluation is not None and check.drop_pp is not None and check.drop_pp > budget:
        console.warn(f"Full INT8 loses {check.drop_pp:.2f} pp (budget {budget} pp): ranking layers by sensitivity")
        assert evaluation.labels is not None
        fallback = fall_back_until_within_budget(
            fp32, ranges, profile, probe=calib.images[:PROBE_SAMPLES], eval_images=evaluation.images,
            eval_labels=evaluation.labels, fp32_eval_logits=logits(fp32, evaluation.images, batch=static_batch),
            budget_pp=budget, batch=static_batch, max_fp32_nodes=options.max_fp32_nodes,
        )
        quantized, check = fallback.model, fallback.figures
        section["fp32_layers"] = fallback.excluded
        section["sensitivity"] = [{"node": n, "score": s} for n, s in fallback.ranking]
        section["fallback_attempts"] = fallback.attempts
        console.success(f"Within budget with {len(fallback.excluded)} layer(s) in FP32 "
                        f"({', '.join(fallback.excluded)}): {check.line()}")
    section["final"] = check.to_dict()
    manifest["int8"] = section
    return quantized
