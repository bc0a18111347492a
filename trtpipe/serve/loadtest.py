"""``trtpipe loadtest``: drive a running server with a bounded number of clients for a bounded time.

Each concurrency level runs ``concurrency`` clients that send single-item infer requests (binary tensors)
back to back until the duration or the request cap is reached, and reports throughput and latency
percentiles. Only loopback addresses are targeted unless ``allow_remote`` is set. Given the server's process id
(Linux), each level also reports what the server spent: CPU seconds of it and every process under it (a Triton
server's backend stubs included), per second and per request.
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
from trtpipe.errors import BadInput
from trtpipe.serve.protocol import DATATYPES, HEADER_LENGTH

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
    errors = 0
    deadline = time.perf_counter() + duration_s

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline and len(latencies) + errors < MAX_REQUESTS_PER_LEVEL:
            start = time.perf_counter()
            async with client.post(url, data=body, headers=headers) as response:
                await response.read()
                ok = response.status == 200
            if ok:
                latencies.append((time.perf_counter() - start) * 1000)
            else:
                errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99]) if latencies else (float("nan"),) * 3
    return {"concurrency": concurrency, "requests": len(latencies), "errors": errors, "seconds": elapsed,
            "throughput": len(latencies) / elapsed, "p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99)}


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


async def _run(base: str, model: str, levels: list[int], duration_s: float, warmup_s: float,
               cpu_seconds: Callable[[], float] | None) -> list[dict[str, Any]]:
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
            result = await _level(client, url, body, headers, concurrency, duration_s)
            cost = ""
            if cpu_seconds:
                spent = cpu_seconds() - cpu_before
                result["server_cpu_cores"] = spent / result["seconds"]
                result["server_cpu_ms_per_request"] = 1000 * spent / max(result["requests"], 1)
                cost = f", server {result['server_cpu_cores']:.2f} cores"
            console.note(f"{model} concurrency {concurrency:>3}: {result['throughput']:8.1f} req/s, p50 "
                         f"{result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms ({result['errors']} errors"
                         f"{cost})")
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
        results = asyncio.run(_run(base, model, levels, duration_s, warmup_s, cpu_seconds))
    except (OSError, aiohttp.ClientError) as error:
        raise BadInput(f"Cannot reach {base}: {error}. Is 'trtpipe serve' running?") from None
    return {"url": base, "model": model, "duration_s": duration_s, "results": results}


def print_loadtest(report: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{report['model']} at {report['url']}", title_justify="left")
    with_cpu = all("server_cpu_cores" in r for r in report["results"])
    headers = ("Concurrency", "Requests", "Errors", "Req/s", "p50 ms", "p90 ms", "p99 ms")
    for header in headers + (("Server cores", "Server CPU ms/req") if with_cpu else ()):
        table.add_column(header, justify="right")
    for r in report["results"]:
        cpu = (f"{r['server_cpu_cores']:.2f}", f"{r['server_cpu_ms_per_request']:.2f}") if with_cpu else ()
        table.add_row(str(r["concurrency"]), str(r["requests"]), str(r["errors"]), f"{r['throughput']:.1f}",
                      f"{r['p50_ms']:.2f}", f"{r['p90_ms']:.2f}", f"{r['p99_ms']:.2f}", *cpu)
    console.out.print(table)
