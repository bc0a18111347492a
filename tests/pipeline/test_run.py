"""trtpipe run end to end on the digits model: stages, cache, selection, reports."""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import error_line

PIPELINE = """\
[model]
source = "digits_resnet"

[data]
calib = "digits"
eval = "digits"
calib_samples = 64

[[variants]]
name = "int8_cpu"
precision = "int8"
target = "cpu"
calib_method = "{method}"

[[variants]]
name = "fp16"
precision = "fp16"

[bench]
batches = [1, 4]
iters = 3
warmup = 1

[select]
latency_budget_ms = 1000.0
max_accuracy_drop = 1.0

[output]
repository = "models"
reports = "reports"
"""


def _statuses(run_json: Path) -> dict[str, str]:
    return {s["stage"]: s["status"] for s in json.loads(run_json.read_text())["stages"]}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from trtpipe.cli import main

    folder = tmp_path_factory.mktemp("run")
    (folder / "pipeline.toml").write_text(PIPELINE.format(method="minmax"))
    result = CliRunner().invoke(main, ["run", str(folder / "pipeline.toml"), "--out", str(folder)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder


def test_first_run_runs_every_stage_and_records_them(first_run: Path) -> None:
    statuses = _statuses(first_run / "reports" / "digits_resnet" / "run.json")
    assert statuses == {"convert": "ran", "optimize:int8_cpu": "ran", "optimize:fp16": "ran", "build": "skipped",
                        "bench": "ran", "report": "ran"}
    run = json.loads((first_run / "reports" / "digits_resnet" / "run.json").read_text())
    assert run["choice"]["variant"]
    assert re.match(r"(fastest|tied|within 5 % of the fastest) at batch 1", run["choice"]["reason"])
    assert run["batch_advice"]["batch"] in (1, 4)
    assert all(len(s["key"]) == 64 for s in run["stages"] if s["status"] != "skipped")
    assert json.loads((first_run / "models" / "digits_resnet" / "chosen.json").read_text())["choice"]
    for name in ("digits_resnet", "digits_resnet_int8_cpu", "digits_resnet_fp16"):
        assert (first_run / "models" / name / "1" / "model.onnx").is_file()


def test_rerun_reuses_everything_and_a_change_reruns_only_what_depends_on_it(first_run: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    run_json = first_run / "reports" / "digits_resnet" / "run.json"
    result = run_cli("run", first_run / "pipeline.toml", "--out", first_run)
    assert result.exit_code == 0 and "0 stage(s) ran" in result.output
    assert set(_statuses(run_json).values()) == {"cached", "skipped"}
    (first_run / "pipeline.toml").write_text(PIPELINE.format(method="percentile"))
    assert run_cli("run", first_run / "pipeline.toml", "--out", first_run).exit_code == 0
    statuses = _statuses(run_json)
    assert statuses["convert"] == statuses["optimize:fp16"] == "cached"
    assert statuses["optimize:int8_cpu"] == statuses["bench"] == statuses["report"] == "ran"
    (first_run / "models" / "digits_resnet_fp16" / "1" / "model.onnx").write_bytes(b"damaged")
    assert run_cli("run", first_run / "pipeline.toml", "--out", first_run).exit_code == 0
    assert _statuses(run_json)["optimize:fp16"] == "ran"  # an artifact that changed on disk is rebuilt


def test_rebench_measures_again_and_reuses_everything_else(first_run: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    run_json = first_run / "reports" / "digits_resnet" / "run.json"
    assert run_cli("run", first_run / "pipeline.toml", "--out", first_run).exit_code == 0
    result = run_cli("run", first_run / "pipeline.toml", "--out", first_run, "--rebench")
    assert result.exit_code == 0 and "bench: running again (--rebench)" in result.output
    statuses = _statuses(run_json)
    assert statuses["bench"] == "ran" and statuses["convert"] == statuses["optimize:fp16"] == "cached"


def test_html_report_is_self_contained_with_every_chart(first_run: Path) -> None:
    html = (first_run / "reports" / "digits_resnet" / "report.html").read_text()
    for chart in ("latency", "speedup", "pareto", "batch_sweep"):
        assert f'id=chart-{chart}><svg' in html
    assert "<script" not in html and "<link" not in html
    assert not re.search(r"""(src|href)=["']?https?://""", html)  # nothing fetched from a network
    # Chosen in green from steady rows, in amber from rows flagged unstable (a busy machine's)
    assert re.search(r"Chosen( under load| from an unstable measurement)?: ", html) and "Environment" in html
    # Every figure says what it is, in the report itself: the memory column names how it was measured.
    assert "<dt>Host MB</dt><dd>peak resident memory" in html and "fresh process" in html
    assert "<dt>Agreement</dt>" in html and "<dt>Variant</dt>" not in html  # only the columns that need it
    assert "task classify: Agreement is top-1 agreement" in html  # the heading names the task's measure
    markdown = (first_run / "reports" / "digits_resnet" / "report.md").read_text()
    assert "| Variant |" in markdown and "report_pareto.svg" in markdown
    assert "Columns: p50 ms: median latency" in markdown and "Host MB: peak resident memory" in markdown
    # What the run left out on this machine is in the report with its reason (without TensorRT, the build).
    skipped = [s for s in json.loads((first_run / "reports" / "digits_resnet" / "run.json").read_text())["stages"]
               if s["status"] == "skipped"]
    assert bool(skipped) == ("Not in this report, and why" in html)
    for stage in skipped:
        assert html_lib.escape(stage["note"]) in html and f"- {stage['note']}" not in markdown  # titled, not bare
        assert stage["note"] in markdown
    assert (first_run / "reports" / "digits_resnet" / "report_pareto.svg").read_text().startswith("<svg")


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed here")
def test_report_renders_in_a_real_browser_without_network(first_run: Path, tmp_path: Path) -> None:
    screenshot = tmp_path / "report.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400",
                    f"--screenshot={screenshot}", (first_run / "reports" / "digits_resnet" / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert screenshot.stat().st_size > 50_000  # a page with charts, not a blank one


def test_report_command_and_old_layouts(first_run: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.html"
    result = run_cli("report", first_run / "reports" / "digits_resnet" / "bench.json", "-o", out,
                     "--markdown", tmp_path / "r.md")
    assert result.exit_code == 0 and out.read_text().startswith("<!doctype html>")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"results": [], "environment": {}}))
    result = run_cli("report", old, "-o", tmp_path / "x.html")
    assert result.exit_code == 1 and "has results layout None" in error_line(result.output)
    assert not (tmp_path / "x.html").exists()


def test_an_artifact_recorded_unsafe_on_this_cpu_is_left_out_of_bench_and_selection(first_run: Path,  # type: ignore[no-untyped-def]
                                                                                     run_cli) -> None:
    """make demo must choose nothing whose accuracy does not hold on the CPU it runs on: a CPU-target INT8 file
    recorded unsafe on this CPU's class is not benched or chosen, and the report says why."""
    from dataclasses import replace

    from trtpipe.artifact.records.manifest import read_manifest, write_manifest
    from trtpipe.artifact.records.sections import CpuRecord
    from trtpipe.hardware import cpu_class
    from trtpipe.vocab import CpuClass

    here = cpu_class()
    other = CpuClass.AMX if here is not CpuClass.AMX else CpuClass.AVX512_VNNI
    int8 = first_run / "models" / "digits_resnet_int8_cpu" / "1" / "model.onnx"
    original = read_manifest(int8)
    assert original is not None
    write_manifest(int8, replace(original, cpu=CpuRecord(other, {other: {"agreement": 0.99}}, (here,))))
    try:
        result = run_cli("run", first_run / "pipeline.toml", "--out", first_run)
        assert result.exit_code == 0, result.output
        assert f"digits_resnet_int8_cpu left out of bench and selection: {int8} was made for CPU class {other}" \
            in " ".join(result.output.split())
        run = json.loads((first_run / "reports" / "digits_resnet" / "run.json").read_text())
        assert _statuses(first_run / "reports" / "digits_resnet" / "run.json")["bench:digits_resnet_int8_cpu"] == \
            "skipped"
        assert "int8_cpu" not in run["choice"]["variant"]
        rows = json.loads((first_run / "reports" / "digits_resnet" / "bench.json").read_text())["results"]
        assert not any("int8_cpu" in r["variant"] for r in rows)
    finally:
        write_manifest(int8, original)
