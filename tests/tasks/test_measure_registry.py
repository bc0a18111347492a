"""How to add a task measure (docs/architecture.md): its module in trtpipe/tasks/ and one line in MEASURES
(trtpipe/tasks/registry.py). This walks the package: every module of tasks/ that defines a measure is one line of
the table, the table holds nothing else, and no module outside tasks/ imports a measure module; callers ask the
registry (MEASURES, infer_task, check_fits)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import trtpipe
from trtpipe.tasks import MEASURES
from trtpipe.vocab import Task

PACKAGE = Path(trtpipe.__file__).parent
ROOM = PACKAGE / "tasks"
# Modules outside tasks/ that still import a measure module, and which: the detection measure's decoders and its
# `Detections` are what a packaged detector and optimize's labels are made of. It only shrinks: a new importer
# fails, and so does a listed one that no longer imports it.
KNOWN = {
    "trtpipe/comparison.py": {"detect"},
    "trtpipe/optimize/stage.py": {"detect"},
    "trtpipe/models/packaged.py": {"detect"},
    "trtpipe/models/sources/base.py": {"detect"},
}


def _defines_a_measure(path: Path) -> bool:
    """A measure module defines, at its top level, ``EXPECTED``, ``fits`` and ``measure``."""
    tree = ast.parse(path.read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return {"fits", "measure"} <= functions and "EXPECTED" in names


def _measure_modules() -> set[str]:
    return {p.stem for p in ROOM.glob("*.py") if _defines_a_measure(p)}


def test_every_measure_module_is_one_line_of_measures() -> None:
    modules = _measure_modules()
    listed = [module.__name__.rsplit(".", 1)[-1] for module in MEASURES.values()]
    assert len(listed) == len(set(listed)), f"a measure module is listed twice: {listed}"
    assert set(listed) == modules, (f"MEASURES and the measure modules of trtpipe/tasks/ differ: not listed "
                                    f"{sorted(modules - set(listed))}, listed without a measure "
                                    f"{sorted(set(listed) - modules)}")
    # a task is spelled as its module is named, so that a measure added as its module and its line is a Task (and
    # a --task choice) without a member in the vocabulary (vocab.Task._missing_, Task.every)
    assert all(str(task) == module.__name__.rsplit(".", 1)[-1] for task, module in MEASURES.items()), MEASURES
    assert list(Task.every()) == list(MEASURES), (list(Task.every()), list(MEASURES))
    for name in modules:  # what the registry calls is there, as the recipe says
        module = importlib.import_module(f"trtpipe.tasks.{name}")
        assert callable(module.fits) and callable(module.measure) and isinstance(module.EXPECTED, str), name


def _measures_imported(path: Path, measures: set[str]) -> set[str]:
    """The measure modules ``path`` imports (nested imports included), by module or from the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "trtpipe.tasks":
            found |= {a.name for a in node.names} & measures
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trtpipe.tasks."):
            found |= {node.module.split(".")[2]} & measures
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("trtpipe.tasks.")} & measures
    return found


def test_nothing_outside_tasks_imports_a_measure_module() -> None:
    measures = _measure_modules()
    seen = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if ROOM in path.parents:
            continue
        imported = _measures_imported(path, measures)
        if imported:
            seen[path.relative_to(PACKAGE.parent).as_posix()] = imported
    new = {k: v for k, v in seen.items() if v - KNOWN.get(k, set())}
    assert not new, f"modules outside trtpipe/tasks/ import a measure (ask trtpipe.tasks' registry instead): {new}"
    gone = {k: v - seen.get(k, set()) for k, v in KNOWN.items() if v - seen.get(k, set())}
    assert not gone, f"no longer imported there: remove from KNOWN in this test: {gone}"


def test_the_walk_sees_a_measure_module_and_an_importer(tmp_path: Path) -> None:
    """The two walks above can fail: a file shaped like a measure module is one, and an import of one is seen."""
    module = tmp_path / "made_up.py"
    module.write_text('EXPECTED = "anything"\n\ndef fits(shape):\n    return True\n\n\n'
                      'def measure(reference, candidate, labels):\n    return None\n')
    assert _defines_a_measure(module)
    assert not _defines_a_measure(ROOM / "registry.py") and not _defines_a_measure(ROOM / "boxes.py")
    caller = tmp_path / "caller.py"
    caller.write_text("def f():\n    from trtpipe.tasks import classify, check_fits\n    import trtpipe.tasks.embed\n")
    assert _measures_imported(caller, _measure_modules()) == {"classify", "embed"}
