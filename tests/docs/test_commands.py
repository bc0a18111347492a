"""The command reference in docs/commands/ is what scripts/docs.py generates from the click group: a flag added,
renamed or re-documented without `make docs` fails here, naming the stale page."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import click

from tests.docs.pages import ROOT
from trtpipe.cli import main
from trtpipe.pipeline.config import SECTIONS


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trtpipe_docs_generator", ROOT / "scripts" / "docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_generated_command_pages_are_current() -> None:
    stale = _generator().stale_pages()
    assert not stale, f"stale command pages (run `make docs`): {stale}"


def test_every_command_and_flag_has_its_page() -> None:
    """Each command of the CLI has a page and each of its flags is on it (so the generator misses none)."""
    for name, command in main.commands.items():
        page = (ROOT / "docs" / "commands" / f"{name}.md").read_text()
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in page, f"{param.opts[-1]} of {name} is not on docs/commands/{name}.md"


def test_pipeline_keys_on_the_pages_exist() -> None:
    """A page's pipeline key names a real field of that pipeline section's options."""
    generator = _generator()
    for (command, group), sections in generator.PIPELINE_SECTIONS.items():
        params = [p for p in main.commands[command].params if (p.name or "").startswith(f"{group}__")]
        assert params, f"{command} has no '{group}' options"
        for section in sections:
            known = {f for f in SECTIONS[section].__dataclass_fields__}
            keys = {(p.name or "").partition("__")[2] for p in params}
            assert keys <= known, f"[{section}] has no keys {sorted(keys - known)} ({command} --help names them)"


def test_a_stale_page_is_reported(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The check really compares: a page that differs from the generated text is named."""
    generator = _generator()
    for path, text in generator.pages().items():
        (tmp_path / path.name).write_text(text)
    monkeypatch.setattr(generator, "COMMANDS_DIR", tmp_path)
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    monkeypatch.setattr(generator, "pages", lambda: {tmp_path / p.name: t for p, t in _generator().pages().items()})
    assert generator.stale_pages() == []
    (tmp_path / "optimize.md").write_text("# trtpipe optimize\n")
    (tmp_path / "gone.md").write_text("# trtpipe gone\n")
    assert generator.stale_pages() == ["optimize.md", "gone.md (no such command)"]
