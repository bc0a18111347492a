"""The architecture page's recipes, followed literally: a toy backend and a toy pass are added to a copy of the
package in exactly the files their recipe names (docs/architecture.md, "How to add a backend" and "How to add a
pass"), and that copy, imported in a fresh process, lists them in its registry and its pass table and runs them.
A recipe that silently needs a third file fails here: the copy would refuse the toy.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"


def _recipe_files(title: str) -> set[str]:
    """The files a recipe's "Files:" line names (a folder ends with /), the engine or name placeholder kept."""
    section = PAGE.read_text().split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
    files_line = section.split("Files:", 1)[1].split("Table:", 1)[0]
    return set(re.findall(r"`(trtpipe/[^`]+)`", files_line))


TOY_BACKEND = {
    "__init__.py": '''
        """A toy backend: ONNX files run by ONNX's own reference evaluator."""

        from trtpipe.runtime.entry import BackendEntry
        from trtpipe.runtime.onnxref.settings import OnnxRefSettings
        from trtpipe.vocab import ArtifactKind, BackendKind

        ENTRY = BackendEntry(BackendKind("onnxref"), "trtpipe.runtime.onnxref.backend:OnnxRefBackend", OnnxRefSettings,
                             runs=(ArtifactKind.ONNX,), library="onnx", title="ONNX reference", portability=5)
        ''',
    "settings.py": '''
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class OnnxRefSettings:
            threads: int | None = None
        ''',
    "backend.py": '''
        from pathlib import Path

        import numpy as np

        from trtpipe.artifact.description import ArtifactDescription, describe_artifact
        from trtpipe.runtime.base import Backend
        from trtpipe.runtime.onnxref.settings import OnnxRefSettings
        from trtpipe.vocab import BackendKind


        class OnnxRefBackend(Backend):
            kind = BackendKind("onnxref")
            settings_type = OnnxRefSettings

            def __init__(self, artifact: Path | ArtifactDescription, options: object = None) -> None:
                from onnx.reference import ReferenceEvaluator

                self.accept(options)
                description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(artifact)
                self._inputs, self._outputs = list(description.inputs), list(description.outputs)
                self.evaluator = ReferenceEvaluator(str(description.path))

            def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
                return list(self.evaluator.run(None, feeds))
        ''',
}

TOY_PASS = '''
    """A toy graph pass: the model as it is."""


    def apply(model, context):
        return model
    '''

CHECK = '''
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

import trtpipe
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.passes.loader import graph_pass
from trtpipe.optimize.passes.registry import graph_pass_names
from trtpipe.runtime.registry import BACKENDS, backend_name, open_artifact, runtimes
from trtpipe.vocab import ArtifactKind, BackendKind

assert trtpipe.__file__.startswith(sys.argv[1]), trtpipe.__file__
kind = BackendKind("onnxref")
assert kind in BACKENDS and kind in runtimes(ArtifactKind.ONNX) and backend_name(kind) == "ONNX reference"

graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "toy",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
path = Path(sys.argv[2]) / "toy.onnx"
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
x = np.array([[-1.0, 0.0, 2.0, -3.0]], np.float32)
with open_artifact(path, runtime=kind) as toy, open_artifact(path) as reference:
    assert type(toy).__name__ == "OnnxRefBackend"
    np.testing.assert_array_equal(toy.run(x)[0], reference.run(x)[0])

assert "toy_identity" in graph_pass_names()
assert OptimizeOptions(passes="fuse,toy_identity").passes == ("fuse", "toy_identity")
model = onnx.load(str(path))
assert graph_pass("toy_identity").apply(model, None) is model
print("ok")
'''


def _add_toy_backend(package: Path) -> set[str]:
    folder = package / "runtime" / "onnxref"
    folder.mkdir()
    for name, text in TOY_BACKEND.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    registry = package / "runtime" / "registry.py"
    text = registry.read_text()
    imports = re.search(r"^from trtpipe\.runtime import (.+)$", text, re.MULTILINE)
    assert imports, "the registry imports its backend folders on one line"
    text = text.replace(imports.group(0), f"{imports.group(0)}\nfrom trtpipe.runtime import onnxref")
    table = re.search(r"^BACKENDS: dict\[BackendKind, BackendEntry\] = \{\n", text, re.MULTILINE)
    assert table, "BACKENDS is a dict literal in runtime/registry.py"
    text = text[:table.end()] + "    BackendKind(\"onnxref\"): onnxref.ENTRY,\n" + text[table.end():]
    registry.write_text(text)
    return {"trtpipe/runtime/onnxref/", "trtpipe/runtime/registry.py"}


def _add_toy_pass(package: Path) -> set[str]:
    (package / "optimize" / "passes" / "toy_identity.py").write_text(textwrap.dedent(TOY_PASS).lstrip())
    registry = package / "optimize" / "passes" / "registry.py"
    text = registry.read_text()
    table = re.search(r"^PASSES: dict\[str, Declaration\] = \{\n", text, re.MULTILINE)
    assert table, "PASSES is a dict literal in optimize/passes/registry.py"
    text = text[:table.end()] + '    "toy_identity": GraphPass("the model as it is (a toy)"),\n' + text[table.end():]
    registry.write_text(text)
    return {"trtpipe/optimize/passes/toy_identity.py", "trtpipe/optimize/passes/registry.py"}


def _touched_within(touched: set[str], named: set[str]) -> bool:
    """Every file touched is one the recipe names (``<engine>``/``<name>`` placeholders stand for the toy's)."""
    patterns = [re.escape(n).replace(re.escape("<engine>"), r"[a-z_]+").replace(re.escape("<name>"), r"[a-z_]+")
                for n in named]
    return all(any(re.fullmatch(p, file) for p in patterns) for file in touched)


def test_a_toy_backend_and_a_toy_pass_added_as_the_recipes_say_are_listed_and_run(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    package = copy / "trtpipe"
    shutil.copytree(ROOT / "trtpipe", package, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    backend_files = _add_toy_backend(package)
    pass_files = _add_toy_pass(package)
    assert _touched_within(backend_files, _recipe_files("How to add a backend")), backend_files
    assert _touched_within(pass_files, _recipe_files("How to add a pass")), pass_files
    result = subprocess.run([sys.executable, "-c", CHECK, str(package), str(tmp_path)], cwd=copy,
                            env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
