"""Memory running out while a request's body arrives is that request's JSON 503, never a 400 calling a valid request
malformed (httptools reports a MemoryError in its callback as a parse error), and the requests after it are served.
A real `trtpipe serve` under a real address-space limit (RLIMIT_AS, set on the running process a little above what
it takes once ready), real HTTP clients."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.builders import lookup
from trtpipe.tools.loopback import free_port, wait_until_ready

HEADROOM = 60 << 20  # address space allowed above the server's once it is ready
BIG_VALUES = 40_000_000  # "1.5," each: a 150 MiB body, far more than the headroom


def _address_space(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS bounds the address space on Linux")
def test_memory_running_out_while_a_body_arrives_is_a_json_503_and_the_next_requests_are_served(
        tmp_path: Path) -> None:
    lookup(tmp_path)
    port = free_port()
    env = os.environ | {"MALLOC_ARENA_MAX": "2"}  # as test_memory: a footprint like any machine's
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(tmp_path), "--port", str(port),
                                "--max-body-mb", "400", "--no-batching", "--drain-s", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(base, "/v2/health/ready")
        limit = _address_space(process.pid) + HEADROOM
        resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))

        big = (b'{"inputs":[{"name":"input","shape":[%d,1],"datatype":"FP32","data":[' % BIG_VALUES
               + b",".join([b"1.5"] * BIG_VALUES) + b"]}]}")
        refused = httpx.post(f"{base}/v2/models/lookup/infer", content=big, timeout=120)
        del big
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"] == "application/json"
        assert "ran out of memory" in refused.json()["error"]

        values = np.arange(100_000, dtype=np.float32) % 10  # a 600 KB request, as ordinary ones are
        body = {"inputs": [{"name": "input", "shape": [len(values), 1], "datatype": "FP32", "data": values.tolist()}]}
        for _ in range(3):
            answer = httpx.post(f"{base}/v2/models/lookup/infer", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            assert answer.json()["outputs"][0]["data"] == values.tolist()
        assert httpx.get(f"{base}/v2/health/ready", timeout=10).json() == {"ready": True}
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "Invalid HTTP request" not in output
