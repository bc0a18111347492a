"""docs/architecture.md is checked against the package: its module table names every top-level module and
subpackage of trtpipe/ and nothing else, every `trtpipe/...` path on the page exists, and its layer list is the
layers contract import-linter enforces (pyproject.toml), top to bottom."""

from __future__ import annotations

import re
import tomllib

from tests.docs.pages import DOCS, ROOT

PAGE = (DOCS / "architecture.md").read_text()
PACKAGE = ROOT / "trtpipe"


def _package_entries() -> set[str]:
    entries = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").is_file():
            entries.add(f"{path.name}/")
        elif path.suffix == ".py" and path.name != "__init__.py":
            entries.add(path.name)
    return entries


def _table_entries() -> set[str]:
    table = PAGE.split("<!-- modules:", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", table, flags=re.M))


def test_the_module_table_names_every_top_level_module() -> None:
    named, present = _table_entries(), _package_entries()
    assert not present - named, f"modules missing from docs/architecture.md: {sorted(present - named)}"
    assert not named - present, f"docs/architecture.md names modules that do not exist: {sorted(named - present)}"


def test_every_path_on_the_page_exists() -> None:
    paths = set(re.findall(r"`(trtpipe/[\w/.]+)`", PAGE))
    # a module named in a table row exists under that row's package
    for row in re.findall(r"^\| `(\w+/)` \| [\w/]+ \| (.*) \|$", PAGE, flags=re.M):
        folder, text = row
        paths |= {f"trtpipe/{folder}{name}" for name in re.findall(r"`([\w/]+\.py|[\w]+/)`", text)}
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_layers_are_import_linters() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    block = PAGE.split("<!-- layers:", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    documented = [" | ".join(part.strip() for part in line.split("|")) for line in block.strip().splitlines()]
    enforced = [" | ".join(part.strip() for part in layer.split("|")) for layer in contract["layers"]]
    assert documented == enforced, "docs/architecture.md's layers differ from pyproject.toml's import-linter contract"


def test_the_table_reads_in_layer_order() -> None:
    """The module table reads top layer first, as the contract lists them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    position = {}
    for index, layer in enumerate(contract["layers"]):
        for module in layer.split("|"):
            position[module.strip().removeprefix("trtpipe.")] = index
    table = PAGE.split("<!-- modules:", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)
    order = [position[name.removesuffix("/").removesuffix(".py")] for name in rows]
    assert order == sorted(order), "docs/architecture.md's module table is not in layer order, top first"


RECIPES = ("a backend", "a pass", "an INT8 step", "a model source", "a task measure")


def _recipes() -> dict[str, str]:
    """The "How to add..." section's recipes: title -> text."""
    section = PAGE.split("\n## How to add...\n", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### How to add (.+)$", section, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _field(text: str, name: str) -> str:
    """A recipe's ``Files:``, ``Table:`` or ``Checked by:`` paragraph, up to the next field."""
    match = re.search(rf"^{name}: (.*?)(?=^\w[\w ]*: |\Z)", text, flags=re.M | re.S)
    assert match, f"no '{name}:' in the recipe"
    return match.group(1)


def _exists(path: str) -> bool:
    """A path the page names; one with a placeholder (``<engine>``) exists where the folder it goes in does."""
    if "<" in path:
        return (ROOT / path.split("<", 1)[0]).is_dir()
    return (ROOT / path.rstrip("/")).exists()


def test_the_five_recipes_name_files_a_table_and_a_walking_test_that_exist() -> None:
    recipes = _recipes()
    assert tuple(recipes) == RECIPES, f"docs/architecture.md's recipes: {list(recipes)}, expected {list(RECIPES)}"
    for title, text in recipes.items():
        files = re.findall(r"`(trtpipe/[^`]+)`", _field(text, "Files"))
        assert 1 <= len(files) <= 2, f"how to add {title}: names {files}, not one or two files"
        assert all(_exists(f) for f in files), f"how to add {title}: {files} do not all exist"
        table, registry = re.fullmatch(r"`(\w+)` in `(trtpipe/[\w/.]+\.py)`\.\s*", _field(text, "Table")).groups()
        assert registry in files, f"how to add {title}: the table's file {registry} is not among the files touched"
        assert re.search(rf"^{table}\b.*=", (ROOT / registry).read_text(), flags=re.M), f"{registry} has no {table}"
        test = re.match(r"`(tests/[\w/]+\.py)`", _field(text, "Checked by")).group(1)
        source = (ROOT / test).read_text()
        assert re.search(r"^def test_", source, flags=re.M), f"how to add {title}: {test} holds no test"
        assert table in source, f"how to add {title}: {test} does not walk {table}"


def test_a_recipe_that_names_a_missing_file_is_caught() -> None:
    """The checks above can fail: a made-up file, a placeholder in a folder that is not there, three files."""
    assert not _exists("trtpipe/tasks/not_a_module.py")
    assert not _exists("trtpipe/no_such_room/<name>.py")
    assert _exists("trtpipe/tasks/<task>.py") and _exists("trtpipe/runtime/registry.py")
    text = "Files: `trtpipe/a.py`, `trtpipe/b.py` and\n`trtpipe/c.py`.\nTable: `X` in `trtpipe/a.py`.\n"
    assert len(re.findall(r"`(trtpipe/[^`]+)`", _field(text, "Files"))) == 3
