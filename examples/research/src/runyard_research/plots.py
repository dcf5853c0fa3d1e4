"""Figures drawn with matplotlib's Agg backend (no display), answered as PNG bytes."""

from __future__ import annotations

import io
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _png(figure: Any, dpi: int) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    _pyplot().close(figure)
    return buffer.getvalue()


def scatter_and_residuals(frame: Any, title: str, max_points: int, dpi: int) -> bytes:
    """Predicted against actual (with the identity line) beside a residual histogram."""
    plt = _pyplot()
    shown = frame.head(max_points)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 4), layout="constrained")
    left.scatter(shown["actual"], shown["predicted"], s=12, alpha=0.7)
    low = float(min(shown["actual"].min(), shown["predicted"].min()))
    high = float(max(shown["actual"].max(), shown["predicted"].max()))
    left.plot([low, high], [low, high], color="grey", linewidth=1)
    left.set(xlabel="actual", ylabel="predicted", title=title)
    right.hist(frame["residual"], bins=20, color="tab:orange")
    right.set(xlabel="residual (actual - predicted)", ylabel="rows", title="residuals")
    return _png(figure, dpi)


def comparison_bars(labels: list[str], values: list[float], metric: str, dpi: int) -> bytes:
    """One bar per run for ``metric``."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 3.5), layout="constrained")
    axes.bar(labels, values, color="tab:blue")
    axes.set(ylabel=metric, title=f"{metric} by run")
    axes.tick_params(axis="x", labelrotation=15)
    return _png(figure, dpi)
