"""A page of a listing: a list of its items that also carries the cursor of the next page."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class Page(list[T], Generic[T]):
    """The items of one page, as a list, and ``next_cursor``: pass it back as ``cursor=``
    for the next page; ``None`` on the last page. ``total``: how many items the listing's
    filters keep over all pages, when the server says (``None`` otherwise).

    A page compares equal to the plain list of its items, so code that took a list before
    pages existed keeps working.
    """

    def __init__(
        self, items: Iterable[T] = (), next_cursor: str | None = None, total: int | None = None
    ) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor
        self.total = total

    def __repr__(self) -> str:
        return f"Page({list.__repr__(self)}, next_cursor={self.next_cursor!r})"
