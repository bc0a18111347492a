"""Shared fixtures: real models converted once per test session, and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trtpipe.cli import main


@pytest.fixture(autouse=True)
def fast_int8_recipe(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """INT8's default recipe learns each layer's rounding (minutes per model on 2 cores); tests that are not about
    the recipes run the fast one, which places Q/DQ by the same rules. Tests marked ``default_recipe`` get the
    real default."""
    if request.node.get_closest_marker("default_recipe") is None:
        from trtpipe.optimize.int8 import recipes
        from trtpipe.vocab import Quality

        monkeypatch.setattr(recipes, "DEFAULT_QUALITY", Quality.FAST)


@pytest.fixture(scope="session")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled trained model, converted and verified through the public API."""
    from trtpipe.convert import convert
    from trtpipe.models.loader import load_model

    out = tmp_path_factory.mktemp("digits") / "model.onnx"
    convert(load_model("digits_resnet"), out)
    return out


@pytest.fixture()
def run_cli():  # type: ignore[no-untyped-def]
    """Invoke the CLI in-process; returns click's Result (exit_code, output)."""
    runner = CliRunner()

    def invoke(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return invoke


def error_line(output: str) -> str:
    """The one 'Error: ...' line a user error prints."""
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, f"expected one error line in:\n{output}"
    return lines[0]
