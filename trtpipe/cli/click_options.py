"""Click options generated from a stage's options dataclass: one declaration, no retyped choice lists.

Each field becomes one flag with its help, type, choices, range and default as the dataclass declares them;
the command receives the assembled options object. A value that does not parse is click's usage error (exit 2)
naming the flag.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

from trtpipe.options import OptionSpec, cli_flag, coerce, field_default, option_fields


class _Parsed(click.ParamType):
    """A value checked by the option's own parser (sizes, shapes, lists)."""

    def __init__(self, spec: OptionSpec) -> None:
        self.spec = spec
        self.name = spec.metavar or "TEXT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return coerce(self.spec, value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _click_type(spec: OptionSpec) -> Any:
    choices = spec.choice_values()
    if spec.parse is not None:
        return _Parsed(spec)
    if choices is not None:
        return click.Choice([str(c) for c in choices])
    if spec.type is int:
        return click.IntRange(None if spec.minimum is None else int(spec.minimum),
                              None if spec.maximum is None else int(spec.maximum))
    if spec.type is float:
        return click.FloatRange(spec.minimum, spec.maximum)
    if spec.type is Path:
        return click.Path(dir_okay=False, path_type=Path)
    return click.STRING


class _Option(click.Option):
    """An option whose default, given as the text to show, is shown as it is ("[default: 1,8,32]"): click puts a
    text default in brackets ("[default: (1,8,32)]"), which reads as a tuple."""

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str) and "default" in extra:
            extra["default"] = self.show_default
        return extra


def _shown_default(default: Any, spec: OptionSpec) -> str | bool:
    if default is None or default == () or default == {}:
        return False
    return spec.format(default) if spec.format else str(default)


def options_from(cls: type, param: str, *, only: Iterable[str] | None = None,
                 exclude: Iterable[str] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add a flag per field of ``cls`` to a click command and hand it the options object as ``param``."""
    wanted = None if only is None else set(only)
    fields = [(f, spec) for f, spec in option_fields(cls)
              if spec.cli and f.name not in set(exclude) and (wanted is None or f.name in wanted)]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {}
            for item, _ in fields:
                value = kwargs.pop(f"{param}__{item.name}")
                values[item.name] = field_default(item) if value is None else value
            kwargs[param] = cls(**values)
            return command(*args, **kwargs)

        for item, spec in reversed(fields):
            dest = f"{param}__{item.name}"
            default = field_default(item)
            flag = cli_flag(item, spec)
            if spec.type is bool and spec.parse is None:
                if "/" not in flag and default:
                    flag = f"{flag}/--no-{flag.removeprefix('--')}"
                declaration = [flag, dest] if not spec.short else [spec.short, flag, dest]
                flag_kind: dict[str, Any] = {} if "/" in flag else {"is_flag": True}
                wrapper = click.option(*declaration, default=default, show_default=True, help=spec.help,
                                       **flag_kind)(wrapper)
                continue
            declaration = [flag, dest] if not spec.short else [spec.short, flag, dest]
            wrapper = click.option(*declaration, type=_click_type(spec), default=None, metavar=spec.metavar,
                                   show_default=_shown_default(default, spec), help=spec.help, cls=_Option)(wrapper)
        return wrapper

    return decorate


def declared_flags(cls: type) -> dict[str, str]:
    """{field name: CLI flag} of the fields that have one (for tests and documentation)."""
    return {f.name: cli_flag(f, spec).split("/")[0] for f, spec in option_fields(cls) if spec.cli}
