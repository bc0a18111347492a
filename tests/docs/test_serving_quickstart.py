"""The serving guide's quick start works as written: its shell lines run in a fresh folder, `trtpipe serve` runs as
a real process (on a free port instead of 8000), and `curl`'s answer is the one the guide prints, figure for
figure up to the last digits a CPU may change."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.docs.pages import DOCS
from trtpipe.tools.loopback import free_port, wait_until_ready

GUIDE = DOCS / "guides" / "serving.md"


def _quick_start() -> tuple[list[str], dict]:  # type: ignore[type-arg]
    """The quick start's shell lines and the answer it prints."""
    section = GUIDE.read_text().split("## Quick start: one request", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```bash\n(.*?)```", section, re.S)
    answer = re.search(r"```json\n(.*?)```", section, re.S)
    assert shell and answer, "the quick start needs its commands (```bash) and its answer (```json)"
    return [line.split("  #")[0].strip() for line in shell.group(1).splitlines() if line.strip()], \
        json.loads(answer.group(1))


def test_the_quick_start_answers_what_the_guide_says(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    lines, documented = _quick_start()
    bin_dir = Path(sys.executable).parent  # this environment's trtpipe and python, as a reader's activated venv
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    port = free_port()
    server = None
    try:
        for line in lines:
            if line.startswith("trtpipe serve"):
                words = line.rstrip("&").split()[1:]
                server = subprocess.Popen([str(bin_dir / "trtpipe"), *words, "--port", str(port)], cwd=tmp_path,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_until_ready(f"http://127.0.0.1:{port}", "/v2/health/ready")
                continue
            line = line.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            result = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=300)
            assert result.returncode == 0, f"`{line}` exited {result.returncode}: {result.stderr[-2000:]}"
        assert server is not None, "the quick start starts no server"
        answer = json.loads(result.stdout)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    (got,), (want,) = answer.pop("outputs"), documented.pop("outputs")
    assert answer == documented
    assert {k: got[k] for k in ("name", "datatype", "shape")} == {k: want[k] for k in ("name", "datatype", "shape")}
    np.testing.assert_allclose(got["data"], want["data"], rtol=1e-3, atol=1e-3)
