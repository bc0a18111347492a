"""The TensorRT API trtpipe calls, checked against what TensorRT publishes, on machines without a GPU.

The runtime half is checked against the lean runtime bindings (they import without a GPU); the builder half
against the type stubs of TensorRT 10's Python API. A renamed or removed member fails here, not on a user's GPU.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

import trtpipe

RUNTIME_API = {  # runtime/tensorrt/backend.py
    "Runtime": ["deserialize_cuda_engine", "engine_host_code_allowed"],
    "ICudaEngine": ["num_io_tensors", "get_tensor_name", "get_tensor_dtype", "get_tensor_shape", "get_tensor_mode",
                    "create_execution_context"],
    "IExecutionContext": ["set_input_shape", "get_tensor_shape", "set_tensor_address", "execute_async_v3"],
    "TensorIOMode": ["INPUT"],
    "ILogger": ["Severity", "log"],
}
BUILDER_API = {  # engine/builder.py
    "Builder": ["create_network", "create_builder_config", "create_optimization_profile", "build_serialized_network"],
    "OnnxParser": ["parse_from_file", "num_errors", "get_error"],
    "ParserError": ["desc", "node_name", "node_operator"],
    "IBuilderConfig": ["set_memory_pool_limit", "add_optimization_profile", "create_timing_cache",
                       "set_timing_cache", "get_timing_cache", "builder_optimization_level",
                       "hardware_compatibility_level", "set_flag", "profiling_verbosity", "progress_monitor"],
    "IOptimizationProfile": ["set_shape"],
    "ITimingCache": ["serialize"],
    "MemoryPoolType": ["WORKSPACE"],
    "HardwareCompatibilityLevel": ["NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"],
    "BuilderFlag": ["VERSION_COMPATIBLE"],
    "ProfilingVerbosity": ["DETAILED"],
    "NetworkDefinitionCreationFlag": ["STRONGLY_TYPED"],
    "IProgressMonitor": ["phase_start", "step_complete", "phase_finish"],
    "EngineInspector": ["execution_context", "get_engine_information"],
    "LayerInformationFormat": ["JSON"],
    "ICudaEngine": ["create_engine_inspector"],
}
SOURCE = Path(trtpipe.__file__).parent


def _trt_names_used(path: Path) -> set[str]:
    """Every ``trt.X`` a module refers to."""
    tree = ast.parse(path.read_text())
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "trt"}


def _lean():  # type: ignore[no-untyped-def]
    return pytest.importorskip("tensorrt_lean_bindings", reason="tensorrt-lean-cu13-bindings is not installed")


def _stub_members() -> dict[str, set[str]]:
    spec = importlib.util.find_spec("tensorrt_bindings")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("tensorrt-stubs is not installed (make test installs it)")
    stub = Path(next(iter(spec.submodule_search_locations))) / "tensorrt.pyi"
    if not stub.is_file():
        pytest.skip("tensorrt-stubs is not installed (make test installs it)")
    # The stubs are pybind11-stubgen output and not always valid Python (ast.parse fails on them): read them
    # line by line, as classes at column 0 with members one indent in.
    members: dict[str, set[str]] = {"": set()}
    current = ""
    for line in stub.read_text().splitlines():
        if match := re.match(r"^class (\w+)", line):
            current = match.group(1)
            members[""].add(current)
            members.setdefault(current, set())
        elif match := re.match(r"^def (\w+)", line):
            current = ""
            members[""].add(match.group(1))
        elif current and (match := re.match(r"^    (?:def (\w+)\(|(\w+)\s*:)", line)):
            members[current].add(match.group(1) or match.group(2))
    return members


def test_runtime_api_exists_in_the_lean_runtime() -> None:
    trt = _lean()
    missing = [f"{cls}.{member}" for cls, names in RUNTIME_API.items() for member in names
               if not hasattr(getattr(trt, cls, None), member)]
    assert not missing, f"not in TensorRT {trt.__version__}: {missing}"
    used = _trt_names_used(SOURCE / "runtime" / "tensorrt" / "backend.py")
    assert used <= set(dir(trt)), used - set(dir(trt))


def test_builder_api_exists_in_the_tensorrt_10_stubs() -> None:
    members = _stub_members()
    missing = [f"{cls}.{member}" for cls, names in BUILDER_API.items() for member in names
               if member not in members.get(cls, set())]
    assert not missing, f"not in the TensorRT 10 stubs: {missing}"
    used = _trt_names_used(SOURCE / "engine" / "builder.py") - {"__version__"}
    assert used <= members[""], used - members[""]


def test_importing_trtpipe_never_imports_tensorrt() -> None:
    import subprocess
    import sys

    code = ("import sys, trtpipe, trtpipe.cli, trtpipe.engine, trtpipe.engine.builder\n"
            "import trtpipe.runtime.tensorrt.backend\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'tensorrt_lean', "
            "'tensorrt_lean_bindings', 'tensorrt_bindings')])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
