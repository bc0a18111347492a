"""How every record file is read and written: one JSON document in UTF-8.

Each record (manifest, sidecar, tuned runs, calibration cache) reads its file through :func:`read_document`, which
turns every way a file can be unreadable into one :class:`Unreadable` (the file could not be read or is not UTF-8;
it is JSON nested too deeply for the parser, which recurses per level, so a hostile file must not crash a reader;
it is not JSON), and says it in that record's own words; and writes it as :func:`record_bytes` lays it out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal


class Unreadable(Exception):
    """A record file that is not a JSON document: ``stage`` is how far reading it got ("read": the bytes or their
    UTF-8; "nested": JSON nested too deeply; "json": not JSON), ``detail`` the reason in one line."""

    def __init__(self, stage: Literal["read", "nested", "json"], detail: str) -> None:
        super().__init__(detail)
        self.stage = stage
        self.detail = detail


def read_document(path: Path) -> Any:
    """The JSON document at ``path``, or None where there is no file; :class:`Unreadable` where it is not one."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise Unreadable("read", str(error)) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise Unreadable("nested", "JSON nested too deeply") from None
    except ValueError as error:
        raise Unreadable("json", str(error)) from None


def record_bytes(document: Mapping[str, Any]) -> bytes:
    """A record document as every record file holds it: indented JSON and a final newline (the bytes
    :func:`trtpipe.files.write_json_atomic` writes)."""
    return (json.dumps(document, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")
