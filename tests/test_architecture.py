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
                 "trtpipe.pipeline.config"]


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
    ("verify", "trtpipe.convert.options:ConvertOptions", ("opset", "dynamic_batch")),  # verify reads the file's
    ("verify", "trtpipe.models.options:ModelOptions", ()),
    ("bench", "trtpipe.bench.options:BenchOptions", ()),
    ("bench", "trtpipe.models.options:ModelOptions", ()),
    ("optimize", "trtpipe.optimize.options:OptimizeOptions", ()),
    ("build", "trtpipe.engine.options:EngineOptions", ()),
    ("serve", "trtpipe.serve.options:ServeOptions", ("instances", "triton_backend")),  # Triton export settings
    ("run", "trtpipe.pipeline.options:SelectOptions", ()),
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


def _toml_value(value: object, spec: object) -> str | None:
    if value is None or value == () or value == {}:
        return None
    formatted = spec.format(value) if spec.format else value  # type: ignore[attr-defined]
    if isinstance(formatted, bool):
        return "true" if formatted else "false"
    if isinstance(formatted, (int, float)):
        return repr(formatted)
    return '"' + str(formatted) + '"'


def test_every_option_field_is_a_pipeline_key_and_reads_back() -> None:
    """Each section of the pipeline file is its options class: every field is a key, and a file that writes
    every field (as a user would, in the format the CLI takes) reads back as the same options."""
    from trtpipe.options import field_default, option_fields
    from trtpipe.pipeline.config import SECTIONS, load_pipeline, section_keys

    for section, cls in SECTIONS.items():
        assert {f.name for f, _ in option_fields(cls)} <= set(section_keys(section)), section
    lines = ['[model]\nsource = "digits_resnet"']
    for section in ("convert", "bench", "select", "serve", "build"):
        lines.append(f"[{section}]")
        for item, spec in option_fields(SECTIONS[section]):
            text = _toml_value(field_default(item), spec)
            if text is not None:
                lines.append(f"{item.name} = {text}")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "all.toml"
        path.write_text("\n".join(lines) + "\n")
        pipeline = load_pipeline(path, ["bench.duration=2.5", "variants.calib_samples=8"])
    for section in ("convert", "select", "serve", "build"):
        assert getattr(pipeline, section) == SECTIONS[section](), section
    assert pipeline.bench == SECTIONS["bench"](duration=2.5)  # --set wins over the file
