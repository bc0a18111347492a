"""Every way a user can name MODEL, and every way it can be wrong."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import error_line
from trtpipe.errors import BadInput
from trtpipe.models.digits import load_trained
from trtpipe.models.loader import load_model


def _outputs(module: torch.nn.Module, shape: tuple[int, ...] = (2, 1, 32, 32)) -> np.ndarray:
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
    with torch.inference_mode():
        return module.eval()(x).numpy()


@pytest.fixture(scope="module")
def trained() -> torch.nn.Module:
    return load_trained()


def test_state_dict_checkpoint_with_arch(tmp_path: Path, trained: torch.nn.Module) -> None:
    path = tmp_path / "digits.pt"
    torch.save(trained.state_dict(), path)
    loaded = load_model(str(path), arch="digits_resnet")
    assert loaded.source_kind == "state_dict" and loaded.input_shape == (1, 1, 32, 32)
    np.testing.assert_array_equal(_outputs(loaded.module), _outputs(trained))


def test_wrapped_and_data_parallel_state_dicts(tmp_path: Path, trained: torch.nn.Module) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()}, "epoch": 3}, path)
    np.testing.assert_array_equal(_outputs(load_model(str(path), arch="digits_resnet").module), _outputs(trained))


def test_safetensors_checkpoint(tmp_path: Path, trained: torch.nn.Module) -> None:
    path = tmp_path / "digits.safetensors"
    save_file(dict(trained.state_dict()), str(path))
    loaded = load_model(str(path), arch="digits_resnet")
    assert loaded.source_kind == "safetensors" and loaded.source_sha256
    np.testing.assert_array_equal(_outputs(loaded.module), _outputs(trained))


def test_fine_tuned_classifier_width_is_read_from_the_checkpoint(tmp_path: Path) -> None:
    import torchvision

    path = tmp_path / "finetuned.pt"
    torch.save(torchvision.models.mobilenet_v3_small(num_classes=7).state_dict(), path)
    loaded = load_model(str(path), arch="mobilenet_v3_small", input_shape=(1, 3, 64, 64))
    assert _outputs(loaded.module, (1, 3, 64, 64)).shape == (1, 7)


def test_state_dict_that_does_not_fit_lists_keys(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "other.pt"
    torch.save({"features.0.weight": torch.zeros(3), "classifier.bias": torch.zeros(10)}, path)
    result = run_cli("convert", path, "--arch", "digits_resnet", "-o", tmp_path / "x.onnx")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "does not fit --arch digits_resnet" in line
    assert "missing keys (stem.0.weight" in line and "unexpected keys (features.0.weight" in line
    assert not (tmp_path / "x.onnx").exists()


def test_state_dict_without_arch_asks_for_it(tmp_path: Path, trained: torch.nn.Module) -> None:
    path = tmp_path / "weights.pt"
    torch.save(trained.state_dict(), path)
    with pytest.raises(BadInput, match="pass --arch NAME"):
        load_model(str(path))


def test_pickled_checkpoint_is_refused_unless_trusted(tmp_path: Path, run_cli,  # type: ignore[no-untyped-def]
                                                      trained: torch.nn.Module) -> None:
    path = tmp_path / "whole_model.pt"
    torch.save(trained, path)  # pickles the class: loading it runs code
    result = run_cli("convert", path, "-o", tmp_path / "x.onnx")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "needs full unpickling" in line and "--trust-checkpoint" in line
    loaded = load_model(str(path), trust_checkpoint=True, input_shape=(1, 1, 32, 32))
    np.testing.assert_array_equal(_outputs(loaded.module), _outputs(trained))


def test_torchscript_file(tmp_path: Path, trained: torch.nn.Module) -> None:
    path = tmp_path / "digits.pt"
    torch.jit.trace(trained, torch.zeros(1, 1, 32, 32)).save(str(path))
    with pytest.raises(BadInput, match="--input-shape"):
        load_model(str(path))
    loaded = load_model(str(path), input_shape=(1, 1, 32, 32))
    assert loaded.source_kind == "torchscript"
    np.testing.assert_allclose(_outputs(loaded.module), _outputs(trained), atol=1e-6)


def test_factory_from_file_and_from_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = textwrap.dedent("""
        import torch

        class Tiny(torch.nn.Module):
            input_shape = (1, 3, 16, 16)

            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)

            def forward(self, x):
                return self.conv(x).mean((2, 3))

        def make():
            return Tiny()

        def not_a_module():
            return 42
    """)
    (tmp_path / "tiny_models.py").write_text(source)
    loaded = load_model(f"{tmp_path}/tiny_models.py:make")
    assert loaded.input_shape == (1, 3, 16, 16) and loaded.source_kind == "factory" and loaded.source_sha256
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_model("tiny_models:make").input_shape == (1, 3, 16, 16)
    with pytest.raises(BadInput, match=r"returned a int, not a torch\.nn\.Module"):
        load_model("tiny_models:not_a_module")
    with pytest.raises(BadInput, match="has no callable 'missing'"):
        load_model("tiny_models:missing")
    with pytest.raises(BadInput, match="Could not import no_such_module"):
        load_model("no_such_module:make")


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"PK\x03\x04truncated zip"])
def test_corrupt_checkpoint(tmp_path: Path, content: bytes, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "broken.pt"
    path.write_bytes(content)
    result = run_cli("convert", path, "--arch", "digits_resnet", "-o", tmp_path / "x.onnx")
    assert result.exit_code == 1
    assert "is not a readable PyTorch checkpoint" in error_line(result.output)


def test_corrupt_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "broken.safetensors"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(BadInput, match="not a readable safetensors file"):
        load_model(str(path), arch="digits_resnet")


def test_missing_file(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("convert", tmp_path / "nope.pt", "--arch", "resnet18", "-o", tmp_path / "x.onnx")
    assert result.exit_code == 1
    assert error_line(result.output) == f"Error: Model file {tmp_path / 'nope.pt'} does not exist."


class _TwoInputs(torch.nn.Module):
    def forward(self, image: torch.Tensor, scale: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
        return image.mean((2, 3)) * scale * gain


def test_inputs_are_forwards_required_positional_parameters(tmp_path: Path) -> None:
    """A module's inputs come from its forward's signature (a TorchScript file's from its schema); parameters with
    defaults are not inputs."""
    from trtpipe.models.loader import forward_inputs

    assert forward_inputs(_TwoInputs()) == ["image", "scale"]
    assert forward_inputs(torch.nn.Sequential(torch.nn.ReLU())) == ["input"]
    path = tmp_path / "two.ts"
    torch.jit.save(torch.jit.script(_TwoInputs()), str(path))
    loaded = load_model(str(path), input_shape="image:2x3x4x4,scale:2x3")
    assert [(s.name, s.shape) for s in loaded.inputs] == [("image", (2, 3, 4, 4)), ("scale", (2, 3))]
    loaded.check_runs(batch=2)
    with pytest.raises(BadInput, match=r"takes 2 inputs \(image, scale\) and nothing says the shape of 'scale'"):
        load_model(str(path), input_shape="2x3x4x4")


class _RunsACommand:
    """Unpickling this calls os.system: what a hostile checkpoint does."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return os.system, (self.command,)


@pytest.mark.parametrize("writer", ["torch.save", "legacy torch.save", "pickle protocol 2", "pickle protocol 5"])
def test_a_checkpoint_that_runs_a_command_is_refused_and_points_at_trust(tmp_path: Path, writer: str,
                                                                         run_cli) -> None:  # type: ignore[no-untyped-def]
    """torch words its weights-only refusal differently by version and by pickle protocol ("Unsupported global",
    "Trying to load unsupported GLOBAL ... is blocked", "Unsupported operand 149"): each is the same refusal."""
    import os

    marker = tmp_path / "ran"
    payload = {"state_dict": _RunsACommand(f"touch {marker}")}
    path = tmp_path / "hostile.pt"
    if writer == "torch.save":
        torch.save(payload, path)
    elif writer == "legacy torch.save":
        torch.save(payload, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=int(writer.rsplit(" ", 1)[1])))
    result = run_cli("convert", path, "--arch", "digits_resnet", "-o", tmp_path / "x.onnx")
    assert result.exit_code == 1 and "Traceback" not in result.output
    line = error_line(result.output)
    assert "needs full unpickling" in line and "--trust-checkpoint" in line
    assert f"{os.system.__module__}.system" in line  # names what it would have called
    assert not marker.exists() and not (tmp_path / "x.onnx").exists()
