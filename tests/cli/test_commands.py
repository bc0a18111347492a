"""The command line as a user meets it: help for every command, and a light import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trtpipe.cli import main

COMMANDS = sorted(main.commands)


def test_every_stage_command_exists() -> None:
    assert {"models", "convert", "verify", "bench", "demo"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_of_every_command(run_cli, command: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli(command, "--help")
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_help_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from trtpipe.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "for command in list(main.commands):\n"
        "    try:\n        main([command, '--help'])\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('torch', 'onnxruntime', 'onnx', 'tensorrt', 'numpy') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "HEAVY=\n" in result.stdout, result.stdout


def test_models_lists_the_registry_with_shapes_and_parameters(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("models")
    assert result.exit_code == 0
    for name in ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
                 "convnext_tiny", "regnet_y_400mf", "digits_resnet"):
        assert name in result.output
    assert "1x3x224x224" in result.output
    assert "25.56 M" in result.output  # ResNet-50's parameter count
    assert "pip install 'trtpipe[pretrained]'" in " ".join(result.output.split())  # not eaten as markup
