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
        # Rounds: the throughput's and the p99's intervals over them, and one flag as bench gives a row.
        assert level["rounds"] == 5 and level["throughput_interval"]["units"] == 5
        low, high = level["tail_interval"]["low"], level["tail_interval"]["high"]
        assert low <= level["tail_ms"] <= high and "other_load" in level and "unstable" in level
    assert "Req/s (95% CI)" in result.output and "Tail ms (95% CI)" in result.output


def test_round_figures_and_their_flag() -> None:
    """Five rounds of equal work are steady; one round at a tenth of the rate is flagged, and so is a busy machine."""
    from trtpipe.tools.load_rounds import round_figures, verdict

    steady = [(0.01 * i, 2.0 + 0.001 * (i % 7)) for i in range(500)]  # 100 requests a second for 5 s
    figures = round_figures(steady, 5.0)
    assert figures["round_throughput"] == 100.0 and verdict(figures, 0.02) is None
    assert verdict(figures, 0.8) is not None and "other processes used 80 %" in str(verdict(figures, 0.8))
    stalled = [(t, ms) for t, ms in steady if not 2.0 <= t < 4.0 or int(t * 100) % 10 == 0]
    flagged = verdict(round_figures(stalled, 5.0), None)
    assert flagged is not None and "rounds' throughput disagree" in flagged
    assert round_figures(steady[:2], 5.0) == {}  # too few rounds with a request: no interval


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
