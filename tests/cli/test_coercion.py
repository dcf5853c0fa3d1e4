"""Plain coercion of options answers exactly what typer's own (pydantic) coercion answers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
import typer.main

from runyard.cli.coercion import PlainCoercion, plain_coercion

VALUES = (
    None, "", "abc", "5", "05", "+5", "-3", "0", "00", " 7", "7 ", "1_000", "1.0", "9" * 30,
    "١٢", 5, 0, -1, 10**20, True, 2.0, "~/x", "-",
)  # fmt: skip


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def probe(
        text: Annotated[str | None, typer.Option()] = None,
        limit: Annotated[int, typer.Option(min=1)] = 50,
        count: Annotated[int | None, typer.Option(max=10)] = None,
        plain_int: Annotated[int, typer.Option()] = 0,
        clamped: Annotated[int, typer.Option(min=1, max=5, clamp=True)] = 1,
        folder: Annotated[Path | None, typer.Option()] = None,
        tags: Annotated[list[str] | None, typer.Option()] = None,
        flag: Annotated[bool, typer.Option()] = False,
    ) -> None:
        pass

    return app


def _outcome(param: Any, value: Any) -> tuple[str, Any]:
    try:
        return "value", param.get_runtime_param().coerce(value, param=param, ctx=None)
    except typer.BadParameter as exc:
        return "error", exc.message


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_option_answers_as_typer_does(value: Any) -> None:
    plain, own = typer.main.get_command(_app()), typer.main.get_command(_app())
    plain_coercion(plain)
    for ours, theirs in zip(plain.params, own.params, strict=True):
        assert isinstance(ours._runtime_param, PlainCoercion)
        expected = _outcome(theirs, value)
        assert _outcome(ours, value) == expected, (ours.name, value)
        got = _outcome(ours, value)  # and again, once handed over to typer's own
        assert got == expected and type(got[1]) is type(expected[1]), (ours.name, value)


def test_plain_values_need_no_typer_coercion() -> None:
    command = typer.main.get_command(_app())
    plain_coercion(command)
    by_name = {param.name: param for param in command.params}
    assert _outcome(by_name["text"], "abc") == ("value", "abc")
    assert _outcome(by_name["limit"], "12") == ("value", 12)
    assert _outcome(by_name["limit"], 50) == ("value", 50)
    assert _outcome(by_name["folder"], None) == ("value", None)
    # none of them was handed over: typer built no adapter of its own
    assert all(isinstance(by_name[n]._runtime_param, PlainCoercion) for n in by_name)


def test_parameters_it_does_not_know_are_left_to_their_own_coercion() -> None:
    import click

    plain = click.Option(["--limit"], type=int, default=3)
    command = click.Command("probe", params=[plain], callback=lambda limit: limit)
    plain_coercion(command)  # a click parameter: nothing to give, nothing raised
    assert not hasattr(plain, "_runtime_param")
    assert command.main(["--limit", "7"], standalone_mode=False) == 7
    built = typer.main.get_command(_app())
    first = built.params[1]
    first.get_runtime_param()  # typer's own, built before: kept as it is
    own = first._runtime_param
    plain_coercion(built)
    assert first._runtime_param is own
    assert isinstance(built.params[0]._runtime_param, PlainCoercion)
