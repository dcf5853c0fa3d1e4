"""Option values typer would hand to pydantic, taken as they are when nothing can change them.

Typer coerces every option through a pydantic ``TypeAdapter`` built on first use, even an
option left at ``None`` or at its int default: importing pydantic and building a dozen
adapters costs ``runyard ls`` about as much as importing typer. :func:`plain_coercion` gives
each option of a built click command a :class:`PlainCoercion` that answers what needs no
conversion the way typer's adapter would -- ``None``, a ``str`` for a ``str`` option, an
``int`` within its bounds for an ``int`` option, a run of digits for one -- and hands every
other value (paths, choices, lists, values out of bounds, anything unusual) to typer's own
coercion, built then, so its results and its error messages are unchanged.

>>> command = typer.main.get_command(app)
>>> plain_coercion(command)
"""

from __future__ import annotations

import re
from typing import Any

import typer.core

DIGITS = re.compile(r"0|[1-9][0-9]{0,17}")  # what int() and pydantic read alike
UNSURE = object()
# typer's parameter class with the lazily built coercion (typer 0.29 on); with a typer
# without it, options are coerced as that typer does and nothing here takes part
_PARAMETER: Any = getattr(typer.core, "_TyperParameter", None)


def plain_coercion(command: Any) -> None:
    """Give every typer option of ``command`` (and of its subcommands) plain coercion, the
    ``--help`` option click makes as it parses included."""
    for param in command.params:
        _give(param)
    made = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = made(ctx)
        _give(option)
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        plain_coercion(sub)


def _give(param: Any) -> None:
    if _PARAMETER is None or not isinstance(param, _PARAMETER):
        return
    if getattr(param, "_runtime_param", UNSURE) is not None:
        return  # already built, or a typer that keeps it elsewhere
    try:
        param._runtime_param = PlainCoercion(param)
    except AttributeError:  # a typer whose parameters describe their types otherwise
        return


class PlainCoercion:
    """Answers the values that need no conversion; typer's own coercion answers the rest."""

    def __init__(self, param: Any) -> None:
        self.param = param
        descriptor = param.type_descriptor
        info = descriptor.parameter_info
        plain = (
            info.parser is None
            and descriptor.file_annotation is None
            and not descriptor.is_choice
            and not (param.multiple or param.nargs != 1)
        )
        self.kind = descriptor.annotation if plain else None
        self.bounds = (info.min, info.max)  # within them, clamping changes nothing

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None and self.kind is not None:
            return None  # what typer's coercion answers for a value that was not given
        taken = self._taken(value)
        if taken is not UNSURE:
            return taken
        param._runtime_param = None  # typer's own, from here on
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)

    def _taken(self, value: Any) -> Any:
        if self.kind is str and type(value) is str:
            return value
        if self.kind is int and type(value) is str and DIGITS.fullmatch(value):
            value = int(value)
        if self.kind is int and type(value) is int and self._within(value):
            return value
        return UNSURE

    def _within(self, value: int) -> bool:
        low, high = self.bounds
        return (low is None or value >= low) and (high is None or value <= high)
