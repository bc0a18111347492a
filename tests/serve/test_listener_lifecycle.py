"""The gRPC listener's life as readiness and the temp folder see it, with real `trtpipe serve` processes and real
signals: readiness is false (saying why) while the listener is frozen or down and true once it is back; the socket
folders of servers killed with SIGKILL are removed by the next start, those of live servers kept; under an
address-space limit just above its size at rest the server stops on SIGTERM with exit 0 and removes its folder."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from trtpipe.serve.grpc.bridge import FOLDER_PREFIX
from trtpipe.tools.loopback import child_pids, free_port, status_mib, wait_until_ready

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals, RLIMIT_AS and /proc")
pytest.importorskip("tritonclient.grpc")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, digits_onnx: Path) -> Path:
    folder = tmp_path_factory.mktemp("listener")
    (folder / "digits" / "1").mkdir(parents=True)
    shutil.copy(digits_onnx, folder / "digits" / "1" / "model.onnx")
    return folder


def _serve(repository: Path, temp: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                                "--grpc-port", str(free_port()), "--drain-s", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "TMPDIR": str(temp)})
    base = f"http://127.0.0.1:{port}"
    wait_until_ready(base, "/v2/health/ready", 120)
    return process, base


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.terminate()
    return process.communicate(timeout=60)[0]


def _ready_becomes(base: str, ready: bool, seconds: float = 30) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        answer = httpx.get(f"{base}/v2/health/ready", timeout=10)
        if (answer.status_code == 200) == ready or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def test_readiness_is_false_while_the_grpc_listener_is_frozen_or_down(repository: Path, tmp_path: Path) -> None:
    process, base = _serve(repository, tmp_path)
    try:
        (listener,) = child_pids(process.pid)
        os.kill(listener, signal.SIGSTOP)
        try:
            frozen = _ready_becomes(base, ready=False)
            assert frozen.status_code == 503, frozen.text
            assert frozen.json()["reason"].startswith("The gRPC listener has not answered for "), frozen.text
            assert httpx.get(f"{base}/v2/health/live", timeout=10).status_code == 200  # alive, not ready
        finally:
            os.kill(listener, signal.SIGCONT)
        assert _ready_becomes(base, ready=True).json() == {"ready": True}
        os.kill(listener, signal.SIGKILL)
        # Down until restarted: a 503 naming the listener, unless the restart beat every probe (it can take well
        # under the probes' 0.2 s); either way a new listener, and ready again.
        deadline = time.monotonic() + 30
        while True:
            answer = httpx.get(f"{base}/v2/health/ready", timeout=10)
            if answer.status_code == 503:
                assert "gRPC listener" in answer.json()["reason"], answer.text
            restarted = child_pids(process.pid) not in ([], [listener])
            if (restarted and answer.status_code == 200) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert restarted, child_pids(process.pid)
        assert _ready_becomes(base, ready=True).json() == {"ready": True}
    finally:
        output = _stop(process)
    assert process.returncode == 0, output


def test_the_folders_of_killed_servers_are_removed_by_the_next_start(repository: Path, tmp_path: Path) -> None:
    killed, _ = _serve(repository, tmp_path)
    alive, _ = _serve(repository, tmp_path)
    try:
        killed.kill()
        killed.communicate(timeout=60)
        left = sorted(tmp_path.glob(f"{FOLDER_PREFIX}{killed.pid}-*"))
        assert left and (left[0] / "calls.sock").exists()  # SIGKILL leaves it: nothing ran to remove it
        (tmp_path / f"{FOLDER_PREFIX}k2j4_x").mkdir()  # an older server's name, without a pid, and no socket
        later, _ = _serve(repository, tmp_path)
        _stop(later)
        assert not any(folder.exists() for folder in left)
        assert not (tmp_path / f"{FOLDER_PREFIX}k2j4_x").exists()
        assert list(tmp_path.glob(f"{FOLDER_PREFIX}{alive.pid}-*"))  # a running server's is left alone
    finally:
        _stop(alive)
    assert not list(tmp_path.glob(f"{FOLDER_PREFIX}*"))  # each server stopped cleanly removed its own


@pytest.mark.parametrize("headroom_mib", [4, 8])
def test_sigterm_under_a_tight_memory_limit_exits_zero(repository: Path, tmp_path: Path, headroom_mib: int) -> None:
    """The address space is limited to its size at rest plus less than a thread's stack (8 MiB): stopping must
    start no thread (asyncio's and concurrent.futures' executors start theirs on demand)."""
    process, base = _serve(repository, tmp_path)
    answered = httpx.post(f"{base}/v2/models/digits/infer", timeout=30, json={"inputs": [
        {"name": "input", "shape": [1, 1, 32, 32], "datatype": "FP32", "data": [0.0] * 1024}]})
    assert answered.status_code == 200
    limit = int((status_mib(process.pid, "VmSize") + headroom_mib) * 2**20)
    resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
    output = _stop(process)
    assert process.returncode == 0, output
    assert "Traceback" not in output and "can't start new thread" not in output, output
    assert not list(tmp_path.glob(f"{FOLDER_PREFIX}*")), output


def test_a_start_that_cannot_fit_is_one_error_line(repository: Path, tmp_path: Path) -> None:
    """Limited to less address space than loading the model takes, `serve` says so in one line and exits 1."""
    port = free_port()
    probe = subprocess.run([sys.executable, "-c", "import onnxruntime, numpy, resource, os; "
                            "print(int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024)"],
                           capture_output=True, text=True, check=True)
    limit = int(probe.stdout) + (64 << 20)  # the runtime imports; the model's session and the threads do not fit

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    run = subprocess.run([sys.executable, "-m", "trtpipe.cli", "serve", str(repository), "--port", str(port),
                          "--grpc-port", str(free_port()), "--drain-s", "0"], capture_output=True, text=True,
                         timeout=120, preexec_fn=limited, env={**os.environ, "TMPDIR": str(tmp_path)})
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "does not fit in the memory it may use" in errors[0], output
    assert output.rstrip().splitlines()[-1] == errors[0], output  # its last line: nothing after it
