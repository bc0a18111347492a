"""``trtpipe loadtest``: drive a running server with a bounded number of clients for a bounded time.

Each concurrency level runs ``concurrency`` clients that send single-item infer requests (binary tensors) back to back
until the duration or the request cap is reached, and reports throughput and latency percentiles; cut into rounds by
when each request finished, the level's throughput and p99 also get their medians over the rounds with 95 % intervals
and bench's flag (load_rounds.py), the other processes' CPU share included where the server's own can be told from it
(``--server-pid``). Only loopback addresses are targeted unless ``allow_remote`` is set. Given the server's process id
(Linux), each level also reports what the server spent: CPU seconds of it and every process under it (a Triton server's
backend stubs included), per second and per request. Where the server publishes trtpipe's Prometheus series at /metrics
(``trtpipe serve``), each level also reports how it ran the load: the batches it ran and their mean rows, and the runs
each model instance finished (how ``--instances`` spread them).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from trtpipe import console
from trtpipe.bench.other_load import OtherLoad
from trtpipe.bench.stability import verdict_word
from trtpipe.errors import BadInput
from trtpipe.serve.protocol import DATATYPES, HEADER_LENGTH
from trtpipe.tools.load_rounds import figure, round_figures, verdict

MAX_REQUESTS_PER_LEVEL = 200_000


def _check_target(url: str, allow_remote: bool) -> None:
    host = urlparse(url).hostname or ""
    if allow_remote or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise BadInput(f"{url} is not a loopback address: pass --allow-remote to load-test another machine.")


def _binary_request(metadata: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    rng = np.random.default_rng(0)
    inputs, blobs = [], []
    for tensor in metadata["inputs"]:
        shape = [1 if i == 0 and d == -1 else d for i, d in enumerate(tensor["shape"])]
        if metadata.get("max_batch_size") == 0 and tensor["shape"][0] != -1:
            shape = tensor["shape"]
        array = rng.standard_normal(shape).astype(DATATYPES[tensor["datatype"]])
        blobs.append(array.tobytes())
        inputs.append({"name": tensor["name"], "shape": shape, "datatype": tensor["datatype"],
                       "parameters": {"binary_data_size": len(blobs[-1])}})
    header = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    return header + b"".join(blobs), {HEADER_LENGTH: str(len(header)), "content-type": "application/octet-stream"}


async def _level(client: Any, url: str, body: bytes, headers: dict[str, str], concurrency: int,
                 duration_s: float) -> dict[str, Any]:
    latencies: list[float] = []
    finished: list[tuple[float, float]] = []  # (seconds into the level, latency ms): the rounds are cut from these
    errors = 0
    began = time.perf_counter()
    deadline = began + duration_s

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline and len(latencies) + errors < MAX_REQUESTS_PER_LEVEL:
            start = time.perf_counter()
            async with client.post(url, data=body, headers=headers) as response:
                await response.read()
                ok = response.status == 200
            if ok:
                done = time.perf_counter()
                latencies.append((done - start) * 1000)
                finished.append((done - began, latencies[-1]))
            else:
                errors += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99]) if latencies else (float("nan"),) * 3
    return {"concurrency": concurrency, "requests": len(latencies), "errors": errors, "seconds": elapsed,
            "throughput": len(latencies) / elapsed, "p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99),
            **round_figures(finished, elapsed)}


async def _server_counts(client: Any, base: str, model: str) -> dict[str, float] | None:
    """The model's run counters from the server's /metrics: ``batches`` and ``rows`` run, and ``instance N`` for
    each instance's finished runs; None where the server publishes none (another server, or metrics elsewhere)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with client.get(f"{base}/metrics") as response:
        if response.status != 200:
            return None
        text = await response.text()
    counts: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("model") != model:
                    continue
                if sample.name == "trtpipe_batch_size_count":
                    counts["batches"] = counts.get("batches", 0.0) + sample.value
                elif sample.name == "trtpipe_batch_size_sum":
                    counts["rows"] = counts.get("rows", 0.0) + sample.value
                elif sample.name == "trtpipe_instance_runs_total":
                    key = f"instance {sample.labels['instance']}"
                    counts[key] = counts.get(key, 0.0) + sample.value
    except ValueError:  # not Prometheus text
        return None
    return counts or None


def _spread(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any]:
    """What the server ran during one level: batches, mean rows per batch and runs per instance (empty when it
    publishes no counts)."""
    if before is None or after is None:
        return {}
    done = {key: after[key] - before.get(key, 0.0) for key in after}
    result: dict[str, Any] = {}
    if "batches" in done:
        result["batches"] = int(done["batches"])
        result["mean_batch_rows"] = done.get("rows", 0.0) / done["batches"] if done["batches"] else 0.0
    runs = sorted((key for key in done if key.startswith("instance ")), key=lambda key: int(key.split()[1]))
    if runs:
        result["instance_runs"] = [int(done[key]) for key in runs]
    return result


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every process under it, read from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    if pid not in times:
        raise BadInput(f"No process {pid} on this machine: give --server-pid the server's process id.")
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo += children.get(current, [])
    return total


def _interval_words(interval: dict[str, Any] | None, unit: str) -> str:
    return f" (95 % {interval['low']:.1f}-{interval['high']:.1f} {unit} over {interval['units']} rounds)" \
        if interval else ""


def _tail_words(result: dict[str, Any]) -> str:
    interval = result.get("tail_interval")
    return (f" (median of {interval['units']} rounds' p99s {result['tail_ms']:.2f} ms, 95 % "
            f"{interval['low']:.2f}-{interval['high']:.2f})" if interval else "")


async def _run(base: str, model: str, levels: list[int], duration_s: float, warmup_s: float,
               cpu_seconds: Callable[[], float] | None, server_in_here: bool = False) -> list[dict[str, Any]]:
    # aiohttp, not httpx: on a small machine the load generator shares the CPU with the server, and aiohttp's
    # client costs several times less per request, so the figures describe the server.
    import aiohttp

    connector = aiohttp.TCPConnector(limit=max(levels) + 4)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as client:
        async with client.get(f"{base}/v2/models/{model}") as response:
            if response.status != 200:
                raise BadInput(f"{base} has no ready model '{model}': {await response.text()}")
            metadata = await response.json()
        body, headers = _binary_request(metadata)
        url = f"{base}/v2/models/{model}/infer"
        await _level(client, url, body, headers, max(levels), warmup_s)  # connections and caches warm
        results = []
        for concurrency in levels:
            cpu_before = cpu_seconds() if cpu_seconds else 0.0
            counts = await _server_counts(client, base, model)
            other_load = OtherLoad()
            other_load.start()
            result = await _level(client, url, body, headers, concurrency, duration_s)
            share = other_load.stop()
            result.update(_spread(counts, await _server_counts(client, base, model)))
            cost = ""
            if cpu_seconds:
                spent = cpu_seconds() - cpu_before
                result["server_cpu_cores"] = spent / result["seconds"]
                result["server_cpu_ms_per_request"] = 1000 * spent / max(result["requests"], 1)
                cost = f", server {result['server_cpu_cores']:.2f} cores"
                if share is not None and not server_in_here:  # the server's CPU is the load, not other work
                    share = max(share - result["server_cpu_cores"] / (os.cpu_count() or 1), 0.0)
            if "instance_runs" in result:
                cost += f", runs per instance {'/'.join(map(str, result['instance_runs']))}"
            # Other processes' share, only where the server's own CPU could be told from it (--server-pid).
            result["other_load"] = share if cpu_seconds else None
            result["unstable"] = verdict(result, result["other_load"])
            flag = "; unstable" if result["unstable"] else ""
            console.note(f"{model} concurrency {concurrency:>3}: {figure(result['throughput'], None)} req/s"
                         f"{_interval_words(result.get('throughput_interval'), 'req/s')}, p50 {result['p50_ms']:.2f} "
                         f"ms, p99 {result['p99_ms']:.2f} ms{_tail_words(result)} ({result['errors']} errors"
                         f"{cost}){flag}")
            results.append(result)
        return results


def run_loadtest(url: str, model: str, levels: list[int], *, duration_s: float = 10.0, warmup_s: float = 2.0,
                 allow_remote: bool = False, server_pid: int | None = None) -> dict[str, Any]:
    import aiohttp

    base = url.rstrip("/")
    _check_target(base, allow_remote)
    cpu_seconds = None
    if server_pid is not None:
        process_tree_cpu_seconds(server_pid)  # a wrong pid fails here, before any load

        def cpu_seconds() -> float:
            return process_tree_cpu_seconds(server_pid)
    try:
        results = asyncio.run(_run(base, model, levels, duration_s, warmup_s, cpu_seconds,
                                   server_in_here=server_pid == os.getpid()))
    except (OSError, aiohttp.ClientError) as error:
        raise BadInput(f"Cannot reach {base}: {error}. Is 'trtpipe serve' running?") from None
    report: dict[str, Any] = {"url": base, "model": model, "duration_s": duration_s, "results": results}
    if results and "instance_runs" in results[0]:
        report["instances"] = len(results[0]["instance_runs"])
    return report


def print_loadtest(report: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{report['model']} at {report['url']}", title_justify="left")
    with_cpu = all("server_cpu_cores" in r for r in report["results"])
    with_batches = all("batches" in r for r in report["results"])
    with_instances = all("instance_runs" in r for r in report["results"])
    with_rounds = any(r.get("throughput_interval") for r in report["results"])
    headers = ("Concurrency", "Requests", "Errors", "Req/s (95% CI)" if with_rounds else "Req/s", "p50 ms", "p90 ms",
               "p99 ms") + (("Tail ms (95% CI)", "Stability") if with_rounds else ())
    for header in headers + (("Server cores", "Server CPU ms/req") if with_cpu else ()) + (
            ("Rows/batch",) if with_batches else ()) + (("Runs per instance",) if with_instances else ()):
        table.add_column(header, justify="right")
    for r in report["results"]:
        cpu = (f"{r['server_cpu_cores']:.2f}", f"{r['server_cpu_ms_per_request']:.2f}") if with_cpu else ()
        batches = (f"{r['mean_batch_rows']:.1f}",) if with_batches else ()
        instances = ("/".join(map(str, r["instance_runs"])),) if with_instances else ()
        rounds = (figure(r["tail_ms"], r.get("tail_interval"), ".2f") if r.get("tail_ms") is not None else "–",
                  verdict_word(r.get("unstable"))) if with_rounds else ()
        table.add_row(str(r["concurrency"]), str(r["requests"]), str(r["errors"]),
                      figure(r["throughput"], r.get("throughput_interval") if with_rounds else None),
                      f"{r['p50_ms']:.2f}", f"{r['p90_ms']:.2f}", f"{r['p99_ms']:.2f}", *rounds, *cpu, *batches,
                      *instances)
    console.out.print(table)
    for r in report["results"]:
        if r.get("unstable"):
            console.out.print(f"unstable: concurrency {r['concurrency']}: {r['unstable']}", soft_wrap=True,
                              markup=False)
    if with_rounds and not any(r.get("other_load") is not None for r in report["results"]):
        console.out.print("Other processes' load was not judged: give --server-pid so the server's own CPU can be "
                          "told from other work.", soft_wrap=True, markup=False)
