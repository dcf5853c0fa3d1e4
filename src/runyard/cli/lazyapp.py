"""A Typer app that builds only what one invocation needs.

Typer turns every registered command into a click command (evaluating each signature)
before it runs any of them; for a CLI of forty commands that costs about as much as
importing typer itself. :class:`LazyTyper` looks at the command line first:

* ``runyard ls ...`` builds the root and ``ls`` alone;
* ``runyard agent ...`` builds the root and the ``agent`` group (all of its commands);
* ``runyard``/``runyard --help`` builds every top-level command, and each group as a stub
  that carries only its name and help line (all the listing shows);
* shell completion, or a first word that names no command, builds everything, so
  completion and "No such command" (with its suggestions) see the whole CLI.

Tests that drive the app through ``typer.testing.CliRunner`` get the whole app as before.
Options are coerced by :mod:`runyard.cli.coercion` (no pydantic for plain values).
"""

from __future__ import annotations

import copy
import gc
import os
import sys
from typing import Any

import typer
import typer.main
from typer.models import TyperInfo

from runyard.cli.coercion import plain_coercion


class LazyTyper(typer.Typer):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # typer's own __call__ with its exception hook left out: with pretty exceptions
        # off, that hook prints what Python's does.
        # What the imports made lives until the process ends: frozen (now, and again once
        # the command is over), the collector no longer walks it in each full collection
        # while the command runs, nor in the interpreter's last ones at exit (about 30 ms
        # of the 150 ms that ``runyard ls`` on the files took beyond importing typer)
        gc.freeze()
        try:
            command = typer.main.get_command(self.for_args(sys.argv[1:]))
            plain_coercion(command)
            return command(*args, **kwargs)
        finally:
            gc.freeze()

    def for_args(self, args: list[str]) -> typer.Typer:
        """The app pruned to what ``args`` (the words after the program name) can reach."""
        if any(key.endswith("_COMPLETE") for key in os.environ):
            return self  # shell completion: the whole tree
        word = next((arg for arg in args if not arg.startswith("-")), None)
        if word is None:
            return self._pruned([*self.registered_commands], [_stub(g) for g in self._groups()])
        for command in self.registered_commands:
            if _command_name(command) == word:
                return self._pruned([command], [])
        for group in self._groups():
            if group.name == word:
                return self._pruned([], [group])
        return self

    def _groups(self) -> list[TyperInfo]:
        return list(self.registered_groups)

    def _pruned(self, commands: list[Any], groups: list[TyperInfo]) -> typer.Typer:
        pruned: typer.Typer = copy.copy(self)
        pruned.__class__ = typer.Typer  # a plain app from here on: nothing is pruned twice
        pruned.registered_commands = commands
        pruned.registered_groups = groups
        return pruned


def _command_name(command: Any) -> str:
    if command.name:
        return str(command.name)
    return str(command.callback.__name__).replace("_", "-")


def _stub(group: TyperInfo) -> TyperInfo:
    """``group`` with no commands: its name and help line, for the top-level listing."""
    real = group.typer_instance
    assert real is not None
    stub = typer.Typer(name=group.name, help=real.info.help, rich_markup_mode=None)
    return TyperInfo(stub, name=group.name)
