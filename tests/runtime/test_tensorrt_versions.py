"""The TensorRT version table, checked with made-up version strings (no TensorRT needed)."""

from __future__ import annotations

import pytest

from trtpipe.artifact.records.engine import HardwareCompat
from trtpipe.errors import TrtpipeError
from trtpipe.runtime.tensorrt.versions import (
    FIRST_VERSION,
    TrtFeature,
    build_features,
    missing_features,
    parse_version,
    require,
)


def test_versions_parse_as_tensorrt_prints_them() -> None:
    assert parse_version("10.13.0.35") == (10, 13, 0, 35)
    assert parse_version("11.4.0.post1") == (11, 4, 0)
    assert parse_version("10.9") == (10, 9)
    assert parse_version("") == ()


def test_same_cc_needs_10_9() -> None:
    features = build_features(hardware_compat=HardwareCompat.SAME_CC, version_compat=False, opt_level=None,
                              workspace=None)
    assert TrtFeature.SAME_COMPUTE_CAPABILITY in features
    assert TrtFeature.SAME_COMPUTE_CAPABILITY in missing_features(features, "10.8.0.43")
    assert TrtFeature.SAME_COMPUTE_CAPABILITY not in missing_features(features, "10.9.0.34")


def test_a_build_needs_10_12_for_complete_strong_typing() -> None:
    features = build_features(hardware_compat=HardwareCompat.NONE, version_compat=False, opt_level=None,
                              workspace=None)
    assert missing_features(features, "10.11.0.33") == [TrtFeature.STRONGLY_TYPED_BUILD]
    assert missing_features(features, "10.12.0.36") == []
    assert missing_features(features, "11.4.0.106") == []


def test_the_error_is_one_line_naming_the_version_needed() -> None:
    features = build_features(hardware_compat=HardwareCompat.SAME_CC, version_compat=True, opt_level=3,
                              workspace=1 << 30)
    with pytest.raises(TrtpipeError) as raised:
        require(features, "10.8.0.43", "Building a TensorRT engine")
    message = raised.value.message
    assert "\n" not in message
    assert message.startswith("Building a TensorRT engine needs TensorRT 10.12 or newer (strongly typed engine "
                              "builds: 10.12; --hardware-compat same-cc")
    assert "this machine has TensorRT 10.8.0.43" in message and "tensorrt>=10.12" in message
    require(features, "10.12.0.36", "Building a TensorRT engine")  # new enough: nothing raised
    require(features, "unknown", "Building a TensorRT engine")  # unreadable: TensorRT's own call will say more


def test_every_feature_has_a_row_and_every_row_predates_what_it_is_checked_against() -> None:
    assert set(FIRST_VERSION) == set(TrtFeature)
    assert all(len(row.version) == 2 and row.source for row in FIRST_VERSION.values())
    # Only the two rows newer than 10.0 (what trtpipe[gpu] allows) can refuse a 10.x TensorRT.
    assert {f for f, row in FIRST_VERSION.items() if row.version > (10, 0)} == {
        TrtFeature.STRONGLY_TYPED_BUILD, TrtFeature.SAME_COMPUTE_CAPABILITY}
