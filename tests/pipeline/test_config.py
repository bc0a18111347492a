"""Pipeline files: every mistake named with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import error_line
from trtpipe.errors import BadInput
from trtpipe.pipeline.config import load_pipeline

GOOD = """\
[model]
source = "digits_resnet"

[data]
calib = "digits"
eval = "digits"

[[variants]]
name = "int8"
precision = "int8"
target = "cpu"

[bench]
batches = [1, 4]

[select]
latency_budget_ms = 5.0
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def test_a_good_file_and_its_defaults(tmp_path: Path) -> None:
    pipeline = load_pipeline(_write(tmp_path, GOOD))
    assert pipeline.name == "digits_resnet" and pipeline.batches == (1, 4) and pipeline.select_batch == 1
    (variant,) = pipeline.variants
    assert (variant.precision, variant.target, variant.calib, variant.eval) == ("int8", "cpu", "digits", "digits")
    assert pipeline.latency_budget_ms == 5.0 and pipeline.repository == Path("models")


@pytest.mark.parametrize(("change", "message"), [
    (("target = \"cpu\"", "target = \"cpu\"\ncalib_mehtod = \"mse\""), "pipeline.toml:12: unknown key 'calib_mehtod' "
                                                                      "in [variants]"),
    (("batches = [1, 4]", "batches = \"1,4\""), "pipeline.toml:14: 'batches' in [bench] must be a list of integers"),
    (("latency_budget_ms = 5.0", "latency_budget_ms = true"), "pipeline.toml:17: 'latency_budget_ms' in [select] "
                                                               "must be a number"),
    (("[bench]", "[benchmark]"), "pipeline.toml:13: unknown section [benchmark]"),
    (("calib = \"digits\"\n", ""), "variant 'int8' (int8) needs calibration data"),
    (("source = \"digits_resnet\"", "src = \"digits_resnet\""), "unknown key 'src' in [model]"),
    (("precision = \"int8\"", "precision = \"int4\""), "has precision 'int4'"),
    (("batches = [1, 4]", "batches = [0, 4]"), "'batches' must be a list of positive integers"),
])
def test_mistakes_are_named_with_their_line(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    with pytest.raises(BadInput) as caught:
        load_pipeline(_write(tmp_path, GOOD.replace(*change, 1)))
    assert message in caught.value.message


def test_cli_reports_a_bad_file_in_one_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, GOOD + "[output]\nrepo = \"x\"\n")
    result = run_cli("run", path)
    assert result.exit_code == 1
    assert "pipeline.toml:19: unknown key 'repo' in [output]" in error_line(result.output)
    broken = _write(tmp_path, "[model\nsource=")
    assert "is not valid TOML" in error_line(run_cli("run", broken).output)


def test_bundled_pipelines_are_valid() -> None:
    import trtpipe.demo as demo

    for name in demo.DEMO_PIPELINES:
        pipeline = load_pipeline(demo.PIPELINES_DIR / name)
        assert pipeline.variants and pipeline.latency_budget_ms
