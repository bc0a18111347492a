"""``bench --csv FILE``: every measured run as a CSV row, then each result row's summary, for a spreadsheet or
pandas (what perf_analyzer's ``-f`` and trtexec's ``--exportTimes`` users expect).

One header for both kinds of line, told apart by ``record``: a ``run`` line is one timed call (its variant, batch,
round, run within the round and latency in ms; warm-up runs are not timed and are not here); a ``summary`` line is
the row's figures as the table prints them (p50, p99, tail, the speedup with its 95 % interval, the stability
verdict), so ``record == "summary"`` gives the table and ``record == "run"`` the raw samples behind it.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from trtpipe.bench.stability import verdict_word

HEADER = ("record", "variant", "batch", "includes_transfers", "round", "run", "latency_ms", "p50_ms", "p99_ms",
          "tail_ms", "speedup", "speedup_low", "speedup_high", "stability")


def to_csv(report: dict[str, Any]) -> str:
    """The runs the report kept (bench's ``keep_runs``), then one summary line per result row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    for timed in report.get("runs") or []:
        for round_index, samples in enumerate(timed["rounds"], start=1):
            for run_index, latency in enumerate(samples, start=1):
                writer.writerow(("run", timed["variant"], timed["batch"], timed["includes_transfers"], round_index,
                                 run_index, f"{latency:.6f}", "", "", "", "", "", "", ""))
    for row in report["results"]:
        interval = row.get("speedup_interval") or {}
        writer.writerow(("summary", row["variant"], row["batch"], row.get("includes_transfers", True), "", "", "",
                         _number(row.get("p50_ms")), _number(row.get("p99_ms")), _number(row.get("tail_ms")),
                         _number(row.get("speedup_vs_torch_fp32")), _number(interval.get("low")),
                         _number(interval.get("high")), verdict_word(row.get("unstable"))))
    return buffer.getvalue()


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
