"""Read a model file without running code it carries, unless the user trusts it.

``torch.load`` runs with ``weights_only=True`` unless ``--trust-checkpoint`` is given; when it refuses a file, the
file's pickle opcodes are read (never run) to tell a checkpoint that needs full unpickling, naming what it would
import, from a file that is no checkpoint at all. Kept apart from where a module comes from (:mod:`sources`)
because this is the part a security review reads.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trtpipe.errors import BadInput
from trtpipe.vocab import Device


def read_or_refuse(load: Any, path: Path, what: str) -> Any:
    """``load()``, or a one-line BadInput naming ``path`` as not a readable ``what`` when it fails."""
    try:
        return load()
    except Exception as error:  # torch raises many types for a damaged file; all mean the same to the user
        raise BadInput(f"{path} is not a readable {what} ({first_line(error)}).") from None


def is_torchscript_archive(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    return any(n.endswith("constants.pkl") for n in names) and any("/code/" in n for n in names)


def torch_load(path: Path, trust: bool) -> Any:
    import warnings

    try:
        with warnings.catch_warnings():
            # torch warns that a newer pickle protocol may not load weights-only; the refusal below says more.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(str(path), map_location=str(Device.CPU), weights_only=not trust)
    except pickle.PickleError as error:  # torch's UnpicklingError, whatever its wording in this torch version
        if trust:
            raise BadInput(f"{path} is not a readable PyTorch checkpoint ({first_line(error)}).") from None
        # weights_only refused it. Whether the bytes are a pickle decides what that means, not torch's wording
        # (it has changed between versions: "Unsupported global: GLOBAL x", "Trying to load unsupported GLOBAL
        # x whose module y is blocked", "Unsupported operand 149" for a protocol it does not read): a pickle needs
        # full unpickling; anything else is not a checkpoint at all.
        found = _pickled_globals(path)
        if found is None:
            detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
            reason = detail.group(1).strip() if detail else first_line(error)
            raise BadInput(f"{path} is not a readable PyTorch checkpoint ({reason}).") from None
        # What torch refused first, then whatever else it imports beyond torch's own rebuilders and containers.
        named = list(dict.fromkeys([*re.findall(r"GLOBAL ([\w.]+)", str(error)),
                                    *(g for g in found if not g.startswith(_ROUTINE_GLOBALS))]))
        what = (f"it pickles {', '.join(named[:5])}" if named
                else f"torch's weights-only reader refused it: {_weights_only_reason(error)}")
        raise BadInput(
            f"Checkpoint {path} needs full unpickling ({what}), which can run arbitrary code: pass "
            "--trust-checkpoint only if you trust its source, or save a state_dict instead."
        ) from None
    except Exception as error:  # truncated zip, wrong magic number, EOF...
        raise BadInput(f"{path} is not a readable PyTorch checkpoint ({first_line(error)}).") from None


def _weights_only_reason(error: BaseException) -> str:
    """The line of torch's weights-only refusal that says what it met (its other lines are advice)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = next((line.split("WeightsUnpickler error:", 1)[1].strip() or (lines[i + 1] if i + 1 < len(lines) else "")
                   for i, line in enumerate(lines) if "WeightsUnpickler error:" in line), None)
    return detail or (lines[-1] if lines else type(error).__name__)


# Globals every torch.save pickle imports (tensor rebuilders, storages, OrderedDict, set): not worth naming.
_ROUTINE_GLOBALS = ("torch.", "collections.OrderedDict", "__builtin__.set", "builtins.set", "_codecs.encode")
_STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}


def _pickled_globals(path: Path) -> list[str] | None:
    """The globals (``module.name``) a pickle imports, read without unpickling it (pickletools only decodes its
    opcodes); None when the file holds no pickle: neither a torch archive with ``data.pkl`` nor a pickle stream.

    A global pushed by STACK_GLOBAL (protocol 4 and later) is named by the two strings before it, followed
    through the memo; one built any other way is not named (the list is for the message, not a security check:
    nothing here runs the pickle, and it is refused either way).
    """
    import contextlib
    import io
    import pickletools

    found: list[str] = []
    recent: list[Any] = []  # the two values last pushed, where they are strings (else None)
    memo: dict[int, Any] = {}
    pickles = 0
    with contextlib.ExitStack() as closing:
        try:
            if zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as archive:
                    member = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"),
                                  None)
                    if member is None:
                        return None
                    stream: Any = io.BytesIO(archive.read(member))
            else:
                stream = closing.enter_context(open(path, "rb"))
        except (OSError, zipfile.BadZipFile):
            return None
        while True:  # a legacy torch file is several pickles in a row, then raw storage bytes
            try:
                for opcode, arg, _ in pickletools.genops(stream):
                    _note_opcode(opcode.name, arg, bool(opcode.stack_after), found, recent, memo)
            except (ValueError, EOFError, OSError):  # an unknown opcode or a truncated argument
                break
            pickles += 1
            if not stream.read(1):
                break
            stream.seek(-1, io.SEEK_CUR)
    return found if pickles else None


def _note_opcode(name: str, arg: Any, pushes: bool, found: list[str], recent: list[Any], memo: dict[int, Any]) -> None:
    """Follow one opcode far enough to name the globals it imports (see _pickled_globals): appends to ``found``."""
    if name in ("GLOBAL", "INST"):
        found.append(".".join(str(arg).split(" ", 1)))
    elif name == "STACK_GLOBAL":
        if len(recent) >= 2 and all(isinstance(v, str) for v in recent[-2:]):
            found.append(f"{recent[-2]}.{recent[-1]}")
        recent.append(None)
    elif name in _STRING_OPS:
        recent.append(arg if isinstance(arg, str) else None)
    elif name in _PUT_OPS:
        memo[int(arg)] = recent[-1] if recent else None
    elif name == "MEMOIZE":
        memo[len(memo)] = recent[-1] if recent else None
    elif name in _GET_OPS:
        recent.append(memo.get(int(arg)))
    elif pushes:
        recent.append(None)
    del recent[:-2]


def find_state_dict(obj: Any, path: Path) -> Mapping[str, torch.Tensor]:
    if isinstance(obj, Mapping):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        for key in ("state_dict", "model_state_dict", "model", "net", "weights"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                return inner
    raise BadInput(f"Checkpoint {path} holds a {type(obj).__name__}, not a state_dict of tensors "
                   "(nor one under 'state_dict' or 'model').")



def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
