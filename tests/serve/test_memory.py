"""Out of memory is that request's 503, not the server's end: a real `trtpipe serve` under an address-space
limit (``ulimit -v``) refuses a batch too large for it with a JSON error, stays ready, and serves the next
requests; two requests that fit alone but not joined in one batch are both served."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.builders import wide
from trtpipe.tools.loopback import free_port, wait_until_ready

ROW = 1 << 24  # float32 values a row expands to: 64 MiB a row
LIMIT = 2 << 30  # address space: a server takes about 0.5 GiB of it; 16 rows need 1 GiB more, 32 rows 2 GiB


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS bounds the address space on Linux")
def test_a_batch_too_large_for_memory_is_a_503_and_the_server_serves_on(tmp_path: Path) -> None:
    wide(tmp_path, ROW)
    port = free_port()
    # glibc reserves 64 MiB of address space per thread arena: two keep the server's footprint that of any machine
    env = os.environ | {"MALLOC_ARENA_MAX": "2"}
    # A batch runs at once at 1, 2, 4 or 32 rows, or at 64 (the maximum); others wait for company: two requests
    # of 16 rows sent together run as one batch of 32.
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(tmp_path), "--port", str(port),
                                "--threads", "1", "--max-batch-size", "64", "--preferred-batch-sizes", "1,2,4,32",
                                "--max-queue-delay-ms", "30000", "--drain-s", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               preexec_fn=_limit_memory)
    base = f"http://127.0.0.1:{port}"

    def infer(rows: int) -> httpx.Response:
        data = np.arange(rows, dtype=np.float32).reshape(rows, 1)
        tensor = {"name": "input", "shape": [rows, 1], "datatype": "FP32", "data": data.ravel().tolist()}
        return httpx.post(f"{base}/v2/models/wide/infer", json={"inputs": [tensor]}, timeout=60)

    try:
        wait_until_ready(base, "/v2/health/ready")
        assert infer(1).status_code == 200
        refused = infer(64)
        assert refused.status_code == 503, refused.text
        message = refused.json()["error"]
        assert message.startswith("The server ran out of memory for this request: retry later or send fewer rows")
        assert "onnxruntime_src" not in message and "bfc_arena" not in message
        for rows in (1, 2, 4):  # the next requests are served
            answer = infer(rows)
            assert answer.status_code == 200 and answer.json()["outputs"][0]["data"] == list(range(rows))
        with ThreadPoolExecutor(2) as pool:  # joined, they do not fit; each alone does
            pair = list(pool.map(infer, [16, 16]))
        assert [a.status_code for a in pair] == [200, 200], [a.text for a in pair]
        assert httpx.get(f"{base}/v2/health/ready", timeout=10).json() == {"ready": True}
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert 'trtpipe_inference_failures_total{code="503",model="wide"} 1.0' in metrics
        # Every batch that ran: 1, 1, 2, 4, then the two requests of 16 one after the other (their batch of 32
        # failed, and is not counted).
        assert 'trtpipe_batch_size_sum{model="wide"} 40.0' in metrics and 'trtpipe_batch_size_count{model="wide"} 6.0' \
            in metrics
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
