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


def test_loadtest_refuses_other_hosts_and_says_when_nothing_listens(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("loadtest", "http://203.0.113.7:8000", "--model", "digits", "--duration", "0.5")
    assert result.exit_code == 1 and "not a loopback address" in error_line(result.output)
    result = run_cli("loadtest", "http://127.0.0.1:9", "--model", "digits", "--duration", "0.5")
    assert result.exit_code == 1 and "Cannot reach" in error_line(result.output)


def test_loadtest_names_a_server_pid_that_does_not_exist(server, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("loadtest", f"http://{server.url}", "--model", "digits", "--duration", "0.5",
                     "--server-pid", 2**22 + 1)
    assert result.exit_code == 1 and "No process 4194305" in error_line(result.output)
