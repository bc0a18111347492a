"""Passes declare themselves: a module in optimize/passes/ is a `--passes` choice or a precision's pass only when
it says so at its top, read without importing it; helper modules beside the passes are never offered."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtpipe.optimize.passes.loader import DeclaredPass, graph_pass, precision_pass
from trtpipe.optimize.passes.registry import GraphPass, PrecisionPass, declared_passes, graph_pass_names, parse_passes
from trtpipe.vocab import Precision


def test_only_modules_that_declare_a_pass_are_passes(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text('"""Shared by two passes."""\nimport onnx\n\nPASSES = ["fuse"]\n')
    (tmp_path / "sharpen.py").write_text('from x import GraphPass\n\nPASS = GraphPass("sharpens" " edges")\n')
    (tmp_path / "half.py").write_text('PASS = PrecisionPass(Precision.FP16, description="halves")\n')
    (tmp_path / "notes.txt").write_text('PASS = GraphPass("not a module")\n')
    assert declared_passes(tmp_path) == {"half": PrecisionPass(Precision.FP16, "halves"),
                                         "sharpen": GraphPass("sharpens edges")}


def test_a_declaration_must_be_readable_without_importing(tmp_path: Path) -> None:
    (tmp_path / "computed.py").write_text('PASS = GraphPass(describe())\n')
    with pytest.raises(ValueError, match="must be literals"):
        declared_passes(tmp_path)


def test_the_shipped_passes() -> None:
    assert graph_pass_names() == ("equalize", "fuse", "scale_depthwise")
    for helper in ("context", "registry"):
        with pytest.raises(ValueError, match=f"unknown pass {helper}"):
            parse_passes(helper)
    assert parse_passes("fuse, equalize") == ("fuse", "equalize") and parse_passes("none") == ()
    for name in graph_pass_names():
        loaded = graph_pass(name)  # a Pass: its name, what it does, apply()
        assert isinstance(loaded, DeclaredPass) and isinstance(loaded.module.PASS, GraphPass)
        assert loaded.name == name and loaded.description == loaded.module.PASS.description  # read == declared
    assert precision_pass(Precision.FP32) is None
    for precision in Precision:
        if precision.optimizable and precision is not Precision.FP32:
            loaded = precision_pass(precision)
            assert isinstance(loaded, DeclaredPass) and loaded.module.PASS.precision is precision
