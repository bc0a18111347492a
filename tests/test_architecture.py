"""The structure the project promises: every test folder runs, layers point down (import-linter, run by make
test), the light modules stay light, the vocabulary is the only place its names are spelled, and every stage's
options reach the CLI, the Python API and the pipeline file from one declaration."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import trtpipe
from trtpipe import vocab

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(trtpipe.__file__).parent
LIGHT_MODULES = ["trtpipe", "trtpipe.cli", "trtpipe.vocab", "trtpipe.options", "trtpipe.convert.options",
                 "trtpipe.optimize.options", "trtpipe.engine.options", "trtpipe.bench.options",
                 "trtpipe.serve.options", "trtpipe.pipeline.options", "trtpipe.models.options",
                 "trtpipe.pipeline.config", "trtpipe.debug.options", "trtpipe.engine.inspect_options",
                 "trtpipe.compile.options"]


def test_every_test_folder_is_collected() -> None:
    """pytest silently skips folders named like build outputs (build, dist...): none may hide here."""
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = {line.split("::")[0].rsplit("/", 1)[0] for line in result.stdout.splitlines() if "::" in line}
    folders = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")}
    assert folders and folders <= collected, f"never collected: {sorted(folders - collected)}"


def test_light_modules_load_no_heavy_library() -> None:
    code = ("import importlib, sys\n"
            f"for name in {LIGHT_MODULES!r}:\n    importlib.import_module(name)\n"
            "print(','.join(m for m in ('torch', 'onnx', 'onnxruntime', 'numpy', 'tensorrt') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == ""


_SPELLED_ONCE = (vocab.Precision, vocab.Target, vocab.CalibMethod, vocab.ArtifactKind, vocab.OnnxExecution,
                 vocab.Device, vocab.ChannelOrder, vocab.BackendKind)


def _literals(path: Path, words: set[str]) -> list[str]:
    """String constants equal to a vocabulary word, except docstrings, dict keys and subscripts (a library's
    name as a versions key, a manifest section's name)."""
    tree = ast.parse(path.read_text())
    exempt: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            exempt.add(id(first.value))
        if isinstance(node, ast.Dict):
            exempt |= {id(k) for k in node.keys if k is not None}
        if isinstance(node, ast.Subscript):
            exempt.add(id(node.slice))
    return [f"{path.relative_to(SOURCE)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words
            and id(node) not in exempt]


def test_only_the_vocabulary_spells_its_names() -> None:
    words = {member.value for enum in _SPELLED_ONCE for member in enum}
    found = [hit for path in sorted(SOURCE.rglob("*.py")) if path.name != "vocab.py" for hit in _literals(path, words)]
    assert not found, "use trtpipe.vocab instead of these literals:\n" + "\n".join(found)


# Each command and the options it takes; fields a command leaves out on purpose are listed.
_COMMANDS: list[tuple[str, str, tuple[str, ...]]] = [
    ("convert", "trtpipe.convert.options:ConvertOptions", ()),
    ("convert", "trtpipe.models.options:ModelOptions", ()),
    ("compile", "trtpipe.compile.options:CompileOptions", ()),
    ("compile", "trtpipe.models.options:ModelOptions", ()),
    ("verify", "trtpipe.convert.options:ConvertOptions", ("opset", "dynamic_batch")),  # verify reads the file's
    ("verify", "trtpipe.models.options:ModelOptions", ()),
    ("bench", "trtpipe.bench.options:BenchOptions", ()),
    ("bench", "trtpipe.models.options:ModelOptions", ()),
    ("optimize", "trtpipe.optimize.options:OptimizeOptions", ()),
    ("build", "trtpipe.engine.options:EngineOptions", ()),
    ("serve", "trtpipe.serve.options:ServeOptions", ("triton_backend",)),  # a Triton export setting
    ("run", "trtpipe.pipeline.options:SelectOptions", ()),
    ("debug", "trtpipe.debug.options:DebugOptions", ()),
    ("inspect", "trtpipe.engine.inspect_options:InspectOptions", ()),
]


def _class(path: str) -> type:
    import importlib

    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(("command", "options", "left_out"), _COMMANDS)
def test_every_option_field_is_a_flag_of_its_command(command: str, options: str, left_out: tuple[str, ...]) -> None:
    from trtpipe.cli.click_options import declared_flags
    from trtpipe.cli.main import main

    flags = {opt for param in main.commands[command].params for opt in param.opts}
    missing = {name: flag for name, flag in declared_flags(_class(options)).items()
               if name not in left_out and flag not in flags}
    assert not missing, f"trtpipe {command} lacks {missing}"


# A text a user would write for each parsed field (a list, a size, shapes), other than its default. A new parsed
# option needs an entry here, so the round trip below covers it.
_PARSED_SAMPLES = {
    "batches": "2,4", "baselines": "compile", "backend": "onnxruntime,openvino", "passes": "none", "mean": "0.5,0.25",
    "std": "0.125,2", "workspace": "1GiB", "shapes": "input:4x1x32x32", "min_shapes": "input:1x1x32x32",
    "opt_shapes": "input:8x1x32x32", "max_shapes": "input:16x1x32x32", "input_shape": "1x1x32x32",
    "preferred_batch_sizes": "8,16", "input_dtype": "image:uint8,scale:float32", "input_range": "image:0..255",
    "profiles": "input:1x1x32x32:8x1x32x32:32x1x32x32,input:33x1x32x32:64x1x32x32:128x1x32x32",
}


def _other_value(name: str, spec: object, default: object) -> object:
    """A valid value for the field that is not its default: what a user would set it to."""
    from pathlib import Path

    kind, choices = spec.type, spec.choice_values()  # type: ignore[attr-defined]
    if spec.parse is not None:  # type: ignore[attr-defined]
        return spec.parse(_PARSED_SAMPLES[name])  # type: ignore[attr-defined]
    if choices is not None:
        value = next(c for c in choices if c != default)
        return spec.enum(value) if spec.enum else value  # type: ignore[attr-defined]
    if kind is bool:
        return not default
    if kind is int:
        low = int(spec.minimum or 0) + 1  # type: ignore[attr-defined]
        return low if low != default else low + 1
    if kind is float:
        value = (spec.minimum or 0) + 0.75  # type: ignore[attr-defined]
        return value if value != default else value + 0.5
    if kind is Path:
        return Path("elsewhere") / name
    return f"{name}_value"


def _toml(value: object, spec: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and spec.format is None:  # type: ignore[attr-defined]
        return repr(value)
    text = spec.format(value) if spec.format else str(value)  # type: ignore[attr-defined]
    return '"' + text + '"'


def test_every_option_field_round_trips_through_the_pipeline_file() -> None:
    """A file that sets every field of every section to a value other than its default (as a user writes it)
    reads back as exactly those values, typed: nothing is dropped, renamed or left a string."""
    import tempfile
    from enum import Enum

    from trtpipe.options import field_default, option_fields
    from trtpipe.pipeline.config import SECTIONS, load_pipeline

    expected: dict[str, dict[str, object]] = {}
    lines = []
    for section, cls in SECTIONS.items():
        values = {item.name: _other_value(item.name, spec, field_default(item)) for item, spec in option_fields(cls)}
        for item, _ in option_fields(cls):
            assert values[item.name] != field_default(item), (section, item.name)
        if section == "model":
            values["name"] = "roundtrip"
        expected[section] = values
        lines.append(f"[[{section}]]" if section == "variants" else f"[{section}]")
        if section == "variants":
            lines.append('name = "v"')
        specs = dict((item.name, spec) for item, spec in option_fields(cls))
        lines += [f"{name} = {_toml(value, specs[name])}" for name, value in values.items()]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "all.toml"
        path.write_text("\n".join(lines) + "\n")
        pipeline = load_pipeline(path)
    read = {"model": pipeline.model, "convert": pipeline.convert, "build": pipeline.build, "bench": pipeline.bench,
            "select": pipeline.select, "serve": pipeline.serve, "output": pipeline.output,
            "variants": pipeline.variants[0].options}
    for section, options in read.items():
        for name, value in expected[section].items():
            got = getattr(options, name)
            want = value  # output paths too: relative to the current folder where run is called, as written
            assert got == want and type(got) is type(want), (section, name, got, want)
            if isinstance(want, Enum):
                assert got is want, (section, name)
    assert pipeline.variants[0].name == "v" and pipeline.build_enabled


def test_options_hold_the_vocabularys_types_from_every_edge() -> None:
    """The Python API, the CLI's text and the pipeline file all give the same typed object; a wrong value is
    one BadInput naming the field."""
    from trtpipe.bench.options import BenchOptions
    from trtpipe.errors import BadInput
    from trtpipe.optimize.options import OptimizeOptions

    options = OptimizeOptions(precision="int8", target="cpu", calib="digits", calib_method="entropy")
    assert options.precision is vocab.Precision.INT8 and options.target is vocab.Target.CPU
    assert options.calib_method is vocab.CalibMethod.ENTROPY
    assert BenchOptions(backend="onnxruntime,openvino").backend == (vocab.OnnxExecution.CPU,
                                                                    vocab.OnnxExecution.OPENVINO)
    with pytest.raises(BadInput, match=r"'precision' must be one of fp32, fp16, bf16, int8, not 'int9'"):
        OptimizeOptions(precision="int9")


# Modules where a value enters from outside (the CLI's and the pipeline file's text, a Python caller's argument,
# a JSON file or a child process's message): the only places a vocabulary enum is made from a plain value.
_EDGES = {"vocab.py", "options.py", "runtime/options.py", "artifact/records/manifest.py",
          "artifact/records/sections.py", "bench/rows.py", "bench/isolated.py", "bench/options.py", "embedding.py",
          "serve/repository/triton_python_model.py", "artifact/records/tuned.py", "artifact/records/engine.py"}


def test_typed_values_are_converted_only_at_the_edge() -> None:
    """Nothing downstream of an edge calls ``Precision(...)`` (or any vocabulary enum) on a value: options,
    descriptions and rows already hold the enum."""
    from enum import Enum

    enums = {name for name, value in vars(vocab).items() if isinstance(value, type) and issubclass(value, Enum)}
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = str(path.relative_to(SOURCE))
        if relative in _EDGES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in enums:
                found.append(f"{relative}:{node.lineno}: {node.func.id}(...)")
    assert not found, "typed values converted again downstream:\n" + "\n".join(found)


MAX_MODULE_LINES = 500  # issue #51's bound: a module longer than this holds two jobs; split it along its seam


def test_no_module_is_over_500_lines() -> None:
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
               for path in SOURCE.rglob("*.py")}
    assert lengths, "no module found under trtpipe/"
    over = {name: lines for name, lines in lengths.items() if lines > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split each along its seam): {over}"
