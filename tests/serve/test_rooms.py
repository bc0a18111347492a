"""serve/ is a part with rooms a reader can name: HTTP, gRPC, batching and repository, each saying in one line what
it holds; the gRPC listener process, which imports its room's package, loads none of the server's model code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import trtpipe.serve

SERVE = Path(trtpipe.serve.__file__).parent
ROOMS = {"http", "grpc", "batching", "repository"}


def test_serve_is_split_into_its_four_rooms_each_with_a_one_line_docstring() -> None:
    rooms = {p.name for p in SERVE.iterdir() if (p / "__init__.py").is_file()}
    assert rooms == ROOMS
    for room in sorted(rooms):
        docstring = ast.get_docstring(ast.parse((SERVE / room / "__init__.py").read_text()))
        assert docstring and "\n" not in docstring.strip(), f"serve/{room}/__init__.py needs a one-line docstring"


def test_the_grpc_listener_process_loads_no_model_code() -> None:
    """The listener runs as ``python -m trtpipe.serve.grpc.listener``: importing it imports the ``trtpipe.serve`` and
    ``trtpipe.serve.grpc`` packages too, which import-linter's contract does not see; they must stay light."""
    code = ("import sys, trtpipe.serve.grpc.listener\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('trtpipe', 'numpy', 'onnx', 'torch')))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                check=True).stdout.split())
    assert "trtpipe.serve.grpc.listener" in loaded
    heavy = {m for m in loaded if not m.startswith("trtpipe")}
    model_code = {m for m in loaded if m.startswith(("trtpipe.runtime", "trtpipe.artifact", "trtpipe.models",
                                                     "trtpipe.serve.batching", "trtpipe.serve.repository",
                                                     "trtpipe.serve.service", "trtpipe.serve.http"))}
    assert not heavy and not model_code, f"the gRPC listener loads {sorted(heavy | model_code)}"
