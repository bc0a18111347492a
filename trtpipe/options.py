"""Options declared once: each stage's options dataclass describes every field with :func:`option`, and the
CLI flags, the Python API and the pipeline file's keys are all generated from that one declaration.

A field's metadata carries its help, its value type, the choices or parser that check it, and how it is spelled
on the command line. :func:`coerce` turns what a user wrote (a CLI string, a TOML value, a Python argument) into
the field's value or raises ValueError with a one-line reason. Every options class derives from :class:`Options`,
whose ``__post_init__`` runs :func:`coerce` on every field: the CLI, the pipeline file and the Python API all
hand their raw values to the constructor, so a choice becomes its vocabulary enum (``Precision.INT8``, not
``"int8"``) once, where it enters, and nothing downstream converts it again. The CLI reports a bad value as a
usage error and the pipeline loader with the file, line and key. Standard library only: importing an options
module loads nothing heavy.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput

_METADATA_KEY = "trtpipe"


@dataclass(frozen=True)
class OptionSpec:
    """How one options field is checked and spelled."""

    help: str
    type: type  # bool, int, float, str, Path or a vocabulary enum (a StrEnum): the value type after coercion
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None  # an enum's default: all its members
    parse: Callable[[str], Any] | None = None  # text -> value (sizes, shapes, lists)
    format: Callable[[Any], str] | None = None  # value -> text, for help defaults and round trips
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    flag: str | None = None  # CLI spelling when it is not --field-name
    short: str | None = None  # e.g. "-o"
    cli: bool = True  # False: set by the CLI from an argument or another source, not a flag

    def choice_values(self) -> tuple[str, ...] | None:
        choices = self.choices() if callable(self.choices) else self.choices
        if choices is None and self.enum is not None:
            choices = tuple(self.enum)
        return None if choices is None else tuple(str(c) for c in choices)

    @property
    def enum(self) -> builtins.type[Enum] | None:  # `type` is the field above in this class's scope
        """The vocabulary enum a choice field holds, or None."""
        return self.type if isinstance(self.type, type) and issubclass(self.type, Enum) else None


def option(default: Any = None, help: str = "", *, type: type = str, default_factory: Callable[[], Any] | None = None,
           **spec: Any) -> Any:
    """A dataclass field of an options class; ``spec`` holds the OptionSpec keywords."""
    metadata = {_METADATA_KEY: OptionSpec(help=help, type=type, **spec)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def spec_of(item: dataclasses.Field[Any]) -> OptionSpec:
    spec = item.metadata.get(_METADATA_KEY)
    if spec is None:
        raise TypeError(f"options field '{item.name}' is not declared with trtpipe.options.option()")
    return spec


def option_fields(cls: type) -> list[tuple[dataclasses.Field[Any], OptionSpec]]:
    """The declared options of an options dataclass, in declaration order."""
    return [(f, spec_of(f)) for f in dataclasses.fields(cls)]


def field_default(item: dataclasses.Field[Any]) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return None


def cli_flag(item: dataclasses.Field[Any], spec: OptionSpec) -> str:
    return spec.flag or "--" + item.name.replace("_", "-")


def coerce(spec: OptionSpec, value: Any) -> Any:
    """The value a field takes for ``value`` as a user wrote it (CLI text or a TOML value).

    Raises ValueError with a reason fit to print after the option's or key's name.
    """
    if value is None:
        return None
    if spec.parse is not None:
        if isinstance(value, dict) and spec.format is not None:  # a parsed mapping (shape specs), checked again
            value = spec.format(value)
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            raise ValueError(f"must be {spec.metavar or 'text'}, not {value!r}")
        elif isinstance(value, (int, float)):
            value = str(value)
        if not isinstance(value, str):
            raise ValueError(f"must be {spec.metavar or 'text'}, not {type(value).__name__} {value!r}")
        return spec.parse(value)
    if spec.type is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, not {value!r}")
        return value
    if spec.type in (int, float):
        number = _number(value, spec.type)
        if spec.minimum is not None and number < spec.minimum:
            raise ValueError(f"must be at least {spec.minimum:g}, not {number!r}")
        if spec.maximum is not None and number > spec.maximum:
            raise ValueError(f"must be at most {spec.maximum:g}, not {number!r}")
        return number
    if not isinstance(value, (str, Path)):
        raise ValueError(f"must be {'a path' if spec.type is Path else 'a string'}, not {type(value).__name__} "
                         f"{value!r}")
    choices = spec.choice_values()
    if choices is not None and str(value) not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}, not {str(value)!r}")
    if spec.enum is not None:
        return spec.enum(str(value))
    return Path(value) if spec.type is Path else str(value)


def _number(value: Any, kind: type) -> int | float:
    # TOML's and Python's true/false are ints too: a bool is never a number here.
    if isinstance(value, bool):
        raise ValueError(f"must be {'an integer' if kind is int else 'a number'}, not {value!r}")
    if isinstance(value, str):
        try:
            value = int(value) if kind is int else float(value)
        except ValueError:
            raise ValueError(f"must be {'an integer' if kind is int else 'a number'}, not {value!r}") from None
    if kind is int and not isinstance(value, int):
        raise ValueError(f"must be an integer, not {value!r}")
    if not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, not {type(value).__name__} {value!r}")
    return kind(value)


def from_mapping(cls: type, values: dict[str, Any], *, base: Any = None) -> Any:
    """An options object from user-written values (unknown keys are the caller's to refuse), starting from
    ``base`` (another instance) or the defaults. A value that does not fit raises OptionValueError (from the
    class's ``__post_init__``)."""
    current = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)} if base is not None else {}
    return cls(**(current | values))


class OptionValueError(BadInput, ValueError):
    """A value that does not fit its option; ``key`` names the option and ``reason`` says why. A BadInput, so a
    Python caller's wrong value reads like any other user error, and a ValueError for code that checks values."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"'{key}' {reason}")
        self.key = key
        self.reason = reason


class Options:
    """Base of every stage's options dataclass: each field is coerced to its declared type when the object is
    made, whoever makes it (click, the pipeline file, a Python caller), so the object holds typed values only."""

    def __post_init__(self) -> None:
        for item, spec in option_fields(type(self)):
            value = getattr(self, item.name)
            default = field_default(item)
            if type(value) is type(default) and value == default:
                continue  # the declared default is typed already (and an empty list parses to nothing)
            try:
                object.__setattr__(self, item.name, coerce(spec, value))
            except OptionValueError:
                raise
            except ValueError as error:
                raise OptionValueError(item.name, str(error)) from None


def to_plain(options: Any) -> dict[str, Any]:
    """JSON-ready values of an options object (paths and enums as strings, tuples as lists)."""
    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, str):
            return str(value)
        return value

    return {f.name: plain(getattr(options, f.name)) for f in dataclasses.fields(options)}
