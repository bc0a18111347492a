from __future__ import annotations

from pathlib import Path

import pytest

from trtpipe.engine import EngineOptions
from trtpipe.engine.build import planned_profile
from trtpipe.engine.specs import InputInfo, plan_profile
from trtpipe.errors import BadInput
from trtpipe.shapes import parse_shape_specs, parse_size


@pytest.mark.parametrize(("text", "size"), [("4GiB", 4 * 2**30), ("512MiB", 512 * 2**20), ("1.5G", 1_500_000_000),
                                            ("2048", 2048), ("64 MB", 64_000_000), ("1e9", 1_000_000_000)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "4XB", "-1GiB", "0"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_shape_specs() -> None:
    assert parse_shape_specs("input:1x3x224x224,mask:1x1x8x8") == {"input": (1, 3, 224, 224), "mask": (1, 1, 8, 8)}
    assert parse_shape_specs("ns:input:2x3") == {"ns:input": (2, 3)}  # names may hold ':'
    for bad in ("1x3x224x224", "input:", "input:1xfoo", ""):
        with pytest.raises(ValueError):
            parse_shape_specs(bad)


def test_dynamic_batch_gets_default_min_opt_max(digits_onnx: Path) -> None:
    (profile,) = planned_profile(digits_onnx, EngineOptions())
    assert (profile.name, profile.min, profile.opt, profile.max) == ("input", (1, 1, 32, 32), (8, 1, 32, 32),
                                                                     (32, 1, 32, 32))


def test_explicit_shapes_and_overrides(digits_onnx: Path) -> None:
    (fixed,) = planned_profile(digits_onnx, EngineOptions(shapes={"input": (4, 1, 32, 32)}))
    assert fixed.min == fixed.opt == fixed.max == (4, 1, 32, 32)
    (wide,) = planned_profile(digits_onnx, EngineOptions(max_shapes={"input": (256, 1, 32, 32)}))
    assert wide.min[0] == 1 and wide.opt[0] == 8 and wide.max[0] == 256


@pytest.mark.parametrize(("options", "message"), [
    (EngineOptions(shapes={"image": (1, 1, 32, 32)}), "Shape given for image, which the ONNX does not have"),
    (EngineOptions(shapes={"input": (1, 3, 32, 32)}), r"does not fit input 'input' \(\?x1x32x32"),
    (EngineOptions(shapes={"input": (1, 32, 32)}), "does not fit input"),
    (EngineOptions(min_shapes={"input": (16, 1, 32, 32)}), "need min <= opt <= max"),
])
def test_profile_errors_name_the_input(digits_onnx: Path, options: EngineOptions, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        planned_profile(digits_onnx, options)


def test_static_inputs_and_other_dynamic_axes() -> None:
    (static,) = plan_profile([InputInfo("x", (2, 3, 8, 8))])
    assert static.min == static.opt == static.max == (2, 3, 8, 8)
    with pytest.raises(BadInput, match="dynamic dimensions besides the batch"):
        plan_profile([InputInfo("x", (None, 3, None, None))])
    (given,) = plan_profile([InputInfo("x", (None, 3, None, None))], shapes={"x": (1, 3, 64, 64)})
    assert given.opt == (1, 3, 64, 64)


def test_every_dynamic_axis_gets_min_opt_max_from_what_is_given() -> None:
    """A detector with dynamic H/W: --opt-shapes alone sizes every dynamic axis (batch 1/8/32 around it), and a
    min/max pair gives H/W a range with opt at the largest."""
    dynamic = [InputInfo("images", (None, 3, None, None))]
    (opt_only,) = plan_profile(dynamic, opt_shapes={"images": (8, 3, 640, 640)})
    assert (opt_only.min, opt_only.opt, opt_only.max) == ((1, 3, 640, 640), (8, 3, 640, 640), (32, 3, 640, 640))
    (ranged,) = plan_profile(dynamic, min_shapes={"images": (1, 3, 320, 320)},
                             max_shapes={"images": (16, 3, 1280, 960)})
    assert (ranged.min, ranged.opt, ranged.max) == ((1, 3, 320, 320), (8, 3, 1280, 960), (16, 3, 1280, 960))
