"""Bench's outputs where a user's tools want them: ``--json -`` and ``--markdown -`` on stdout (the table on stderr,
no file named ``-``), and ``--csv FILE`` with every timed run and each row's summary."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import error_line
from trtpipe.cli import main

BENCH = ("--batch", "1", "--threads", "1", "--warmup", "1", "--iters", "6", "--rounds", "3")


def _invoke(*args: object) -> object:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_json_on_stdout_and_every_run_in_the_csv(digits_onnx: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = _invoke("bench", "digits_resnet", digits_onnx, *BENCH, "--json", "-", "--csv", "runs.csv")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    report = json.loads(result.stdout)  # type: ignore[attr-defined]  # stdout is the JSON alone
    assert "latency vs PyTorch FP32 eager" in result.stderr  # type: ignore[attr-defined]  # the table: stderr
    assert not (tmp_path / "-").exists() and "Wrote -" not in result.output  # type: ignore[attr-defined]
    assert "runs" not in report  # every run's latency is the CSV's alone
    with (tmp_path / "runs.csv").open() as handle:
        lines = list(csv.DictReader(handle))
    runs = [line for line in lines if line["record"] == "run"]
    summaries = [line for line in lines if line["record"] == "summary"]
    assert len(summaries) == len(report["results"])
    for row, summary in zip(report["results"], summaries, strict=True):
        own = [line for line in runs if line["variant"] == row["variant"] and int(line["batch"]) == row["batch"]]
        assert len(own) == row["iters"] and {int(line["round"]) for line in own} == {1, 2, 3}
        assert all(float(line["latency_ms"]) > 0 for line in own)
        assert float(summary["p50_ms"]) == pytest.approx(row["p50_ms"], rel=1e-5)
        assert summary["stability"] == ("unstable" if row["unstable"] else "steady")
        if interval := row.get("speedup_interval"):
            assert float(summary["speedup"]) == pytest.approx(row["speedup_vs_torch_fp32"], rel=1e-5)
            assert float(summary["speedup_low"]) == pytest.approx(interval["low"], rel=1e-5)
            assert float(summary["speedup_high"]) == pytest.approx(interval["high"], rel=1e-5)


def test_markdown_on_stdout_and_two_outputs_on_stdout_refused(digits_onnx: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    both = _invoke("bench", "digits_resnet", digits_onnx, *BENCH, "--json", "-", "--markdown", "-")
    assert both.exit_code != 0  # type: ignore[attr-defined]
    assert "Only one output can be '-'" in error_line(both.output)  # type: ignore[attr-defined]
    result = _invoke("bench", "digits_resnet", digits_onnx, *BENCH, "--markdown", "-")
    assert result.exit_code == 0 and result.stdout.startswith("### digits_resnet")  # type: ignore[attr-defined]
    assert "┏" not in result.stdout and not (tmp_path / "-").exists()  # type: ignore[attr-defined]


def test_check_json_on_stdout(digits_onnx: Path) -> None:
    result = _invoke("check", digits_onnx, "--json", "-")
    findings = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert isinstance(findings, dict)
