"""Tables for people that never cut an id: other columns give way, ids are printed whole.

An id is what a person copies into the next command (``runyard status``, ``agent fork``),
so an id column is never wrapped, folded or cut: it is as wide as its longest id. Every
other column wraps at word boundaries, folding only a word longer than the column. When
the ids and the longest word of each other column together are wider than the terminal,
the table is printed at the width it needs and the terminal wraps its lines, instead of
rich cutting the ids to fit (its last resort). ``wide`` prints every row on one line, at
whatever width that takes::

    print_table(grid([Column("id", is_id=True), Column("title")], rows))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import typer

from runyard.cli.common import console

if TYPE_CHECKING:
    from rich.table import Table


UNBOUNDED = 100_000
# the color systems rich names (Console.color_system answers one of them, or None)
ColorSystemName = Literal["standard", "256", "truecolor", "windows"] | None
WideOpt = Annotated[
    bool, typer.Option("--wide", help="Every row on one line, however wide (nothing wraps)")
]


@dataclass(frozen=True)
class Column:
    """A column's header; ``is_id``: its cells are ids, never cut; ``whole``: short cells
    (a state, a time, a size) kept on one line as ids are."""

    header: str
    is_id: bool = False
    whole: bool = False
    markup: bool = False  # cells are rich markup (a styled state); others are shown as given


def grid(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Any]],
    *,
    boxed: bool = False,
    show_header: bool = True,
) -> Table:
    """A table of ``rows`` (cells as text, or rich renderables; None is empty) whose id
    columns are as wide as their widest cell and whose other columns wrap at words."""
    from rich import box
    from rich.cells import cell_len
    from rich.table import Table

    table = Table(
        box=box.HEAVY_HEAD if boxed else None, header_style="bold", pad_edge=boxed,
        show_header=show_header,
    )  # fmt: skip
    cells = [[_cell(cell, c.markup) for cell, c in zip(row, columns, strict=True)] for row in rows]
    for index, column in enumerate(columns):
        if column.is_id or column.whole:  # as wide as its widest cell: nothing to cut
            texts = [_plain(row[index]) for row in cells]
            widest = max((cell_len(text) for text in [column.header, *texts]), default=1)
            table.add_column(column.header, no_wrap=True, min_width=widest, overflow="ignore")
        else:
            table.add_column(column.header, overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def _plain(cell: Any) -> str:
    return str(getattr(cell, "plain", cell))  # a rich Text's characters, without its styles


def _cell(value: Any, markup: bool) -> Any:
    """A cell as a rich Text: text a record holds (a title, an error) is never read as
    markup, so ``[red]`` in a session title is shown as written."""
    from rich.text import Text

    if isinstance(value, Text):
        return value
    text = "" if value is None else str(value)
    return Text.from_markup(text) if markup else Text(text)


def print_table(table: Table, *, wide: bool = False) -> None:
    """Print ``table`` on the console without cutting an id (see the module docstring)."""
    from rich.measure import Measurement

    target = console.get() if hasattr(console, "get") else console
    unbounded = target.options.update_width(UNBOUNDED)  # measured as if nothing had to fit
    measured = Measurement.get(target, unbounded, table)
    needed = measured.maximum if wide else measured.minimum
    if needed <= target.width:
        target.print(table)
        return
    from rich.console import Console

    # a console's print never renders wider than the console: a wider one on the same file
    wider = Console(
        file=target.file, width=needed, force_terminal=target.is_terminal,
        color_system=cast("ColorSystemName", target.color_system), no_color=target.no_color,
    )  # fmt: skip
    wider.print(table, crop=False)
