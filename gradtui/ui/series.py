"""Per-pass figures over a run, for the passes view's plots: loss, global gradient norm,
non-finite count and per-module gradient norm, in bounded memory.

Plain Python fed by events (no Textual): a pass's loss comes with its PassStarted, the rest
from the gradient flow its PassFinished carries (every pass has one, hooked or not, live or
replayed). A module's norm is sqrt of the sum of its parameters' squared gradient norms (the
parameter `layers.0.linear1.weight` belongs to `layers.0.linear1`). A run of 100,000 passes
keeps at most `MAX_POINTS` points: past that every other one is dropped (the plot is at most
a terminal wide), except that a pass with a non-finite gradient is never dropped.

For the distributions over passes a point also keeps, per parameter, the statistics of its
gradient when the pass had them (a live pass's `PassFinished.leaf_grads`, a recording's per-node
passes, read for one parameter when the gradients view looks at it: `add_stats`), and when the
pass started: seconds after the run started for a recording, after the first pass the UI saw for
a live run (the plots' wall-time axis). A live run's statistics are kept for its last
GRAD_POINTS passes.
"""

from __future__ import annotations

import bisect
import math
import time
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gradtui.protocol import events as ev
from gradtui.protocol.stats import Stats

MAX_POINTS = 2048
"""Points kept; thinned by half when exceeded."""

GRAD_POINTS = 256
"""A live run's latest points that keep their parameters' gradient statistics (a model's hundreds
of Stats a pass, each with up to 64 values: 2048 passes of them would be hundreds of MB); older
points keep their norms only."""

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
    params: array = field(default_factory=lambda: array("d"))
    """Each parameter's gradient norm, at its position in `PassSeries.names` (ABSENT: no
    gradient, or a parameter named after this pass): doubles, not a dict, as a run keeps
    thousands of points of a model's hundreds of parameters."""
    grads: tuple[Stats | None, ...] = ()
    """Each parameter's gradient statistics, at its position in `PassSeries.names` (None or
    past the end: the pass had none)."""
    time: float | None = None
    """When the pass started, in seconds (module doc); None: not known."""


ABSENT = -1.0
"""A parameter's norm in `SeriesPoint.params` when it has none (a norm is never negative)."""


def ema(values: Iterable[float | None], weight: float) -> list[float | None]:
    """TensorBoard's smoothing: an exponential moving average of weight `weight` (0: none),
    debiased (the first points are not pulled toward 0); a missing or non-finite value is kept
    as it is and left out of the average."""
    out: list[float | None] = []
    last, count = 0.0, 0
    for value in values:
        if value is None or not math.isfinite(value) or weight <= 0:
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        count += 1
        out.append(last / (1 - weight**count))
    return out


def point_at(points: list[SeriesPoint], index: int) -> SeriesPoint | None:
    """The point of pass `index` in `points` (in pass order), if there is one."""
    at = bisect.bisect_left(points, index, key=lambda p: p.index)
    return points[at] if at < len(points) and points[at].index == index else None


def point_of(
    index: int, losses: Iterable[float | None], flow: Iterable[ev.ParamFlow], names: dict[str, int] | None = None
) -> SeriesPoint:
    """A pass's point from its losses and its flow (`names`: the series' parameter positions,
    grown by the parameters first seen here)."""
    rows = list(flow)
    return _point(
        index,
        losses,
        ((r.name, r.grad_norm) for r in rows),
        sum(1 for r in rows if r.nonfinite),
        {} if names is None else names,
    )


def _point(
    index: int,
    losses: Iterable[float | None],
    norms: Iterable[tuple[str, float | None]],
    nonfinite: int,
    names: dict[str, int],
) -> SeriesPoint:
    loss = next((v for v in losses if v is not None), None)
    squares: dict[str, float] = {}
    total, seen = 0.0, False
    found: list[tuple[int, float]] = []
    for name, norm in norms:
        if norm is None:
            continue
        seen = True
        total += norm * norm
        head, dot, _ = name.rpartition(".")
        module = head if dot else TOP
        squares[module] = squares.get(module, 0.0) + norm * norm
        found.append((names.setdefault(name, len(names)), norm))
    params = array("d", [ABSENT]) * len(names)
    for at, norm in found:
        params[at] = norm
    return SeriesPoint(
        index,
        loss,
        math.sqrt(total) if seen else None,
        nonfinite,
        {m: math.sqrt(s) for m, s in squares.items()},
        params,
    )


class PassSeries:
    """The points of the passes so far, in pass order (see module doc)."""

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = limit
        self.points: list[SeriesPoint] = []
        self._losses: dict[int, tuple[float | None, ...]] = {}
        """Losses of passes started and not yet finished."""
        self.version = 0
        """Bumped on every change, so a plot redraws only when there is something new."""
        self.names: dict[str, int] = {}
        """Parameter name -> its position in every point's `params`, in the order first seen."""
        self._times: dict[int, float] = {}
        """When each pass started and not yet finished (seconds after `_origin`)."""
        self._origin: float | None = None
        """The monotonic clock at the first live pass: a live run's time axis starts there."""
        self.clock = time.monotonic
        """The live time axis's clock (a test sets its own)."""
        self._with_grads: deque[int] = deque()
        """The passes whose points `finished` gave gradient statistics, oldest first."""

    def started(self, index: int, losses: tuple[float | None, ...]) -> None:
        """A pass began with these losses."""
        self._losses[index] = losses
        now = self.clock()
        if self._origin is None:
            self._origin = now
        self._times[index] = now - self._origin
        if len(self._losses) > 64:  # passes that never finished (a crash): forget the oldest
            self._losses.pop(next(iter(self._losses)))
        if len(self._times) > 64:
            self._times.pop(next(iter(self._times)))

    def finished(
        self,
        index: int,
        flow: Iterable[ev.ParamFlow],
        leaf_grads: Iterable[tuple[int, Stats | None]] = (),
        leaf_names: dict[int, str] | None = None,
    ) -> None:
        """A pass ended with this flow and its leaves' gradient statistics (by accumulator node
        id, the flow's `node`): add (or replace) its point. A pass whose flow was not computed
        (nothing showed it) has its gradients' norms from their statistics, its leaves named by
        `leaf_names` (accumulator node id -> the name its flow row would have)."""
        rows = tuple(flow)
        by_node = {node: stats for node, stats in leaf_grads}
        losses = self._losses.pop(index, ())
        if not rows and by_node and leaf_names is not None:
            named = [(leaf_names.get(node, f"#{node}"), stats) for node, stats in by_node.items()]
            norms = [(name, None if s is None else s.norm) for name, s in named]
            point = _point(index, losses, norms, sum(1 for _, s in named if s is not None and s.nonfinite), self.names)
            grads = self._placed(named)
        else:
            point = point_of(index, losses, rows, self.names)
            grads = self._placed((r.name, by_node.get(r.node)) for r in rows if r.node is not None)
        when = self._times.pop(index, None)
        known = point_at(self.points, index)
        if known is not None and known.time is not None:  # a recording's pass told again: its figures' time
            when = known.time
        if known is not None and not grads:  # ... and its gradients' statistics, which the story does not retell
            grads = known.grads
        self.add(
            SeriesPoint(
                point.index, point.loss, point.grad_norm, point.nonfinite, point.modules, point.params, grads, when
            )
        )
        if grads:
            self._with_grads.append(index)
            while len(self._with_grads) > GRAD_POINTS:  # the oldest keep their norms only
                old = point_at(self.points, self._with_grads.popleft())
                if old is not None and old.grads:
                    self.points[self.points.index(old)] = replace(old, grads=())

    def _placed(self, grads: Iterable[tuple[str, Stats | None]]) -> tuple[Stats | None, ...]:
        """Statistics by parameter name, at the parameters' positions in `names`."""
        out: list[Stats | None] = [None] * len(self.names)
        for name, stats in grads:
            at = self.names.setdefault(name, len(self.names))
            out.extend([None] * (at + 1 - len(out)))
            out[at] = stats
        while out and out[-1] is None:
            out.pop()
        return tuple(out)

    def load(self, figures: Iterable[Any]) -> None:
        """A recording's figures (`reader.PassFigures`) of the whole run, before its story: the
        passes it read (evenly spread, the first non-finite ones, the last), in pass order."""
        for f in figures:
            point = _point(f.index, f.losses, f.norms, f.nonfinite, self.names)
            self.points.append(
                SeriesPoint(
                    f.index,
                    point.loss,
                    f.grad_norm,
                    f.nonfinite,
                    point.modules,
                    point.params,
                    (),
                    getattr(f, "started", None),
                )
            )
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
            self.points = [
                p for i, p in enumerate(self.points) if i % 2 == 0 or p.nonfinite or i == len(self.points) - 1
            ]

    def top_modules(self, count: int) -> list[str]:
        """The `count` modules with the largest finite gradient norm in any kept pass, largest first."""
        best: dict[str, float] = {}
        for point in self.points:
            for module, norm in point.modules.items():
                if math.isfinite(norm) and norm > best.get(module, -1.0):
                    best[module] = norm
        return sorted(best, key=lambda m: (-best[m], m))[:count]

    def norm_of(self, point: SeriesPoint, name: str) -> float | None:
        """The gradient norm of parameter or module `name` at `point` (None: it had none)."""
        at = self.names.get(name)
        if at is None:
            return point.modules.get(name)
        value = point.params[at] if at < len(point.params) else ABSENT
        return None if value == ABSENT else value

    def add_stats(self, name: str, found: dict[int, Stats]) -> None:
        """Parameter `name`'s gradient statistics by pass index (a recording's, read when the
        gradients view looks at it), put on the points of those passes."""
        if not found:
            return
        at = self.names.setdefault(name, len(self.names))
        for i, point in enumerate(self.points):
            stats = found.get(point.index)
            if stats is not None:
                grads = list(point.grads) + [None] * (at + 1 - len(point.grads))
                grads[at] = stats
                self.points[i] = replace(point, grads=tuple(grads))
        self.version += 1

    def stats_of(self, point: SeriesPoint, name: str) -> Stats | None:
        """The gradient statistics of parameter `name` at `point` (None: the pass had none)."""
        at = self.names.get(name)
        return point.grads[at] if at is not None and at < len(point.grads) else None

    def choices(self) -> list[str]:
        """What the norm plot can show instead of all parameters together: every module, largest
        gradient norm first, then every parameter in the order first seen."""
        modules = self.top_modules(len(self.names) + 1)
        return modules + [name for name in self.names if name not in modules]

    def subject(self, param: str | None, module: str | None) -> str | None:
        """What a node's norm plot would be: its parameter (an AccumulateGrad's) if the series has
        it, else its module, matched to the series' module paths (the node list leads a path with
        the root's variable, `model.fc1`, where parameter names may not: `fc1.weight`)."""
        if param is not None and param in self.names:
            return param
        if not module:
            return None
        known = {module_of(name) for name in self.names}
        matches = [m for m in known if module == m or module.endswith("." + m)]
        return max(matches, key=len, default=None)
