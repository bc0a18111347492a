from __future__ import annotations

import pytest

from trtpipe.shapes import parse_batch_sizes, parse_shape


@pytest.mark.parametrize(("text", "dims"), [("1x3x224x224", (1, 3, 224, 224)), ("8X1X32X32", (8, 1, 32, 32)),
                                            ("1,3,64,64", (1, 3, 64, 64))])
def test_parse_shape(text: str, dims: tuple[int, ...]) -> None:
    assert parse_shape(text) == dims


@pytest.mark.parametrize("text", ["", "224", "1x3xax224", "1x0x2x2", "1x-3x2x2", "1x3x"])
def test_parse_shape_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match=r"shape|dimension"):
        parse_shape(text)


def test_batch_sizes_sorted_and_unique() -> None:
    assert parse_batch_sizes("32,1,8,8") == (1, 8, 32)
    with pytest.raises(ValueError):
        parse_batch_sizes("1,0")
    with pytest.raises(ValueError):
        parse_batch_sizes("one")
