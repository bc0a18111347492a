"""The ``trtpipe`` command line: options in, one stage call out.

This module imports only click at load time; each command imports its stage when it runs, so ``--help`` is
instant and works without torch, onnxruntime or tensorrt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtpipe import __version__
from trtpipe.shapes import parse_batch_sizes, parse_shape


class ShapeType(click.ParamType):
    name = "SHAPE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_shape(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


class BatchListType(click.ParamType):
    name = "BATCHES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_batch_sizes(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


def model_source_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options that say how to read MODEL; shared by every command that takes one."""

    @click.option("--arch", metavar="NAME", help="Registry architecture a state_dict checkpoint fits.")
    @click.option("--input-shape", type=ShapeType(), help="Model input shape, e.g. 1x3x224x224 "
                  "(default: the registry's).")
    @click.option("--trust-checkpoint", is_flag=True,
                  help="Allow full unpickling of a checkpoint (runs code from the file: only for trusted files).")
    @functools.wraps(command)
    def wrapper(*args: Any, arch: str | None, input_shape: tuple[int, ...] | None, trust_checkpoint: bool,
                **kwargs: Any) -> Any:
        def load() -> Any:
            from trtpipe.models.loader import load_model

            return load_model(kwargs["model"], arch=arch, input_shape=input_shape,
                              trust_checkpoint=trust_checkpoint)

        return command(*args, load_model=load, **kwargs)

    return wrapper


def tolerance_options(command: Callable[..., Any]) -> Callable[..., Any]:
    @click.option("--atol", type=float, default=1e-4, show_default=True, help="Absolute error allowed.")
    @click.option("--rtol", type=float, default=1e-4, show_default=True,
                  help="Error allowed relative to the largest reference output.")
    @click.option("--min-cosine", type=float, default=0.9999, show_default=True,
                  help="Lowest cosine similarity allowed between outputs.")
    @functools.wraps(command)
    def wrapper(*args: Any, atol: float, rtol: float, min_cosine: float, **kwargs: Any) -> Any:
        from trtpipe.convert.verify import Tolerance

        return command(*args, tolerance=Tolerance(atol, rtol, min_cosine), **kwargs)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="trtpipe")
def main() -> None:
    """Turn a trained PyTorch CNN into the fastest inference artifact that keeps its accuracy, with proof.

    MODEL is a registry name (see 'trtpipe models'), a checkpoint (.pt/.pth/.safetensors, with --arch),
    a TorchScript file, or path/to/file.py:factory / package.module:factory.
    """


@main.command()
def models() -> None:
    """List the registry's architectures with input shape and parameter count."""
    from trtpipe.models.listing import print_models

    print_models()


@main.command()
@click.argument("model")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="ONNX file to write; a manifest is written beside it.")
@click.option("--opset", type=click.IntRange(7, 25), default=18, show_default=True, help="ONNX opset.")
@click.option("--dynamic-batch/--static-batch", default=True, show_default=True,
              help="Make the batch axis dynamic, or fix it to the input shape's.")
@model_source_options
@tolerance_options
def convert(model: str, output: Path, opset: int, dynamic_batch: bool, load_model: Callable[[], Any],
            tolerance: Any) -> None:
    """Export MODEL to ONNX and verify it against PyTorch FP32 with ONNX Runtime."""
    from trtpipe.convert import convert as run_convert

    result = run_convert(load_model(), output, opset=opset, dynamic_batch=dynamic_batch, tolerance=tolerance)
    click.echo(f"{result.path}\n{result.manifest_path}")


@main.command()
@click.argument("model")
@click.argument("onnx_file", type=click.Path(dir_okay=False, path_type=Path))
@model_source_options
@tolerance_options
def verify(model: str, onnx_file: Path, load_model: Callable[[], Any], tolerance: Any) -> None:
    """Check that ONNX_FILE computes what MODEL computes (exit 1 when it does not)."""
    from trtpipe._files import require_file
    from trtpipe.convert import verify as run_verify

    require_file(onnx_file, "ONNX file")
    run_verify(load_model(), onnx_file, tolerance=tolerance)


@main.command()
@click.argument("model")
@click.argument("artifacts", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--batch", "batches", type=BatchListType(), default="1,8,32", show_default=True,
              help="Batch sizes to sweep.")
@click.option("--threads", type=click.IntRange(1), help="CPU threads for every backend (default: all cores).")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True,
              help="Runs discarded before timing.")
@click.option("--iters", type=click.IntRange(1), help="Timed runs per variant and batch (instead of --duration).")
@click.option("--duration", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="Seconds of timed runs per variant and batch.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the PyTorch baseline runs (cuda adds a TF32 row).")
@click.option("--backend", "onnx_backend", type=click.Choice(["onnxruntime", "onnxruntime-cuda",
                                                               "onnxruntime-tensorrt"]),
              default="onnxruntime", show_default=True, help="How ONNX artifacts run (CPU, CUDA EP, TensorRT EP).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write results JSON.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), help="Write a Markdown table.")
@model_source_options
def bench(model: str, artifacts: tuple[Path, ...], batches: tuple[int, ...], threads: int | None, warmup: int,
          iters: int | None, duration: float, device: str, onnx_backend: str, json_path: Path | None,
          markdown: Path | None, load_model: Callable[[], Any]) -> None:
    """Measure PyTorch FP32 eager on MODEL and each ARTIFACT, with the same inputs, in one run."""
    from trtpipe._files import require_parent_dir
    from trtpipe.bench import BenchSettings, run_benchmark
    from trtpipe.bench.report import print_table, write_reports

    for path in (json_path, markdown):
        if path:
            require_parent_dir(path)
    settings = BenchSettings(batches=batches, warmup=warmup, iters=iters, duration_s=None if iters else duration,
                             device=device, onnx_backend=onnx_backend)
    if threads:
        settings.threads = threads
    report = run_benchmark(load_model(), list(artifacts), settings)
    print_table(report)
    write_reports(report, json_path, markdown)


def _floats(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of numbers") from None


@main.command()
@click.argument("onnx_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Optimized ONNX to write; a manifest is written beside it.")
@click.option("--fuse/--no-fuse", default=True, show_default=True, help="Simplify and fuse the graph (onnxslim).")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "int8"]), default="fp32", show_default=True)
@click.option("--target", type=click.Choice(["tensorrt", "cpu"]),
              help="INT8 flavour: tensorrt (S8S8 symmetric) or cpu (U8S8). Default: tensorrt with a GPU, else cpu.")
@click.option("--calib", metavar="DATA", help="Calibration data: digits, FILE.npy/.npz, an image folder, or random.")
@click.option("--calib-method", type=click.Choice(["minmax", "entropy", "percentile", "mse"]), default="minmax",
              show_default=True)
@click.option("--calib-samples", type=click.IntRange(1), help="Use the first N calibration samples (default: all).")
@click.option("--calib-cache", type=click.Path(dir_okay=False, path_type=Path),
              help="Calibration range cache (default: OUT.calib.json).")
@click.option("--eval", "eval_data", metavar="DATA", help="Labelled data to measure accuracy on: digits, FILE.npz "
              "with labels, or a folder with one subfolder per class.")
@click.option("--max-accuracy-drop", type=click.FloatRange(0), metavar="PP",
              help="Top-1 percentage points INT8 may lose; more sensitive layers fall back to FP32 until it holds.")
@click.option("--max-fp32-nodes", type=click.IntRange(0), metavar="N",
              help="Most nodes the accuracy budget may keep in FP32 (default: half of the quantised nodes).")
@click.option("--keep-io-fp32/--no-keep-io-fp32", default=True, show_default=True,
              help="FP16: keep graph inputs and outputs FP32.")
@click.option("--resize", type=click.IntRange(1), help="Image folders: short side before the center crop.")
@click.option("--mean", help="Image folders: per-channel mean, e.g. 0.485,0.456,0.406.")
@click.option("--std", help="Image folders: per-channel std, e.g. 0.229,0.224,0.225.")
@click.option("--channel-order", type=click.Choice(["rgb", "bgr"]), default="rgb", show_default=True)
def optimize(onnx_file: Path, output: Path, fuse: bool, precision: str, target: str | None, calib: str | None,
             calib_method: str, calib_samples: int | None, calib_cache: Path | None, eval_data: str | None,
             max_accuracy_drop: float | None, max_fp32_nodes: int | None, keep_io_fp32: bool, resize: int | None,
             mean: str | None, std: str | None, channel_order: str) -> None:
    """Fuse, and convert to FP16 or INT8 (Q/DQ) inside the ONNX graph, with accuracy figures."""
    from trtpipe.optimize import OptimizeOptions
    from trtpipe.optimize import optimize as run_optimize
    from trtpipe.optimize.data import ImagePreprocessing

    options = OptimizeOptions(
        precision=precision, target=target, fuse=fuse, keep_io_fp32=keep_io_fp32, calib=calib,
        calib_method=calib_method, calib_samples=calib_samples, eval=eval_data,
        max_accuracy_drop=max_accuracy_drop, max_fp32_nodes=max_fp32_nodes, calib_cache=calib_cache,
        preprocessing=ImagePreprocessing(resize=resize, mean=_floats(mean), std=_floats(std),
                                         channel_order=channel_order),
    )
    result = run_optimize(onnx_file, output, options)
    click.echo(f"{result.path}\n{result.manifest_path}")


def _shape_specs(text: str | None) -> dict[str, tuple[int, ...]]:
    from trtpipe.build.specs import parse_shape_specs

    if not text:
        return {}
    try:
        return parse_shape_specs(text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _size(text: str | None) -> int | None:
    from trtpipe.build.specs import parse_size

    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@main.command()
@click.argument("onnx_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Engine to write (.plan); OUT.json (sidecar) and OUT.layers.json are written beside it.")
@click.option("--workspace", metavar="SIZE", help="Workspace memory limit, e.g. 4GiB (default: TensorRT's).")
@click.option("--shapes", metavar="NAME:SHAPE,...", help="Fixed input shapes (min = opt = max).")
@click.option("--min-shapes", metavar="NAME:SHAPE,...", help="Profile minimum (default batch 1).")
@click.option("--opt-shapes", metavar="NAME:SHAPE,...", help="Profile optimum (default batch 8).")
@click.option("--max-shapes", metavar="NAME:SHAPE,...", help="Profile maximum (default batch 32).")
@click.option("--timing-cache", type=click.Path(dir_okay=False, path_type=Path),
              help="Timing cache to read and update, so later builds are faster.")
@click.option("--opt-level", type=click.IntRange(0, 5), help="Builder optimisation level (TensorRT default 3).")
@click.option("--hardware-compat", type=click.Choice(["none", "ampere+", "same-cc"]), default="none",
              show_default=True, help="Which GPUs the engine may run on.")
@click.option("--version-compat", is_flag=True, help="Let newer TensorRT versions (and the lean runtime) run it.")
@click.option("--layer-info", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to save the engine inspector's layer information (default OUT.layers.json).")
def build(onnx_file: Path, output: Path, workspace: str | None, shapes: str | None, min_shapes: str | None,
          opt_shapes: str | None, max_shapes: str | None, timing_cache: Path | None, opt_level: int | None,
          hardware_compat: str, version_compat: bool, layer_info: Path | None) -> None:
    """Build a strongly typed TensorRT engine from ONNX_FILE (precision comes from the ONNX)."""
    from trtpipe.build import BuildOptions, build_engine

    options = BuildOptions(
        workspace=_size(workspace), shapes=_shape_specs(shapes), min_shapes=_shape_specs(min_shapes),
        opt_shapes=_shape_specs(opt_shapes), max_shapes=_shape_specs(max_shapes), timing_cache=timing_cache,
        opt_level=opt_level, hardware_compat=hardware_compat, version_compat=version_compat, layer_info=layer_info,
    )
    result = build_engine(onnx_file, output, options)
    click.echo(f"{result.engine}\n{result.engine}.json\n{result.layer_info}")


@main.command()
def doctor() -> None:
    """Report GPU, driver, CUDA, TensorRT and ONNX Runtime providers, with what is missing and how to get it."""
    from trtpipe.build.doctor import print_diagnosis

    print_diagnosis()


@main.command()
@click.argument("repository", type=click.Path(file_okay=False, path_type=Path), default=Path("models"))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--batching/--no-batching", default=True, show_default=True, help="Dynamic batching per model.")
@click.option("--max-batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--max-queue-delay-ms", type=click.FloatRange(0), default=2.0, show_default=True,
              help="How long a request may wait for others to batch with.")
@click.option("--preferred-batch-sizes", type=BatchListType(), help="Batch sizes to dispatch at once, e.g. 8,16.")
@click.option("--max-queue", type=click.IntRange(1), default=1024, show_default=True,
              help="Requests waiting per model before 503.")
@click.option("--timeout-ms", type=click.FloatRange(1), help="Per-request inference timeout (504 past it).")
@click.option("--max-body-mb", type=click.FloatRange(0.001), default=64.0, show_default=True,
              help="Largest request body accepted (413 past it).")
@click.option("--threads", type=click.IntRange(1), help="ONNX Runtime threads per model.")
def serve(repository: Path, host: str, port: int, batching: bool, max_batch_size: int, max_queue_delay_ms: float,
          preferred_batch_sizes: tuple[int, ...] | None, max_queue: int, timeout_ms: float | None,
          max_body_mb: float, threads: int | None) -> None:
    """Serve a model repository over HTTP in the Open Inference Protocol (KServe v2)."""
    from trtpipe.serve.app import ServeSettings
    from trtpipe.serve.batching import BatchingOptions
    from trtpipe.serve.server import serve as run_server

    options = BatchingOptions(max_batch_size, max_queue_delay_ms / 1000, preferred_batch_sizes or (), max_queue)
    settings = ServeSettings(int(max_body_mb * 1024 * 1024), timeout_ms / 1000 if timeout_ms else None)
    run_server(repository, host=host, port=port, batching=options if batching else None, settings=settings,
               threads=threads)


@main.command("export-triton")
@click.argument("artifacts", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Triton model repository to write.")
@click.option("--name", "names", multiple=True, help="Model name for each ARTIFACT, in order (default: from its path).")
@click.option("--repository", type=click.Path(file_okay=False, path_type=Path),
              help="Export the newest version of every model of a trtpipe repository instead.")
@click.option("--max-batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--instances", type=click.IntRange(1), default=1, show_default=True, help="Instances per model.")
def export_triton(artifacts: tuple[Path, ...], output: Path, names: tuple[str, ...], repository: Path | None,
                  max_batch_size: int, instances: int) -> None:
    """Write a Triton Inference Server repository (config.pbtxt + model) for ARTIFACTS."""
    from trtpipe.runtime.artifacts import artifact_name
    from trtpipe.serve.triton import artifacts_from_repository, export

    if repository:
        chosen = artifacts_from_repository(repository)
    else:
        if not artifacts:
            raise click.UsageError("give ARTIFACTS or --repository")
        if names and len(names) != len(artifacts):
            raise click.UsageError(f"{len(names)} --name for {len(artifacts)} artifacts")
        chosen = {}
        for index, path in enumerate(artifacts):
            chosen[names[index] if names else artifact_name(path)] = path
    for path in chosen.values():
        if not path.is_file():
            raise click.ClickException(f"Artifact {path} does not exist.")
    for written in export(chosen, output, max_batch_size=max_batch_size, instances=instances):
        click.echo(written)


@main.command()
@click.argument("url", default="http://127.0.0.1:8000")
@click.option("--model", required=True, help="Model name on the server.")
@click.option("--concurrency", type=BatchListType(), default="1,8,32", show_default=True,
              help="Concurrent clients, one level after another.")
@click.option("--duration", type=click.FloatRange(0.5, 600), default=10.0, show_default=True,
              help="Seconds per level.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write results JSON.")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback URL.")
def loadtest(url: str, model: str, concurrency: tuple[int, ...], duration: float, json_path: Path | None,
             allow_remote: bool) -> None:
    """Drive a running server with bounded concurrent clients; report throughput and p50/p90/p99."""
    from trtpipe._files import require_parent_dir, write_json_atomic
    from trtpipe.serve.loadtest import print_loadtest, run_loadtest

    if json_path:
        require_parent_dir(json_path)
    report = run_loadtest(url, model, list(concurrency), duration_s=duration, allow_remote=allow_remote)
    print_loadtest(report)
    if json_path:
        write_json_atomic(json_path, report)


@main.command()
@click.argument("pipeline_or_model")
@click.option("--latency-budget-ms", type=click.FloatRange(0), help="Override [select] latency_budget_ms.")
@click.option("--max-accuracy-drop", type=click.FloatRange(0), metavar="PP", help="Override [select].")
def run(pipeline_or_model: str, latency_budget_ms: float | None, max_accuracy_drop: float | None) -> None:
    """Run the pipeline in PIPELINE.toml (or MODEL with defaults), reusing every stage whose inputs are unchanged."""
    from trtpipe.pipeline.config import default_pipeline, load_pipeline
    from trtpipe.pipeline.run import run_pipeline

    if pipeline_or_model.endswith(".toml"):
        pipeline = load_pipeline(Path(pipeline_or_model))
    else:
        pipeline = default_pipeline(pipeline_or_model)
    if latency_budget_ms is not None:
        pipeline.latency_budget_ms = latency_budget_ms
    if max_accuracy_drop is not None:
        pipeline.max_accuracy_drop = max_accuracy_drop
    run_pipeline(pipeline)


@main.command()
@click.argument("results", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="HTML file to write (self-contained).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), help="Also write Markdown (+ SVGs).")
@click.option("--batch", type=click.IntRange(1), help="Batch for the accuracy-vs-latency chart (default smallest).")
def report(results: Path, output: Path, markdown: Path | None, batch: int | None) -> None:
    """Write an HTML (and Markdown) report with charts from a bench RESULTS.json."""
    from trtpipe._files import require_parent_dir
    from trtpipe.bench.html_report import load_results, write_report

    require_parent_dir(output)
    write_report(load_results(results), output, markdown, batch=batch)
    click.echo(output)


@main.command()
@click.option("--repository", type=click.Path(file_okay=False, path_type=Path), default=Path("models"),
              show_default=True, help="Model repository to write (Triton layout).")
@click.option("--reports", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Folder for the reports.")
def demo(repository: Path, reports: Path) -> None:
    """Run the bundled pipelines (the digits model and ResNet-50) on this machine: `trtpipe run` on each."""
    from trtpipe.demo import run_demo

    run_demo(repository, reports)


if __name__ == "__main__":
    main()
