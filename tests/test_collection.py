"""Every test module collects on a machine like the GPU ones: without tritonclient, OpenVINO or TensorRT.

`make gpu-check` runs ``pytest -m "gpu or tensorrt"`` over all of tests/; one module that fails to import there
makes pytest exit 2 before any GPU test runs. Here the same collection runs in a child process whose imports of
those packages fail (a meta-path finder installed by ``sitecustomize``), as they do on a machine without them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ABSENT = ("tritonclient", "openvino", "tensorrt")

BLOCKER = f"""
import importlib.abc
import sys

ABSENT = {ABSENT!r}


class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Absent())
"""


def _environment(folder: Path) -> dict[str, str]:
    (folder / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_the_blocker_hides_the_packages(tmp_path: Path) -> None:
    """The environment below really lacks them (else the collection test would prove nothing)."""
    probe = "import importlib\nfor name in {!r}:\n    try:\n        importlib.import_module(name)\n" \
            "        print(name, 'imported')\n    except ImportError:\n        print(name, 'absent')\n"
    result = subprocess.run([sys.executable, "-c", probe.format(ABSENT)], env=_environment(tmp_path), cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.stdout.split("\n")[:-1] == [f"{name} absent" for name in ABSENT], result.stderr


def test_every_module_collects_without_tritonclient_openvino_and_tensorrt(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu or tensorrt",
                             "-p", "no:cacheprovider", "tests"], env=_environment(tmp_path), cwd=ROOT,
                            capture_output=True, text=True, timeout=600, check=False)
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if line.startswith("ERROR ")]
    assert result.returncode == 0 and not errors, f"exit {result.returncode}:\n{output[-6000:]}"
    # the GPU tests are among those collected: gpu-check has something to run
    assert "tests/engine/test_gpu.py::test_torch_cuda_baseline_matches_cpu" in output
    assert "tests/runtime/test_onnxruntime_binding.py::" in output
