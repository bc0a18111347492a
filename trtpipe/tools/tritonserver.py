"""A real Triton Inference Server on the CPU, for `make loadtest` and the tests that compare trtpipe with it.

The ``nvidia-pytriton`` wheel ships a ``tritonserver`` binary with its shared libraries, the Python backend and
a backend stub per Python version (no onnxruntime or TensorRT backend). ``make install`` downloads the wheel into
``.venv/tritonserver/``; this module unpacks the server from it once, lays it out as PyTriton does (the stub for
this interpreter's version inside ``backends/python``) and runs it on loopback ports. Where the binary cannot run
here, :func:`unavailable` says why in one line, for a skip reason.

That stub (Triton 2.51) was compiled against NumPy 1: with NumPy 2 it reads arrays with the wrong layout (an
input [1, 2, 3, 4] arrives as [1, 1, 1, 1]). So ``make install`` also downloads a NumPy 1 wheel, unpacked into
``stub-site/`` and put first on the stub's path; ONNX Runtime and onnx, built against NumPy 2, run on NumPy 1.
Newer Triton releases (NVIDIA's containers) need no such folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from trtpipe.tools.loopback import answers_ok, free_port

# The folder that holds the trtpipe package: the checkout, in the editable install `make install` makes (where it
# downloads the wheels); elsewhere, TRTPIPE_TRITONSERVER_WHEELS says where they are.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
WHEELS = Path(os.environ.get("TRTPIPE_TRITONSERVER_WHEELS", PACKAGE_PARENT / ".venv" / "tritonserver"))
UNPACKED = WHEELS / "unpacked"
SERVER_DIR = UNPACKED / "pytriton" / "tritonserver"
LIBS_DIR = UNPACKED / "nvidia_pytriton.libs"
STUB_SITE = UNPACKED / "stub-site"
STUB = f"python_backend_stubs/{sys.version_info.major}.{sys.version_info.minor}/triton_python_backend_stub"


def unavailable() -> str | None:
    """None when a Triton server can run here; otherwise the reason, in one line."""
    wheels = sorted(WHEELS.glob("nvidia_pytriton-*.whl"))
    if not wheels and not SERVER_DIR.is_dir():
        return f"no nvidia-pytriton wheel in {WHEELS} (make install downloads it)"
    if not SERVER_DIR.is_dir():
        _unpack(wheels[-1])
    stub = SERVER_DIR / STUB
    if not stub.is_file():
        return f"the nvidia-pytriton wheel has no Python backend stub for Python {sys.version_info[:2]}"
    for binary in (SERVER_DIR / "bin" / "tritonserver", stub):
        linked = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=_environment())
        missing = [line.split()[0] for line in linked.stdout.splitlines() if "not found" in line]
        if missing:
            return f"{binary.name} cannot run here: missing {', '.join(missing)}"
    placed = SERVER_DIR / "backends" / "python" / "triton_python_backend_stub"
    if not placed.is_file() or placed.read_bytes() != stub.read_bytes():
        staged = placed.with_name(f".stub-{os.getpid()}")
        shutil.copy2(stub, staged)
        staged.replace(placed)  # a rename: a running server's stub file stays intact
    return None


def _unpack(wheel: Path) -> None:
    """The server, its libraries and the stubs out of the wheel, and the stub's own packages (every other wheel
    in the folder) into stub-site/, all in a temporary folder renamed into place: a half-unpacked server is never
    seen."""
    staging = Path(tempfile.mkdtemp(dir=WHEELS, prefix=".unpacking-"))
    _extract(wheel, staging, ("pytriton/tritonserver/", "nvidia_pytriton.libs/"))
    for other in sorted(set(WHEELS.glob("*.whl")) - {wheel}):
        _extract(other, staging / STUB_SITE.name, ("",))
    try:
        staging.rename(UNPACKED)
    except OSError:  # another process unpacked it first
        shutil.rmtree(staging, ignore_errors=True)


def _extract(wheel: Path, into: Path, prefixes: tuple[str, ...]) -> None:
    """Members of a wheel under ``prefixes``, with the Unix modes a zip keeps in external_attr."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.filename.startswith(prefixes):
                path = Path(archive.extract(member, into))
                mode = member.external_attr >> 16
                if mode:
                    path.chmod(mode & 0o777)


def _environment() -> dict[str, str]:
    """The bundled libraries on the loader path; this virtual environment and trtpipe on the stub's Python path
    (trtpipe's model.py adds PYTHONPATH to sys.path: the stub's embedded Python ignores the variable)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(LIBS_DIR), env.get("LD_LIBRARY_PATH")]))
    python_path = [str(STUB_SITE), str(PACKAGE_PARENT), *site.getsitepackages()]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*python_path, env.get("PYTHONPATH")]))
    return env


class TritonServer:
    """``with TritonServer(repository) as server:`` a running server; ``server.http_url``, ``server.grpc_url``."""

    def __init__(self, repository: Path, log: Path, *, explicit: bool = False, wait_ready: bool = True,
                 timeout_s: float = 120.0) -> None:
        self.repository, self.log, self.explicit = repository, log, explicit
        self.wait_ready, self.timeout_s = wait_ready, timeout_s
        self.http_port, self.grpc_port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        command = [str(SERVER_DIR / "bin" / "tritonserver"), f"--model-repository={self.repository}",
                   f"--backend-directory={SERVER_DIR / 'backends'}", f"--cache-directory={SERVER_DIR / 'caches'}",
                   "--http-address=127.0.0.1", f"--http-port={self.http_port}", "--grpc-address=127.0.0.1",
                   f"--grpc-port={self.grpc_port}", "--allow-metrics=false", "--exit-timeout-secs=5"]
        if self.explicit:
            command.append("--model-control-mode=explicit")
        return command

    def __enter__(self) -> TritonServer:
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=_environment(),
                                            start_new_session=True)
        path = "/v2/health/live" if self.explicit or not self.wait_ready else "/v2/health/ready"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.process.returncode}:\n{self.log_tail()}")
            if answers_ok(self.http_url + path):
                return self
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"tritonserver was not ready in {self.timeout_s:.0f} s:\n{self.log_tail()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
