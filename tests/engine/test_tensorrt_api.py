"""The TensorRT API trtpipe calls, checked against what TensorRT publishes, on machines without a GPU.

The runtime half is checked against the lean runtime bindings (they import without a GPU); the builder half
against the type stubs of TensorRT 10's Python API. A renamed or removed member fails here, not on a user's GPU.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

import trtpipe

RUNTIME_API = {  # runtime/tensorrt/backend.py
    "Runtime": ["deserialize_cuda_engine", "engine_host_code_allowed"],
    "ICudaEngine": ["num_io_tensors", "get_tensor_name", "get_tensor_dtype", "get_tensor_shape", "get_tensor_mode",
                    "create_execution_context", "get_tensor_profile_shape",
                    "num_optimization_profiles"],  # every profile's range, to choose the one a request fits
    "IExecutionContext": ["set_input_shape", "get_tensor_shape", "set_tensor_address", "execute_async_v3",
                          "set_optimization_profile_async",  # a request in another profile than the last one
                          "profiler", "enqueue_emits_profile", "report_to_profiler"],  # bench --profile-layers
    "IProfiler": ["report_layer_time"],  # subclassed to collect each layer's time
    "TensorIOMode": ["INPUT"],
    "ILogger": ["Severity", "log"],
}
# Names the TensorRT 10 stubs must have too: the runtime calls added for profiles, CUDA graphs and layer timing are
# older than TensorRT 10, so an engine run on 10.x makes the same calls.
RUNTIME_API_IN_10 = {
    "ICudaEngine": ["num_optimization_profiles", "get_tensor_profile_shape"],
    "IExecutionContext": ["set_optimization_profile_async", "profiler", "enqueue_emits_profile",
                          "report_to_profiler"],
    "IProfiler": ["report_layer_time"],
}
BUILDER_API = {  # engine/builder.py
    "Builder": ["create_network", "create_builder_config", "create_optimization_profile", "build_serialized_network"],
    "OnnxParser": ["parse_from_file", "num_errors", "get_error"],
    "ParserError": ["desc", "node_name", "node_operator"],
    "IBuilderConfig": ["set_memory_pool_limit", "add_optimization_profile", "create_timing_cache",
                       "set_timing_cache", "get_timing_cache", "builder_optimization_level",
                       "hardware_compatibility_level", "set_flag", "clear_flag", "profiling_verbosity",
                       "progress_monitor"],
    "IOptimizationProfile": ["set_shape"],
    "ITimingCache": ["serialize", "combine"],  # the timing cache is merged under a lock before it is saved
    "MemoryPoolType": ["WORKSPACE"],
    "HardwareCompatibilityLevel": ["NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"],
    "BuilderFlag": ["VERSION_COMPATIBLE", "TF32"],
    "Runtime": ["deserialize_cuda_engine", "engine_host_code_allowed"],  # describe() loads the new engine back
    "ProfilingVerbosity": ["DETAILED"],
    "NetworkDefinitionCreationFlag": ["STRONGLY_TYPED"],
    "IProgressMonitor": ["phase_start", "step_complete", "phase_finish"],
    "EngineInspector": ["execution_context", "get_engine_information"],
    "LayerInformationFormat": ["JSON"],
    "ICudaEngine": ["create_engine_inspector", "create_execution_context", "num_io_tensors", "get_tensor_name",
                    "get_tensor_dtype", "get_tensor_shape", "get_tensor_mode"],
    "IExecutionContext": ["set_input_shape"],
}
# Removed in TensorRT 10 (its migration guide): implicit batch, bindings and the old build and execute calls.
REMOVED_IN_10 = {"execute_async_v2", "execute_async", "execute", "get_binding_index", "get_binding_name",
                 "get_binding_shape", "get_binding_dtype", "binding_is_input", "num_bindings", "set_binding_shape",
                 "max_batch_size", "build_engine", "max_workspace_size", "get_profile_shape"}
TRT_MODULES = ("runtime/tensorrt/backend.py", "runtime/tensorrt/loader.py", "engine/builder.py")
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


def test_runtime_calls_for_profiles_and_layer_timing_exist_in_the_tensorrt_10_stubs() -> None:
    members = _stub_members()
    missing = [f"{cls}.{member}" for cls, names in RUNTIME_API_IN_10.items() for member in names
               if member not in members.get(cls, set())]
    assert not missing, f"not in the TensorRT 10 stubs: {missing}"


def test_builder_api_exists_in_the_tensorrt_10_stubs() -> None:
    members = _stub_members()
    missing = [f"{cls}.{member}" for cls, names in BUILDER_API.items() for member in names
               if member not in members.get(cls, set())]
    assert not missing, f"not in the TensorRT 10 stubs: {missing}"
    used = _trt_names_used(SOURCE / "engine" / "builder.py") - {"__version__"}
    assert used <= members[""], used - members[""]


class _Names:
    """The identifiers an extension module defines: NUL-terminated strings in its binary. A name may be the tail
    of a longer string (linkers merge 'INPUT' into 'CONDITIONAL_INPUT', 'Builder' into 'IBuilder'), so this can
    only say yes too often for names that are the end of another; the names checked here are long or exact."""

    def __init__(self, binary: bytes) -> None:
        self.binary = binary

    def __contains__(self, name: object) -> bool:
        return str(name).encode() + b"\x00" in self.binary


def _tensorrt_11_names() -> _Names:
    """The identifiers TensorRT 11's full bindings define, read from the extension module inside the wheel that
    make test downloads (never imported: its libraries come only from NVIDIA's index)."""
    import zipfile

    wheels = sorted((Path(sys.prefix) / "tensorrt-11-bindings").glob("tensorrt_cu13_bindings-11*.whl"))
    if not wheels:
        pytest.skip("the TensorRT 11 bindings wheel is not downloaded (make test does it on x86-64 Linux)")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith("tensorrt.so"))
        return _Names(wheel.read(name))


def _attributes_used(relative: str) -> set[str]:
    tree = ast.parse((SOURCE / relative).read_text())
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def test_every_call_exists_in_tensorrt_11() -> None:
    names = _tensorrt_11_names()
    wanted = {m for api in (RUNTIME_API, BUILDER_API) for cls, members in api.items() for m in (cls, *members)}
    wanted |= _trt_names_used(SOURCE / "engine" / "builder.py") | _trt_names_used(
        SOURCE / "runtime" / "tensorrt" / "backend.py")
    missing = sorted(name for name in wanted - {"__version__"} if name not in names)
    assert not missing, f"not in TensorRT 11.4's bindings: {missing}"


def test_no_api_removed_in_tensorrt_10_is_called() -> None:
    names = _tensorrt_11_names()
    assert "execute_async_v2" not in names and "execute_async_v3" in names  # the table can tell them apart
    used = {name for module in TRT_MODULES for name in _attributes_used(module)}
    assert not used & REMOVED_IN_10, sorted(used & REMOVED_IN_10)
    # The check sees such a call: the same scan over a line that makes one.
    call = ast.parse("context.execute_async_v2(bindings, stream)")
    assert {n.attr for n in ast.walk(call) if isinstance(n, ast.Attribute)} & REMOVED_IN_10


def test_importing_trtpipe_never_imports_tensorrt() -> None:
    import subprocess
    import sys

    code = ("import sys, trtpipe, trtpipe.cli, trtpipe.engine, trtpipe.engine.builder\n"
            "import trtpipe.runtime.tensorrt.backend\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'tensorrt_lean', "
            "'tensorrt_lean_bindings', 'tensorrt_bindings')])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
