"""The record files are the artifact room's alone: no module outside ``trtpipe/artifact`` builds their paths or
recognises their contents, found by a walk of the package's source (string constants in code, not docstrings)."""

from __future__ import annotations

import ast
from pathlib import Path

import trtpipe

PACKAGE = Path(trtpipe.__file__).parent
ROOM = PACKAGE / "artifact"
# What a record file's name ends with (the engine sidecar is ENGINE.json: model.plan.json, model.engine.json) and
# what its schema string starts with.
SUFFIXES = (".manifest.json", ".tuned.json", ".calib.json", ".plan.json", ".engine.json")
SCHEMAS = ("trtpipe.manifest/", "trtpipe.engine/", "trtpipe.tuned/", "trtpipe.calibration/")
# Modules outside the room that still spell a record's name, each with the fix that takes it out; the coordinator's
# to make (the module is another helper's). A module listed here that no longer does fails the test below.
PENDING: dict[str, str] = {}  # file -> why it still spells a record file; only shrinks


def _spelled(path: Path, root: Path = PACKAGE) -> list[str]:
    """Each string constant in ``path``'s code (docstrings left out; a constant piece of an f-string counts) that
    ends with a record file's suffix or starts with a record's schema."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            docstrings.add(id(first.value))
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and (node.value.lower().endswith(SUFFIXES) or node.value.startswith(SCHEMAS))]


def test_no_module_outside_the_artifact_room_spells_a_record_file() -> None:
    outside = [path for path in sorted(PACKAGE.rglob("*.py")) if ROOM not in path.parents]
    found = [hit for path in outside if str(path.relative_to(PACKAGE)) not in PENDING for hit in _spelled(path)]
    assert not found, "read and write record files through trtpipe.artifact.records:\n" + "\n".join(found)
    fixed = [name for name in PENDING if not _spelled(PACKAGE / name)]
    assert not fixed, f"no longer spells a record file, take it out of PENDING: {fixed}"


def test_the_walk_finds_each_record_in_its_own_module() -> None:
    """The walk sees what it looks for: every suffix it can see and every schema is spelled in the room."""
    records = PACKAGE / "artifact" / "records"
    found = [hit for path in sorted(records.glob("*.py")) for hit in _spelled(path)]
    for name, spelled in (("manifest.py", ".manifest.json"), ("tuned.py", ".tuned.json"),
                          ("calibration.py", ".calib.json"), ("manifest.py", "trtpipe.manifest/"),
                          ("engine.py", "trtpipe.engine/"), ("tuned.py", "trtpipe.tuned/"),
                          ("calibration.py", "trtpipe.calibration/")):
        assert any(hit.startswith(f"artifact/records/{name}:") and spelled in hit for hit in found), (name, spelled)


def test_the_walk_flags_code_not_prose(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text('"""Ranges are cached in OUT.calib.json."""\n'
                      'HELP = "Calibration range cache (default: OUT.calib.json)."\n'
                      'def cache(output, name):\n'
                      '    """Beside it: model.calib.json"""\n'
                      '    return output.with_suffix(".calib.json"), f"{name}.manifest.json"\n')
    assert _spelled(module, tmp_path) == ["module.py:5: '.calib.json'", "module.py:5: '.manifest.json'"]
