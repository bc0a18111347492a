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
    assert pipeline.name == "digits_resnet" and pipeline.bench.batches == (1, 4) and pipeline.select.batch is None
    (variant,) = pipeline.variants
    options = variant.options
    assert (options.precision, options.target, options.calib, options.eval) == ("int8", "cpu", "digits", "digits")
    assert pipeline.select.latency_budget_ms == 5.0 and pipeline.output.repository == Path("models")
    assert pipeline.bench.duration == 5.0 and pipeline.convert.opset == 18  # the stages' own defaults


@pytest.mark.parametrize(("change", "message"), [
    (("target = \"cpu\"", "target = \"cpu\"\ncalib_mehtod = \"mse\""), "pipeline.toml:12: unknown key 'calib_mehtod' "
                                                                      "in [variants]: did you mean 'calib_method'?"),
    (("[bench]\n", "[bench]\nduraton = 2\n"), "unknown key 'duraton' in [bench]: did you mean 'duration'?"),
    (("batches = [1, 4]", "batches = true"), "pipeline.toml:14: 'batches' in [bench] must be"),
    (("latency_budget_ms = 5.0", "latency_budget_ms = true"), "pipeline.toml:17: 'latency_budget_ms' in [select] "
                                                               "must be a number"),
    (("[bench]", "[benchmark]"), "pipeline.toml:13: unknown section [benchmark]"),
    (("calib = \"digits\"\n", ""), "variant 'int8': INT8 calibration needs --calib DATA"),
    (("source = \"digits_resnet\"", "src = \"digits_resnet\""), "unknown key 'src' in [model]"),
    (("precision = \"int8\"", "precision = \"int4\""), "pipeline.toml:10: 'precision' in [variants] must be one of "
                                                          "fp32, fp16, bf16, int8, not 'int4'"),
    (("batches = [1, 4]", "batches = [0, 4]"), "'batches' in [bench] '0,4' is not a list of positive batch sizes"),
    (("[bench]", "[build]\nworkspace = \"lots\"\n\n[bench]"), "pipeline.toml:14: 'workspace' in [build] 'lots' is "
                                                                "not a size"),
    (("[bench]", "[build]\nworkspace = \"1e99GiB\"\n\n[bench]"), "larger than any GPU memory"),
    (("[bench]", "[serve]\nmax_batch_size = 0\n\n[bench]"), "'max_batch_size' in [serve] must be at least 1"),
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
    import trtpipe.pipeline.demo as demo

    assert {*demo.DEMO_PIPELINES} <= {p.name for p in demo.PIPELINES_DIR.glob("*.toml")}
    for path in sorted(demo.PIPELINES_DIR.glob("*.toml")):
        pipeline = load_pipeline(path)
        assert pipeline.variants and (pipeline.select.latency_budget_ms or pipeline.select.max_accuracy_drop), path


def test_a_pipeline_file_that_is_not_utf8_is_one_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "latin1.toml"
    path.write_bytes("[model]\nsource = \"digits_resnet\"\nname = \"caf\xe9\"\n".encode("latin-1"))
    result = run_cli("run", path)
    assert result.exit_code == 1 and "is not UTF-8 text" in error_line(result.output)
    assert "Traceback" not in result.output


def test_files_a_pipeline_names_beside_itself_are_found_from_any_folder(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """[model] source and [data] paths relative to the pipeline file resolve against its folder;
    names that are not files beside it (registry names, digits, packaged:...) stay as written."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "net.py").write_text("def make(): ...\n")
    (folder / "calib.npz").write_bytes(b"")
    (folder / "p.toml").write_text('[model]\nsource = "net.py:make"\n[data]\ncalib = "calib.npz"\neval = "digits"\n'
                                   '[[variants]]\nname = "int8"\nprecision = "int8"\n')
    monkeypatch.chdir(tmp_path)
    pipeline = load_pipeline(folder / "p.toml")
    assert pipeline.model.source == f"{folder / 'net.py'}:make"
    (variant,) = pipeline.variants
    assert variant.options.calib == str(folder / "calib.npz") and variant.options.eval == "digits"
    registry = folder / "r.toml"
    registry.write_text('[model]\nsource = "resnet18"\n')
    assert load_pipeline(registry).model.source == "resnet18"


def test_what_a_run_writes_goes_under_the_current_folder_or_out_never_beside_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundled example lives inside the package: its models/ and reports/ must land where the user runs it (or
    under --out), so the guides' next commands (``trtpipe serve models``) work from there."""
    from trtpipe.pipeline.demo import PIPELINES_DIR

    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    for path in (PIPELINES_DIR / "digits.toml", _write(tmp_path, GOOD + '[output]\ntriton = "triton"\n')):
        pipeline = load_pipeline(path)
        output = pipeline.output
        assert (output.repository.resolve(), output.reports.resolve()) == (here / "models", here / "reports"), path
        elsewhere = load_pipeline(path, out=tmp_path / "out").output
        assert (elsewhere.repository, elsewhere.reports) == (tmp_path / "out" / "models", tmp_path / "out" / "reports")
    assert output.triton is not None and output.triton.resolve() == here / "triton"
