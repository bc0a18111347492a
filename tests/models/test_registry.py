from __future__ import annotations

import pytest

from trtpipe.errors import BadInput
from trtpipe.models.loader import load_model
from trtpipe.models.registry import get_architecture


def test_unknown_name_suggests_close_registry_names() -> None:
    with pytest.raises(BadInput, match=r"Unknown model 'resnet5'\. Did you mean resnet50"):
        get_architecture("resnet5")


def test_names_are_case_and_dash_insensitive() -> None:
    assert get_architecture("MobileNet-V2").name == "mobilenet_v2"


def test_random_weights_are_the_same_in_every_load() -> None:
    """convert and bench load the model separately; their weights must agree or agreement means nothing."""
    first = load_model("resnet18", input_shape=(1, 3, 32, 32))
    second = load_model("resnet18", input_shape=(1, 3, 32, 32))
    assert first.weights_sha256() == second.weights_sha256()
    assert first.input_shape == (1, 3, 32, 32)


def test_wrong_input_shape_is_reported_with_the_fix() -> None:
    loaded = load_model("digits_resnet", input_shape=(1, 3, 32, 32))
    with pytest.raises(BadInput, match=r"fails on input shape 1x3x32x32.*--input-shape"):
        loaded.check_runs()
