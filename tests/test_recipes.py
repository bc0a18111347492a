"""The architecture page's recipes, followed literally: a toy of each kind (a backend, a pass, an INT8 step, a model
source, a task measure) is added to a copy of the package in exactly the files its recipe names (docs/architecture.md,
"How to add ..."), and that copy, in fresh processes, lists each in its table and runs it: the backend opens a file,
the pass and the step run inside a real `trtpipe optimize`, the source is converted by `trtpipe convert`, and
`--task` judges with the measure. A recipe that silently needs a third file fails here: the copy would refuse the
toy.
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

        from trtpipe.runtime.capabilities import RunsOnnx
        from trtpipe.runtime.entry import BackendEntry
        from trtpipe.runtime.onnxref.settings import OnnxRefSettings
        from trtpipe.vocab import ArtifactKind, BackendKind

        ENTRY = BackendEntry(BackendKind("onnxref"), "trtpipe.runtime.onnxref.backend:OnnxRefBackend", OnnxRefSettings,
                             runs=(ArtifactKind.ONNX,), library="onnx", title="ONNX reference", portability=5,
                             can={RunsOnnx: "trtpipe.runtime.onnxref.executions"})
        ''',
    "executions.py": '''
        """How the toy runs ONNX files (capability RunsOnnx): one way, under its own name, on the CPU."""

        from trtpipe.vocab import OnnxExecution

        executions = (OnnxExecution("onnxref"),)
        gpu_executions = ()
        foreign_int8_targets = ()


        def execution_settings(execution, trt_profile, workspace):
            return {}


        def check_execution(execution):
            return None


        def execution_for(names):
            return None
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
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

import trtpipe
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.passes.loader import graph_pass
from trtpipe.optimize.passes.registry import graph_pass_names
from trtpipe.bench.options import BenchOptions
from trtpipe.runtime.registry import BACKENDS, backend_name, backend_of, open_artifact, runtimes
from trtpipe.vocab import ArtifactKind, BackendKind, OnnxExecution

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

# bench names it as it names ONNX Runtime: one row set each, from its folder alone.
execution = OnnxExecution("onnxref")
assert BenchOptions(backend="onnxruntime,onnxref").backend == (OnnxExecution.CPU, execution)
assert backend_of(execution) is kind and execution in OnnxExecution.every()
done = subprocess.run([sys.executable, "-m", "trtpipe.cli", "bench", str(path), str(path), "--backend",
                       "onnxruntime,onnxref", "--batch", "1", "--iters", "5", "--warmup", "1", "--json",
                       str(Path(sys.argv[2]) / "bench.json")], capture_output=True, text=True, timeout=300)
assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
rows = json.loads((Path(sys.argv[2]) / "bench.json").read_text())["results"]
toy_rows = [row for row in rows if row["backend"] == "onnxref"]
assert [row["variant"] for row in toy_rows] == ["onnxref-fp32 (toy)"], [row["variant"] for row in rows]
assert toy_rows[0]["max_abs_err"] == 0.0 and toy_rows[0]["p50_ms"] > 0  # it ran the file, against the reference
print("ok")
'''


TOY_STEP = {
    "__init__.py": '''
        """A toy INT8 step: it keeps the candidate it is given and records that it ran."""
        ''',
    "step.py": '''
        from dataclasses import dataclass
        from typing import Any, ClassVar

        from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome
        from trtpipe.optimize.judging.step_rule import StepVerdict


        @dataclass(frozen=True)
        class ToyRecord:
            nodes: int

            def to_dict(self) -> dict[str, Any]:
                return {"toy_step": {"nodes": self.nodes}}


        class ToyStep:
            name: ClassVar[str] = "toy_step"
            purpose: ClassVar[str | None] = None

            def wanted(self, run: Int8Run) -> bool:
                return True

            def apply(self, run: Int8Run, current: Candidate) -> Outcome:
                return Outcome(current, ToyRecord(len(current.model.graph.node)))

            def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome:
                return outcome
        ''',
}

TOY_SOURCE = '''
    """MODEL as ``toy-conv``: a seeded two-layer convolution, at 1x3x16x16."""

    from __future__ import annotations

    from typing import ClassVar

    from trtpipe.models.sources.base import Found, PytorchSource


    class ToyConv(PytorchSource):
        kind: ClassVar[str] = "toy"

        def claims(self, spec: str) -> bool:
            return spec == "toy-conv"

        def find(self, spec: str, arch: str | None, trust: bool) -> Found:
            import torch
            from torch import nn

            torch.manual_seed(0)
            module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
            return Found(module, "toy-conv", spec, "toy", (1, 3, 16, 16), None)

        def natural_data(self, spec: str) -> str | None:
            return None
    '''

TOY_MEASURE = '''
    """A toy measure: the share of values whose sign the candidate keeps."""

    from __future__ import annotations

    import numpy as np

    from trtpipe.intervals import wilson
    from trtpipe.tasks.base import Fidelity
    from trtpipe.vocab import Task

    EXPECTED = "any shape: one sign per value"


    def fits(shape: tuple[int, ...]) -> bool:
        return len(shape) >= 1


    def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
        same = np.sign(reference) == np.sign(candidate)
        return Fidelity(Task("toysign"), float(same.mean()), "signs kept",
                        agreement_interval=wilson(int(same.sum()), int(same.size)))
    '''

RUN_TOYS = '''
import json
import subprocess
import sys
from pathlib import Path

from trtpipe.optimize.int8.steps import STEPS
from trtpipe.models.sources import SOURCES, source_for
from trtpipe.tasks import MEASURES
from trtpipe.vocab import Task

package, work = Path(sys.argv[1]), Path(sys.argv[2])
assert [step.name for step in STEPS][-1] == "toy_step"
assert type(source_for("toy-conv")).__name__ == "ToyConv" and type(SOURCES[0]).__name__ == "ToyConv"
assert Task("toysign") in MEASURES and Task("toysign") in Task.every()


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "trtpipe.cli", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


cli("convert", "toy-conv", "-o", str(work / "toy.onnx"))
out = cli("optimize", str(work / "toy.onnx"), "-o", str(work / "toy_int8.onnx"), "--precision", "int8",
          "--target", "cpu", "--calib", "random", "--calib-samples", "16", "--passes", "fuse,toy_identity",
          "--task", "toysign")
manifest = json.loads((work / "toy_int8.manifest.json").read_text())
text = json.dumps(manifest)
assert '"toy_step": {"nodes":' in text, text[:3000]
assert "toy_identity" in text, text[:3000]
assert "signs kept" in out, out[-3000:]
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


def _add_import(path: Path, line: str) -> None:
    """``line`` after the module's last ``from trtpipe`` import."""
    text = path.read_text()
    last = list(re.finditer(r"^from trtpipe\.[^\n]+\n", text, re.MULTILINE))[-1]
    path.write_text(text[:last.end()] + line + "\n" + text[last.end():])


def _add_first_entry(path: Path, opening: str, line: str) -> None:
    """``line`` as the first entry of the table that the regular expression ``opening`` opens in ``path``."""
    text = path.read_text()
    table = re.search(opening, text, re.MULTILINE)
    assert table, f"{opening} is not in {path}"
    path.write_text(text[:table.end()] + line + text[table.end():])


def _add_toy_step(package: Path) -> set[str]:
    folder = package / "optimize" / "int8" / "steps" / "toy_step"
    folder.mkdir()
    for name, text in TOY_STEP.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    table = package / "optimize" / "int8" / "steps" / "__init__.py"
    text = table.read_text()
    assert text.count("\n)\n") == 1, "STEPS is the one tuple closed at the end of int8/steps/__init__.py"
    table.write_text(text.replace("\n)\n", "\n    ToyStep(),\n)\n"))  # last: it runs after every other step
    _add_import(table, "from trtpipe.optimize.int8.steps.toy_step.step import ToyStep")
    return {"trtpipe/optimize/int8/steps/toy_step/", "trtpipe/optimize/int8/steps/__init__.py"}


def _add_toy_source(package: Path) -> set[str]:
    (package / "models" / "sources" / "toy.py").write_text(textwrap.dedent(TOY_SOURCE).lstrip())
    table = package / "models" / "sources" / "__init__.py"
    _add_first_entry(table, r"^SOURCES: tuple\[ModelSource, \.\.\.\] = \(\n", "    ToyConv(),\n")
    _add_import(table, "from trtpipe.models.sources.toy import ToyConv")
    return {"trtpipe/models/sources/toy.py", "trtpipe/models/sources/__init__.py"}


def _add_toy_measure(package: Path) -> set[str]:
    (package / "tasks" / "toysign.py").write_text(textwrap.dedent(TOY_MEASURE).lstrip())
    registry = package / "tasks" / "registry.py"
    _add_first_entry(registry, r"^MEASURES: dict\[Task, ModuleType\] = \{\n", "    Task(\"toysign\"): toysign,\n")
    _add_import(registry, "from trtpipe.tasks import toysign")
    return {"trtpipe/tasks/toysign.py", "trtpipe/tasks/registry.py"}


def _touched_within(touched: set[str], named: set[str]) -> bool:
    """Every file touched is one the recipe names (``<engine>``/``<name>`` placeholders stand for the toy's)."""
    patterns = [re.sub(r"<(engine|name|kind|task)>", "[a-z_]+", re.escape(n)) for n in named]
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


def test_a_toy_int8_step_model_source_and_task_measure_added_as_the_recipes_say_run_in_optimize(
        tmp_path: Path) -> None:
    """The three room recipes together, in one copy (with the toy pass, which optimize runs too): `convert` finds
    the toy source, `optimize --precision int8` runs the toy step (its record in the manifest) and judges with the
    toy measure named by `--task`."""
    copy = tmp_path / "copy"
    package = copy / "trtpipe"
    shutil.copytree(ROOT / "trtpipe", package, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    for adder, title in ((_add_toy_step, "How to add an INT8 step"), (_add_toy_source, "How to add a model source"),
                         (_add_toy_measure, "How to add a task measure"), (_add_toy_pass, "How to add a pass")):
        touched = adder(package)
        assert _touched_within(touched, _recipe_files(title)), (title, touched, _recipe_files(title))
    result = subprocess.run([sys.executable, "-c", RUN_TOYS, str(package), str(tmp_path)], cwd=copy,
                            env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (result.stdout[-3000:]
                                                                             + result.stderr[-3000:])
