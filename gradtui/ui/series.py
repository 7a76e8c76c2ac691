"""Per-pass figures over a run, for the passes view's plots: loss, global gradient norm,
non-finite count and per-module gradient norm, in bounded memory.

Plain Python fed by events (no Textual): a pass's loss comes with its PassStarted, the rest
from the gradient flow its PassFinished carries (every pass has one, hooked or not, live or
replayed). A module's norm is sqrt of the sum of its parameters' squared gradient norms (the
parameter `layers.0.linear1.weight` belongs to `layers.0.linear1`). A run of 100,000 passes
keeps at most `MAX_POINTS` points: past that every other one is dropped (the plot is at most
a terminal wide), except that a pass with a non-finite gradient is never dropped.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gradtui.model import events as ev

MAX_POINTS = 2048
"""Points kept; thinned by half when exceeded."""

TOP = "(top)"
"""The module of a leaf whose name has no dot (a bare tensor, a top-level parameter)."""


def module_of(name: str) -> str:
    """The module path of a parameter name: `fc2.weight` -> `fc2`."""
    head, dot, _ = name.rpartition(".")
    return head if dot else TOP


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One pass's figures."""

    index: int
    loss: float | None
    """The first root's loss (None if no root was a single value)."""
    grad_norm: float | None
    """sqrt of the sum of every leaf's squared gradient norm (non-finite if any is)."""
    nonfinite: int
    """Leaves whose gradient has a non-finite value."""
    modules: dict[str, float] = field(default_factory=dict)
    """Module path -> the gradient norm of its parameters."""


def point_of(index: int, losses: Iterable[float | None], flow: Iterable[ev.ParamFlow]) -> SeriesPoint:
    """A pass's point from its losses and its flow."""
    rows = list(flow)
    return _point(index, losses, ((r.name, r.grad_norm) for r in rows), sum(1 for r in rows if r.nonfinite))


def _point(index: int, losses: Iterable[float | None], norms: Iterable[tuple[str, float | None]],
           nonfinite: int) -> SeriesPoint:
    loss = next((v for v in losses if v is not None), None)
    squares: dict[str, float] = {}
    total, seen = 0.0, False
    for name, norm in norms:
        if norm is None:
            continue
        seen = True
        total += norm * norm
        head, dot, _ = name.rpartition(".")
        module = head if dot else TOP
        squares[module] = squares.get(module, 0.0) + norm * norm
    return SeriesPoint(index, loss, math.sqrt(total) if seen else None, nonfinite,
                       {m: math.sqrt(s) for m, s in squares.items()})


class PassSeries:
    """The points of the passes so far, in pass order (see module doc)."""

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = limit
        self.points: list[SeriesPoint] = []
        self._losses: dict[int, tuple[float | None, ...]] = {}
        """Losses of passes started and not yet finished."""
        self.version = 0
        """Bumped on every change, so a plot redraws only when there is something new."""

    def started(self, index: int, losses: tuple[float | None, ...]) -> None:
        """A pass began with these losses."""
        self._losses[index] = losses
        if len(self._losses) > 64:  # passes that never finished (a crash): forget the oldest
            self._losses.pop(next(iter(self._losses)))

    def finished(self, index: int, flow: Iterable[ev.ParamFlow]) -> None:
        """A pass ended with this flow: add (or replace) its point."""
        self.add(point_of(index, self._losses.pop(index, ()), flow))

    def load(self, figures: Iterable[Any]) -> None:
        """A recording's figures (`reader.PassFigures`) of the whole run, before its story: the
        passes it read (evenly spread, the first non-finite ones, the last), in pass order."""
        for f in figures:
            point = _point(f.index, f.losses, f.norms, f.nonfinite)
            self.points.append(SeriesPoint(f.index, point.loss, f.grad_norm, f.nonfinite, point.modules))
        self.version += 1

    def add(self, point: SeriesPoint) -> None:
        """Add a point (one of the same pass replaces it: a recording's pass shown again)."""
        self.version += 1
        if self.points and self.points[-1].index >= point.index:
            at = bisect.bisect_left(self.points, point.index, key=lambda p: p.index)
            if at < len(self.points) and self.points[at].index == point.index:
                self.points[at] = point
            else:
                self.points.insert(at, point)
            return
        self.points.append(point)
        if len(self.points) > self.limit:
            self.points = [p for i, p in enumerate(self.points) if i % 2 == 0 or p.nonfinite or i == len(self.points) - 1]

    def top_modules(self, count: int) -> list[str]:
        """The `count` modules with the largest finite gradient norm in any kept pass, largest first."""
        best: dict[str, float] = {}
        for point in self.points:
            for module, norm in point.modules.items():
                if math.isfinite(norm) and norm > best.get(module, -1.0):
                    best[module] = norm
        return sorted(best, key=lambda m: (-best[m], m))[:count]
