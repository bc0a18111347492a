"""How ONNX Runtime words its errors, read for a client: the status code before the message (``[ONNXRuntimeError] :
2 : INVALID_ARGUMENT : ``), the node that failed (``Non-zero status code returned while running Gather node.
Name:'g' Status Message: ``), and whether the error says the request's data was refused rather than the model
failing by itself. Other layers ask through runtime/registry.py (``refused_by_runtime``, ``failed_node``). Standard
library only: a server reads errors without importing ONNX Runtime again."""

from __future__ import annotations

import re

from trtpipe.vocab import BackendKind

STATUS = re.compile(r"^\[ONNXRuntimeError\] : \d+ : (?P<code>[A-Z_]+) : ")
NODE = re.compile(r"Non-zero status code returned while running (?P<op>[\w.]+) node\. Name:'(?P<name>[^']*)' "
                  r"Status Message: ")


def refuses_data(error: BaseException) -> bool:
    """Whether ``error`` is ONNX Runtime's and says the request's data was refused: INVALID_ARGUMENT (an index out
    of its table in a Gather), or FAIL from a node (a kernel that cannot run on these values or shapes: a Reshape
    that does not fit)."""
    if not type(error).__module__.startswith(BackendKind.ONNXRUNTIME) and "[ONNXRuntimeError]" not in str(error):
        return False
    status = STATUS.match(str(error).strip())
    code = status["code"] if status else type(error).__name__.upper()
    return code in ("INVALID_ARGUMENT", "INVALIDARGUMENT") or (code == "FAIL" and bool(NODE.search(str(error))))


def failed_node(line: str) -> tuple[str, str]:
    """An error's first line without ONNX Runtime's status code, split into the node that failed, in words
    (``Gather node 'g': ``; ``Gather node: `` when it has no name; "" where the line names none), and the rest of the
    line after that node's preamble."""
    line = STATUS.sub("", line)
    node = NODE.search(line)
    if not node:
        return "", line
    where = f"{node['op']} node '{node['name']}': " if node["name"] else f"{node['op']} node: "
    return where, line[node.end():]
