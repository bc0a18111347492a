from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import error_line


def test_loadtest_reports_each_concurrency_level(server, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "load.json"
    result = run_cli("loadtest", f"http://{server.url}", "--model", "digits", "--concurrency", "1,4",
                     "--duration", "0.5", "--json", out, "--server-pid", os.getpid())  # the server runs in here
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [r["concurrency"] for r in report["results"]] == [1, 4]
    for level in report["results"]:
        assert level["requests"] > 0 and level["errors"] == 0
        assert level["p50_ms"] <= level["p99_ms"] and level["throughput"] > 0
        assert level["server_cpu_cores"] > 0 and level["server_cpu_ms_per_request"] > 0
        assert level["batches"] > 0 and level["instance_runs"] == [level["batches"]]  # one instance ran them all
        assert 1 <= level["mean_batch_rows"] <= 4  # single-row requests, at most 4 clients waiting together


def test_loadtest_reports_1_8_and_32_clients_and_how_instances_shared_them(  # type: ignore[no-untyped-def]
        repository: Path, tmp_path: Path, run_cli) -> None:
    from tests.serve.conftest import RunningServer

    server = RunningServer(repository, instances=2, max_batch_size=16)
    try:
        out = tmp_path / "load.json"
        result = run_cli("loadtest", f"http://{server.url}", "--model", "digits", "--duration", "0.5", "--json", out)
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [r["concurrency"] for r in report["results"]] == [1, 8, 32] and report["instances"] == 2
    for level in report["results"]:
        assert level["requests"] > 0 and level["errors"] == 0 and level["p50_ms"] <= level["p99_ms"]
        assert len(level["instance_runs"]) == 2 and all(runs > 0 for runs in level["instance_runs"])
        assert sum(level["instance_runs"]) == level["batches"]


def test_loadtest_refuses_other_hosts_and_says_when_nothing_listens(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("loadtest", "http://203.0.113.7:8000", "--model", "digits", "--duration", "0.5")
    assert result.exit_code == 1 and "not a loopback address" in error_line(result.output)
    result = run_cli("loadtest", "http://127.0.0.1:9", "--model", "digits", "--duration", "0.5")
    assert result.exit_code == 1 and "Cannot reach" in error_line(result.output)


def test_loadtest_names_a_server_pid_that_does_not_exist(server, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("loadtest", f"http://{server.url}", "--model", "digits", "--duration", "0.5",
                     "--server-pid", 2**22 + 1)
    assert result.exit_code == 1 and "No process 4194305" in error_line(result.output)
