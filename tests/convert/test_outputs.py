"""Every output keeps its name and is judged; a budget nothing can measure is refused before any work."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import onnx
import pytest

from tests.conftest import error_line
from trtpipe.errors import BadInput
from trtpipe.models.user_code import load_postprocess

TWO_HEADS = textwrap.dedent("""
    import torch

    class TwoHeads(torch.nn.Module):
        input_shape = (1, 1, 32, 32)

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)

        def forward(self, x):
            features = torch.relu(self.conv(x))
            return {"out": features, "aux": features.mean((2, 3))}

    def make():
        torch.manual_seed(0)
        return TwoHeads()

    def decode(outputs):
        return [(torch.zeros(0, 4).numpy(), torch.zeros(0).numpy(), torch.zeros(0).numpy()) for _ in outputs[0]]
""")


@pytest.fixture(scope="module")
def two_heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("heads")
    (folder / "heads.py").write_text(TWO_HEADS)
    return folder


def test_dict_outputs_keep_their_names_and_each_is_verified(two_heads: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = two_heads / "heads.onnx"
    result = run_cli("convert", f"{two_heads / 'heads.py'}:make", "-o", out)
    assert result.exit_code == 0, result.output
    assert [o.name for o in onnx.load(str(out)).graph.output] == ["out", "aux"]  # not output_0, output_1
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["artifact"]["task"] == "generic"  # two heads: no task is implied
    case = manifest["verification"]["cases"][0]
    assert [o["name"] for o in case["outputs"]] == ["out", "aux"]  # each output compared with its own figures


def test_a_budget_no_task_figure_can_judge_is_refused(two_heads: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    source = two_heads / "heads.onnx"
    if not source.is_file():
        assert run_cli("convert", f"{two_heads / 'heads.py'}:make", "-o", source).exit_code == 0
    output = tmp_path / "int8.onnx"
    result = run_cli("optimize", source, "-o", output, "--precision", "int8", "--calib", "digits", "--eval", "digits",
                     "--max-accuracy-drop", "1")
    assert result.exit_code == 1
    assert "cannot be judged" in error_line(result.output) and "--task" in error_line(result.output)
    assert not output.exists()
    named = run_cli("optimize", source, "-o", output, "--precision", "int8", "--calib", "digits", "--task", "detect")
    assert named.exit_code == 1 and "--task detect does not fit the model's first output" in error_line(named.output)
    assert not output.exists()


def test_postprocess_is_the_users_function(two_heads: Path) -> None:
    decode = load_postprocess(f"{two_heads / 'heads.py'}:decode")
    assert callable(decode)
    with pytest.raises(BadInput, match=r"--postprocess 'decode' is not path/to/file.py:function"):
        load_postprocess("decode")
    with pytest.raises(BadInput, match=r"has no callable 'missing'"):
        load_postprocess(f"{two_heads / 'heads.py'}:missing")
