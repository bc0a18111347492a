"""The ``trtpipe`` command line: options in, one stage call out.

Each stage's flags are generated from its options dataclass (trtpipe.cli.click_options), so the CLI, the Python
API and the pipeline file cannot drift. This module imports click and the light options modules only; each
command imports its stage when it runs, so ``--help`` is instant and works without torch, onnx or tensorrt.
User errors (TrtpipeError) are translated here, once, into ``Error: <message>`` and their exit code.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import click

from trtpipe.bench.options import BenchOptions
from trtpipe.cli.click_options import options_from
from trtpipe.compile.options import CompileOptions
from trtpipe.conformance.options import CheckOptions
from trtpipe.convert.options import ConvertOptions
from trtpipe.debug.options import DebugOptions
from trtpipe.engine.inspect_options import InspectOptions
from trtpipe.engine.options import EngineOptions
from trtpipe.errors import TrtpipeError
from trtpipe.files import is_stdout, require_file, require_onnx_bytes, write_json_output
from trtpipe.models.options import ModelOptions
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.pipeline.options import SelectOptions
from trtpipe.serve.options import ServeOptions
from trtpipe.shapes import parse_batch_sizes
from trtpipe.vocab import __version__

OUTPUT_FILE = click.Path(dir_okay=False, path_type=Path)


class UserError(click.ClickException):
    """A TrtpipeError as click shows it: one line, the error's own exit code (see :func:`user_error`)."""

    def __init__(self, error: TrtpipeError) -> None:
        super().__init__(error.message)


@functools.cache
def _user_error_class(exit_code: int) -> type[UserError]:
    class CodedUserError(UserError):
        pass

    CodedUserError.exit_code = exit_code
    return CodedUserError


def user_error(error: TrtpipeError) -> UserError:
    """``error`` as click shows it. click reads the exit code from a class variable, so each code has its own
    subclass."""
    return _user_error_class(error.exit_code)(error)


class InputFile(click.Path):
    """A file the command reads, which must exist: checked as the argument is parsed, before any model loads, and
    refused like every other user error (``Error: ONNX file X does not exist.``, exit 1), not as a malformed
    option (exit 2)."""

    def __init__(self, what: str) -> None:
        super().__init__(dir_okay=False, path_type=Path)
        self.what = what  # how the message names it: "ONNX file", "Artifact"...

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(os.fsdecode(super().convert(value, param, ctx)))
        try:
            require_file(path, self.what)
            if self.what == "ONNX file" or path.suffix == ".onnx":  # a PNG named .onnx: said before any import
                require_onnx_bytes(path)
            return path
        except TrtpipeError as error:
            raise user_error(error) from None


class TrtpipeGroup(click.Group):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with the whole first sentence of its help, wrapped: click's default cuts it at the width
        with "...", mid-sentence."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1_000_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrtpipeError as error:
            raise user_error(error) from None


class BatchListType(click.ParamType):
    name = "BATCHES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_batch_sizes(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _load_model(source: str, model: ModelOptions) -> Any:
    from trtpipe.models.loader import load_model

    return load_model(source, **model.loader_keywords())


@click.group(cls=TrtpipeGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="trtpipe")
@click.option("-q", "--quiet", is_flag=True, help="No notes, progress bars or progress lines: warnings, errors and "
              "results only.")
def main(quiet: bool) -> None:
    """Turn a trained PyTorch CNN into the fastest inference artifact that keeps its accuracy, with proof.

    MODEL is a registry name (see 'trtpipe models'), a checkpoint (.pt/.pth/.safetensors, with --arch),
    a TorchScript file, path/to/file.py:factory / package.module:factory, or (for bench and run) an FP32 .onnx
    file or a packaged ONNX model.
    """
    from trtpipe import console

    console.set_quiet(quiet)


@main.command()
def models() -> None:
    """List what MODEL may name: the registry's architectures and the packaged ONNX models, with their inputs."""
    from trtpipe.models.listing import print_models

    print_models()


@main.command()
@click.argument("model")
@click.option("-o", "--output", type=OUTPUT_FILE, required=True,
              help="ONNX file to write; a manifest is written beside it.")
@options_from(ConvertOptions, "options")
@options_from(ModelOptions, "source")
def convert(model: str, output: Path, options: ConvertOptions, source: ModelOptions) -> None:
    """Export MODEL to ONNX and verify it against PyTorch FP32 with ONNX Runtime."""
    from trtpipe.convert.stage import convert as run_convert

    result = run_convert(_load_model(model, source), output, options)
    click.echo(f"{result.path}\n{result.manifest_path}")


@main.command(name="compile")
@click.argument("model")
@click.option("-o", "--output", type=OUTPUT_FILE, required=True,
              help="AOTInductor package to write (.pt2); a manifest is written beside it.")
@options_from(CompileOptions, "options")
@options_from(ModelOptions, "source")
def compile_command(model: str, output: Path, options: CompileOptions, source: ModelOptions) -> None:
    """Compile MODEL ahead of time (torch.export + AOTInductor) into a .pt2 package that runs without its Python
    code, and verify it against PyTorch FP32."""
    from trtpipe.compile.stage import compile_aoti

    result = compile_aoti(_load_model(model, source), output, options)
    click.echo(f"{result.path}\n{result.manifest_path}")


@main.command()
@click.argument("model")
@click.argument("onnx_file", type=InputFile("ONNX file"))
@options_from(ConvertOptions, "options", only=("atol", "rtol", "min_cosine", "runtime"))
@options_from(ModelOptions, "source")
def verify(model: str, onnx_file: Path, options: ConvertOptions, source: ModelOptions) -> None:
    """Check that ONNX_FILE computes what MODEL computes (exit 1 when it does not)."""
    from trtpipe.convert.stage import verify as run_verify

    run_verify(_load_model(model, source), onnx_file, options)


@main.command()
@click.argument("model")
@click.argument("artifacts", nargs=-1, type=InputFile("Artifact"))
@options_from(BenchOptions, "options")
@click.option("--json", "json_path", type=OUTPUT_FILE, help="Write results JSON ('-': to stdout).")
@click.option("--markdown", type=OUTPUT_FILE, help="Write a Markdown table ('-': to stdout).")
@click.option("--csv", "csv_path", type=OUTPUT_FILE,
              help="Write every timed run (variant, batch, round, latency) and each row's summary as CSV ('-': to "
                   "stdout).")
@options_from(ModelOptions, "source")
def bench(model: str, artifacts: tuple[Path, ...], options: BenchOptions, json_path: Path | None,
          markdown: Path | None, csv_path: Path | None, source: ModelOptions) -> None:
    """Measure MODEL (PyTorch FP32 eager; an FP32 .onnx or a packaged model on ONNX Runtime) and each ARTIFACT, with
    the same inputs, in one run."""
    from trtpipe import console
    from trtpipe.bench.runner import run_benchmark
    from trtpipe.files import require_outputs
    from trtpipe.report.tables import print_table, write_reports

    require_outputs(json_path, markdown, csv_path)
    from trtpipe.bench.reference import bench_reference

    # An FP32 ONNX file from elsewhere (or a packaged model) is its own reference, on ONNX Runtime; one convert made
    # leads back to its PyTorch model; else MODEL is the PyTorch model.
    reference, files = bench_reference(model, source, artifacts)
    report = run_benchmark(reference or _load_model(model, source), files, options, keep_runs=csv_path is not None)
    with console.stdout_kept(any(is_stdout(path) for path in (json_path, markdown, csv_path))):
        print_table(report)  # on stderr where stdout holds what '-' asked for
    write_reports(report, json_path, markdown, csv_path)


@main.command()
@click.argument("onnx_file", type=InputFile("ONNX file"))
@click.option("-o", "--output", type=OUTPUT_FILE, required=True,
              help="Optimized ONNX to write; a manifest is written beside it.")
@options_from(OptimizeOptions, "options")
@click.option("--no-fuse", is_flag=True, help="Shorthand for --passes none.")
def optimize(onnx_file: Path, output: Path, options: OptimizeOptions, no_fuse: bool) -> None:
    """Fuse, and convert to FP16 or INT8 (Q/DQ) inside the ONNX graph, with accuracy figures."""
    from dataclasses import replace

    from trtpipe.optimize.stage import optimize as run_optimize

    if no_fuse:
        options = replace(options, passes=())
    result = run_optimize(onnx_file, output, options)
    click.echo(f"{result.path}\n{result.manifest_path}")


@main.command()
@click.argument("onnx_file", type=InputFile("ONNX file"))
@click.option("-o", "--output", type=OUTPUT_FILE, required=True,
              help="Engine to write (.plan); OUT.json (sidecar) and OUT.layers.json are written beside it.")
@options_from(EngineOptions, "options")
def build(onnx_file: Path, output: Path, options: EngineOptions) -> None:
    """Build a strongly typed TensorRT engine from ONNX_FILE (precision comes from the ONNX)."""
    from trtpipe.engine.build import build_engine

    result = build_engine(onnx_file, output, options)
    click.echo(f"{result.engine}\n{result.engine}.json\n{result.layer_info}")


@main.command()
@click.argument("onnx_file", type=InputFile("ONNX file"))
@options_from(CheckOptions, "options")
@click.option("--json", "json_path", type=OUTPUT_FILE, help="Also write the findings as JSON ('-': to stdout).")
def check(onnx_file: Path, options: CheckOptions, json_path: Path | None) -> None:
    """Check ONNX_FILE against what the target runtime accepts (TensorRT's Q/DQ, typing and operator rules),
    without TensorRT. Exit 1 when there are errors."""
    from trtpipe import console
    from trtpipe.conformance.check import check_file, print_report
    from trtpipe.files import require_parent_dir

    if json_path:
        require_parent_dir(json_path)
    target = options.target
    if click.get_current_context().get_parameter_source("options__target") is click.core.ParameterSource.DEFAULT:
        from trtpipe.artifact.records.manifest import read_manifest

        manifest = read_manifest(onnx_file)  # an INT8 file made for one runtime is checked against that one
        if manifest is not None and manifest.target is not None and manifest.target is not target:
            target = manifest.target
            console.note(f"Checking against {target}: the manifest says {onnx_file.name} was made for target "
                         f"{target} (--target names another).")
    report = check_file(onnx_file, target)
    with console.stdout_kept(is_stdout(json_path)):
        print_report(report, limit=1000)
    if json_path:
        write_json_output(json_path, report.to_dict())
    if not report.passed:
        raise click.exceptions.Exit(1)


@main.command()
@click.argument("model", type=InputFile("ONNX file"))
@options_from(DebugOptions, "options")
@click.option("--json", "json_path", type=OUTPUT_FILE, help="Also write the report as JSON ('-': to stdout).")
def debug(model: Path, options: DebugOptions, json_path: Path | None) -> None:
    """Compare MODEL (an FP16 or INT8 Q/DQ ONNX from 'trtpipe optimize') with its FP32 reference tensor by tensor
    on ONNX Runtime CPU, and name the first tensor whose error jumps. A report: exit 0 either way."""
    from trtpipe.debug.compare import debug_model
    from trtpipe.debug.report import print_report
    from trtpipe.files import require_parent_dir

    if json_path:
        require_parent_dir(json_path)
    report = debug_model(model, options)
    from trtpipe import console

    with console.stdout_kept(is_stdout(json_path)):
        print_report(report)
    if json_path:
        write_json_output(json_path, report.to_dict())


@main.command()
@click.argument("path", type=InputFile("Engine or layer information file"))
@options_from(InspectOptions, "options")
@click.option("--json", "json_path", type=OUTPUT_FILE, help="Also write the layer table as JSON ('-': to stdout).")
def inspect(path: Path, options: InspectOptions, json_path: Path | None) -> None:
    """Show an engine's layers: fused ONNX nodes, precisions, tensor formats, tactics. PATH is a layer information
    JSON (ENGINE.layers.json from 'trtpipe build', or trtexec --exportLayerInfo), read anywhere, or an engine,
    read with TensorRT on a GPU."""
    from trtpipe.engine.inspect import inspect_file, print_layers
    from trtpipe.files import require_parent_dir

    if json_path:
        require_parent_dir(json_path)
    layers = inspect_file(path, trust_engine=options.trust_engine)
    from trtpipe import console

    with console.stdout_kept(is_stdout(json_path)):
        print_layers(layers)
    if json_path:
        write_json_output(json_path, layers.to_dict())


@main.command()
def doctor() -> None:
    """Report GPU, driver, CUDA, TensorRT and ONNX Runtime providers, with what is missing and how to get it."""
    from trtpipe.engine.doctor import print_diagnosis

    print_diagnosis()


@main.command()
@click.argument("repository", type=click.Path(file_okay=False, path_type=Path), default=Path("models"))
@options_from(ServeOptions, "options", exclude=("triton_backend",))
def serve(repository: Path, options: ServeOptions) -> None:
    """Serve a model repository over HTTP in the Open Inference Protocol (KServe v2)."""
    from trtpipe.serve.server import serve as run_server

    run_server(repository, options)


@main.command("export-triton")
@click.argument("artifacts", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Triton model repository to write.")
@click.option("--name", "names", multiple=True, help="Model name for each ARTIFACT, in order (default: from its path).")
@click.option("--repository", type=click.Path(file_okay=False, path_type=Path),
              help="Export the newest version of every model of a trtpipe repository instead.")
@options_from(ServeOptions, "options", only=("max_batch_size", "max_queue_delay_ms", "preferred_batch_sizes",
                                             "instances", "threads", "runtime", "triton_backend"))
def export_triton(artifacts: tuple[Path, ...], output: Path, names: tuple[str, ...], repository: Path | None,
                  options: ServeOptions) -> None:
    """Write a Triton Inference Server repository (config.pbtxt + model) for ARTIFACTS."""
    from trtpipe.artifact.description import artifact_name
    from trtpipe.errors import BadInput
    from trtpipe.serve.repository.triton import artifacts_from_repository, export

    if repository:
        chosen = artifacts_from_repository(repository)
    else:
        if not artifacts:
            raise click.UsageError("give ARTIFACTS or --repository")
        if names and len(names) != len(artifacts):
            raise click.UsageError(f"{len(names)} --name for {len(artifacts)} artifacts")
        chosen = {names[index] if names else artifact_name(path): path for index, path in enumerate(artifacts)}
    for path in chosen.values():
        if not path.is_file():
            raise BadInput(f"Artifact {path} does not exist.")
    for written in export(chosen, output, options):
        click.echo(written)


@main.command()
@click.argument("url", default="http://127.0.0.1:8000")
@click.option("--model", required=True, help="Model name on the server.")
@click.option("--concurrency", type=BatchListType(), default="1,8,32", show_default=True, metavar="LEVELS",
              help="Concurrent clients, one level after another.")
@click.option("--duration", type=click.FloatRange(0.5, 600), default=10.0, show_default=True,
              help="Seconds per level.")
@click.option("--json", "json_path", type=OUTPUT_FILE, help="Write results JSON ('-': to stdout).")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback URL.")
@click.option("--server-pid", type=click.IntRange(1), help="Also report the CPU the server (and every process under "
              "it) spends per level, read from /proc: the process id of trtpipe serve or tritonserver.")
def loadtest(url: str, model: str, concurrency: tuple[int, ...], duration: float, json_path: Path | None,
             allow_remote: bool, server_pid: int | None) -> None:
    """Drive a running server with bounded concurrent clients; report throughput and p50/p90/p99."""
    from trtpipe.files import require_parent_dir
    from trtpipe.tools.loadtest import print_loadtest, run_loadtest

    if json_path:
        require_parent_dir(json_path)
    report = run_loadtest(url, model, list(concurrency), duration_s=duration, allow_remote=allow_remote,
                          server_pid=server_pid)
    from trtpipe import console

    with console.stdout_kept(is_stdout(json_path)):
        print_loadtest(report)
    if json_path:
        write_json_output(json_path, report)


SET_HELP = "Set any pipeline-file key, e.g. bench.duration=2 or variants.calib_samples=64 (repeatable)."


@main.command()
@click.argument("pipeline_or_model")
@options_from(SelectOptions, "select")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help=SET_HELP)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder the [output] paths (models/, reports/) are written under (default: the current folder).")
@click.option("--rebench", is_flag=True, help="Measure again even where the bench's inputs are unchanged (after a "
              "noisy machine left the choice undecided).")
def run(pipeline_or_model: str, select: SelectOptions, overrides: tuple[str, ...], out: Path | None,
        rebench: bool) -> None:
    """Run the pipeline in PIPELINE.toml (or MODEL with defaults), reusing every stage whose inputs are unchanged.

    The select flags, when given, override the file's [select] section. What it writes ([output]: models/ and
    reports/ by default) goes under the current folder, or --out."""
    from dataclasses import fields, replace

    from trtpipe.pipeline.config import default_pipeline, load_pipeline
    from trtpipe.pipeline.run import run_pipeline

    if pipeline_or_model.endswith(".toml"):
        pipeline = load_pipeline(Path(pipeline_or_model), list(overrides), out=out)
    else:
        pipeline = default_pipeline(pipeline_or_model, list(overrides), out=out)
    given = {f.name: getattr(select, f.name) for f in fields(select) if getattr(select, f.name) is not None}
    pipeline.select = replace(pipeline.select, **given)
    run_pipeline(pipeline, rebench=rebench)


@main.command()
@click.argument("results", type=InputFile("Results file"))
@click.option("-o", "--output", type=OUTPUT_FILE, required=True, help="HTML file to write (self-contained).")
@click.option("--markdown", type=OUTPUT_FILE, help="Also write Markdown (+ SVGs).")
@click.option("--batch", type=click.IntRange(1), help="Batch for the accuracy-vs-latency chart (default smallest).")
def report(results: Path, output: Path, markdown: Path | None, batch: int | None) -> None:
    """Write an HTML (and Markdown) report with charts from a bench RESULTS.json."""
    from trtpipe import console
    from trtpipe.files import require_parent_dir
    from trtpipe.report.html import load_results, write_report
    from trtpipe.report.tables import counted, unstable_lines

    require_parent_dir(output)
    loaded = load_results(results)
    drawn = write_report(loaded, output, markdown, batch=batch)
    rows, unstable = loaded["results"], sum(bool(row.get("unstable")) for row in loaded["results"])
    console.success(f"Wrote {output}{f' and {markdown}' if markdown else ''}: {loaded['model']['name']}, "
                    f"{counted(len(rows), 'row')}"
                    + (f" ({unstable} flagged unstable)" if unstable else "")
                    + f", {counted(len(drawn), 'chart')}" + (f" ({', '.join(drawn)})" if drawn else ""))
    if unstable_lines(loaded):
        console.warn("Some figures are flagged unstable: the report says which and why, beside the table.")
    click.echo(output)


@main.command()
@click.option("--repository", type=click.Path(file_okay=False, path_type=Path), default=Path("models"),
              show_default=True, help="Model repository to write (Triton layout).")
@click.option("--reports", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Folder for the reports.")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help=SET_HELP)
def demo(repository: Path, reports: Path, overrides: tuple[str, ...]) -> None:
    """Run the bundled pipelines on this machine (the digits model, the pretrained EfficientNet-Lite0 and the
    PP-PicoDet layout detector from its ONNX): `trtpipe run` on each."""
    from trtpipe.pipeline.demo import run_demo

    run_demo(repository, reports, overrides=list(overrides))


if __name__ == "__main__":
    main()
