"""A factory is its own model: named after itself, keyed by its name and the weights it builds."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from trtpipe.models.options import ModelOptions
from trtpipe.pipeline.config import Pipeline

FACTORIES = textwrap.dedent("""
    from pathlib import Path

    import torch

    class Tiny(torch.nn.Module):
        input_shape = (1, 3, 16, 16)

        def __init__(self, width):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, width, 3)

        def forward(self, x):
            return self.conv(x).mean((2, 3))

    def lraspp():
        torch.manual_seed(0)
        return Tiny(4)

    def deeplab():
        torch.manual_seed(0)
        return Tiny(6)

    def unseeded():
        return Tiny(4)

    def from_seed_file():  # its weights change with seed.txt, its code does not
        torch.manual_seed(int(Path(__file__).with_name("seed.txt").read_text()))
        return Tiny(4)
""")
QUICK = ("--set", "bench.iters=2", "--set", "bench.warmup=0", "--set", "bench.batches=1", "--set", "bench.rounds=1")


def _statuses(reports: Path, name: str) -> dict[str, str]:
    return {s["stage"]: s["status"] for s in json.loads((reports / name / "run.json").read_text())["stages"]}


@pytest.fixture()
def seg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file of factories, in the working folder the default pipeline writes into."""
    (tmp_path / "seg.py").write_text(FACTORIES)
    (tmp_path / "seed.txt").write_text("0")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_model_is_named_after_its_factory() -> None:
    def name(source: str, given: str | None = None) -> str:
        return Pipeline(ModelOptions(source=source, name=given)).name

    assert name("seg.py:deeplab") == "deeplab" and name("models/seg.py:lraspp") == "lraspp"
    assert name("package.module:make_model") == "make_model"
    assert name("seg.py:deeplab", "mine") == "mine"  # an explicit name still wins
    assert name("digits_resnet") == "digits_resnet"  # registry names and checkpoints keep the names they had
    assert name("weights/finetuned.pt") == "finetuned" and name("model.safetensors") == "model"


def test_two_factories_of_one_file_are_two_models(seg: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    for factory in ("lraspp", "deeplab"):
        result = run_cli("run", f"seg.py:{factory}", *QUICK)
        assert result.exit_code == 0, result.output
        assert _statuses(seg / "reports", factory)["convert"] == "ran"
    onnx = {f: seg / "models" / f / "1" / "model.onnx" for f in ("lraspp", "deeplab")}
    assert onnx["lraspp"].read_bytes() != onnx["deeplab"].read_bytes()
    for factory, path in onnx.items():
        manifest = json.loads(path.with_suffix(".manifest.json").read_text())
        assert manifest["source"]["source"] == f"seg.py:{factory}" and manifest["source"]["name"] == factory


def test_one_name_for_two_factories_still_converts_each(seg: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """With the same [model] name the two share a run manifest: only the key tells them apart."""
    for factory in ("lraspp", "deeplab"):
        assert run_cli("run", f"seg.py:{factory}", "--set", "model.name=seg", *QUICK).exit_code == 0
        assert _statuses(seg / "reports", "seg")["convert"] == "ran"
    manifest = json.loads((seg / "models" / "seg" / "1" / "model.manifest.json").read_text())
    assert manifest["source"]["source"] == "seg.py:deeplab"


def test_changed_weights_rerun_convert_and_unchanged_reuse_it(seg: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("run", "seg.py:from_seed_file", *QUICK).exit_code == 0
    assert run_cli("run", "seg.py:from_seed_file", *QUICK).exit_code == 0
    assert _statuses(seg / "reports", "from_seed_file")["convert"] == "cached"
    (seg / "seed.txt").write_text("1")
    result = run_cli("run", "seg.py:from_seed_file", *QUICK)
    assert result.exit_code == 0, result.output
    assert _statuses(seg / "reports", "from_seed_file")["convert"] == "ran"


def test_an_unseeded_factory_is_converted_again_and_told_why(seg: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("run", "seg.py:unseeded", *QUICK).exit_code == 0
    result = run_cli("run", "seg.py:unseeded", *QUICK)
    assert result.exit_code == 0, result.output
    assert _statuses(seg / "reports", "unseeded")["convert"] == "ran"  # each call is a new model
    assert "The factory seg.py:unseeded builds different weights on each call: seed it" in result.output
