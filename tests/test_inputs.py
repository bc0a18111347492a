"""Input declarations ([NAME:]VALUE lists), specs and batches: the grammar the CLI and the pipeline file share."""

from __future__ import annotations

import numpy as np
import pytest

from trtpipe.errors import BadInput
from trtpipe.inputs import InputSpec, Layout, check_declared, random_batch
from trtpipe.models.options import ModelOptions
from trtpipe.shapes import (
    FIRST,
    declared_for,
    format_input_dtypes,
    format_input_ranges,
    format_input_shapes,
    parse_input_dtypes,
    parse_input_ranges,
    parse_input_shapes,
)


def test_an_unnamed_value_belongs_to_the_first_input() -> None:
    assert parse_input_shapes("1x3x224x224") == {FIRST: (1, 3, 224, 224)}
    assert parse_input_shapes("1,3,8,8") == {FIRST: (1, 3, 8, 8)}  # commas join dimensions when nothing is named
    assert parse_input_dtypes(" UINT8 ") == {FIRST: "uint8"}
    assert parse_input_ranges("0..255") == {FIRST: (0.0, 255.0)}
    assert parse_input_ranges("-1.5..2") == {FIRST: (-1.5, 2.0)}


def test_named_values_one_per_input_in_order() -> None:
    shapes = parse_input_shapes("image:1x3x640x640,scale:1x2")
    assert shapes == {"image": (1, 3, 640, 640), "scale": (1, 2)} and list(shapes) == ["image", "scale"]
    assert parse_input_dtypes("image:uint8, scale:float32") == {"image": "uint8", "scale": "float32"}
    assert parse_input_ranges("image:0..255,scale:0.5..2") == {"image": (0.0, 255.0), "scale": (0.5, 2.0)}
    assert parse_input_shapes("1x3x8x8,scale:1x2") == {FIRST: (1, 3, 8, 8), "scale": (1, 2)}


def test_input_names_may_hold_colons() -> None:
    assert parse_input_shapes("input:0:1x3x8x8,im_info:0:1x3") == {"input:0": (1, 3, 8, 8), "im_info:0": (1, 3)}
    assert parse_input_ranges("serving:image:0..1") == {"serving:image": (0.0, 1.0)}


@pytest.mark.parametrize(("parse", "text", "message"), [
    (parse_input_shapes, "1x3xAx4", "is not a shape"),
    (parse_input_shapes, "image:1x0x4", "has a zero dimension"),
    (parse_input_shapes, ":1x3x8x8", "names no input"),
    (parse_input_shapes, "a:1x2,a:1x3", "given twice"),
    (parse_input_shapes, "", "is not a shape"),
    (parse_input_dtypes, "uint9", "'uint9' is not an input dtype: use one of float32"),
    (parse_input_dtypes, "image:double", "not an input dtype"),
    (parse_input_ranges, "0-255", "'0-255' is not a range: write LOW..HIGH"),
    (parse_input_ranges, "255..0", "LOW < HIGH"),
    (parse_input_ranges, "1..1", "LOW < HIGH"),
    (parse_input_ranges, "0..inf", "finite"),
    (parse_input_ranges, "image:a..b", "'a..b' is not a range"),
])
def test_malformed_declarations_say_what_to_write(parse, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_declarations_format_back_to_the_text_that_parses_to_them() -> None:
    for text in ("1x3x224x224", "image:1x3x640x640,scale:1x2", "input:0:1x3x8x8"):
        assert format_input_shapes(parse_input_shapes(text)) == text
    for text in ("uint8", "image:uint8,scale:float32"):
        assert format_input_dtypes(parse_input_dtypes(text)) == text
    for text in ("0..255", "image:0..255,scale:0.5..2", "-1..1e-07"):
        assert format_input_ranges(parse_input_ranges(text)) == text
    odd = {FIRST: (0.1, 1 / 3)}
    assert parse_input_ranges(format_input_ranges(odd)) == odd  # exact, not rounded to six digits


def test_declared_values_are_found_by_name_or_as_the_first() -> None:
    shapes = {FIRST: (1, 3, 8, 8), "scale": (1, 2)}
    assert declared_for(shapes, "image", 0) == (1, 3, 8, 8)
    assert declared_for(shapes, "scale", 1) == (1, 2)
    assert declared_for(shapes, "mask", 2) is None and declared_for(None, "image", 0) is None
    check_declared(shapes, ["image", "scale"], "--input-shape")
    with pytest.raises(BadInput, match=r"--input-shape names 'mask', which the model does not take \(its inputs: "
                                       r"image, scale\)"):
        check_declared({"mask": (1, 1)}, ["image", "scale"], "--input-shape")


def test_model_options_hold_declarations_from_every_edge() -> None:
    """CLI text, a TOML string or list, a Python tuple or mapping: the same {name: value}, formatted back the same."""
    assert ModelOptions(input_shape="1x3x32x32").input_shape == {FIRST: (1, 3, 32, 32)}
    assert ModelOptions(input_shape=(1, 3, 32, 32)).input_shape == {FIRST: (1, 3, 32, 32)}
    named = ModelOptions(input_shape="image:1x3x64x64,scale:1x2", input_dtype="image:uint8",
                         input_range="image:0..255")
    assert named.input_shape == {"image": (1, 3, 64, 64), "scale": (1, 2)}
    assert named.input_dtype == {"image": "uint8"} and named.input_range == {"image": (0.0, 255.0)}
    assert ModelOptions(input_shape=["image:1x3x64x64", "scale:1x2"]).input_shape == named.input_shape
    assert ModelOptions(input_shape={"image": (1, 3, 64, 64), "scale": [1, 2]}).input_shape == named.input_shape
    assert named.input_shape_for("image") == (1, 3, 64, 64) and named.first_input_shape() is None
    assert ModelOptions(input_shape="1x3x8x8").first_input_shape() == (1, 3, 8, 8)
    assert ModelOptions(input_shape="x:1x3x8x8").first_input_shape() == (1, 3, 8, 8)  # the only one declared
    with pytest.raises(BadInput, match=r"'input_dtype' 'uint9' is not an input dtype"):
        ModelOptions(input_dtype="uint9")
    with pytest.raises(BadInput, match=r"'input_range' '0-255' is not a range"):
        ModelOptions(input_range="0-255")


def test_a_spec_draws_inputs_in_its_dtype_and_range_and_round_trips_through_its_dict() -> None:
    pixels = InputSpec("image", (1, 8, 8, 3), "uint8", None, Layout.NHWC)
    scale = InputSpec("scale", (1, 2), "float32", (0.5, 2.0))
    batch = random_batch([pixels, scale], 4, np.random.default_rng(0))
    assert isinstance(batch, dict) and list(batch) == ["image", "scale"]
    assert batch["image"].dtype == np.uint8 and batch["image"].shape == (4, 8, 8, 3) and batch["image"].max() > 200
    assert batch["scale"].dtype == np.float32 and batch["scale"].min() >= 0.5 and batch["scale"].max() <= 2.0
    for spec in (pixels, scale, InputSpec("input", (None, 3, 8, 8))):
        assert InputSpec.from_dict(spec.to_dict()) == spec
