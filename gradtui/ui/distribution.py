"""A parameter's gradient distribution over passes, from what the series keeps (plain Python, no
Textual): TensorBoard's "distributions" (quantile bands) and its "histograms" (one histogram per
pass, over time), for the gradients view (gradtui.ui.screens.gradients).

A pass's quantiles are TensorBoard's nine (its basis points 0, 668, 1587, 3085, 5000, 6915, 8413,
9332, 10000: min, the mean -1.5, -1, -0.5 standard deviations, the median, +0.5, +1, +1.5, max
for a normal distribution). They are exact where gradtui kept the gradient's values (at most 64
elements); for a bigger gradient gradtui keeps min, max, mean and norm only, so its quantiles are
the normal approximation mean + k·std (std from the norm and the mean), clipped to [min, max],
and `Band.exact` is False. A pass without full statistics (unhooked, or light statistics
between pauses), or with a non-finite gradient, has no band.

A module's distribution is that of all its parameters' gradient elements together: min and max
over them, the mean weighted by their sizes, the norm from theirs, and the values when every one
was kept; a pass where one of them has no statistics has none for the module.

The histogram over time bins each pass's values into `rows` equal bins over the range of every
pass shown (exact counts); a pass without kept values has only its range and mean (`Column.counts`
is None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gradtui.protocol.stats import Stats, full_stats
from gradtui.ui.series import PassSeries, SeriesPoint, module_of

BASIS_POINTS = (0, 668, 1587, 3085, 5000, 6915, 8413, 9332, 10000)
"""TensorBoard's compressed-histogram quantiles, in basis points."""

SIGMAS = (-math.inf, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, math.inf)
"""The standard deviations of a normal distribution at BASIS_POINTS (min and max at the ends)."""


@dataclass(frozen=True, slots=True)
class Band:
    """One pass's quantiles (BASIS_POINTS order) of a parameter's gradient."""

    index: int
    time: float | None
    quantiles: tuple[float, ...]
    exact: bool
    """True: from the kept values; False: the normal approximation from the moments."""


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile of sorted values, linear between the two nearest (numpy's default)."""
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def usable(stats: Stats | None) -> bool:
    """Whether a gradient's statistics can make a band: full (min, max, mean) and finite."""
    return (
        stats is not None
        and stats.unreadable is None
        and stats.min is not None
        and stats.max is not None
        and stats.mean is not None
        and not stats.nonfinite
        and stats.numel > 0
        and all(math.isfinite(v) for v in (stats.min, stats.max, stats.mean, stats.norm))
    )


def std_of(stats: Stats) -> float:
    """The standard deviation of the elements, from the norm and the mean (population)."""
    assert stats.mean is not None
    return math.sqrt(max(0.0, stats.norm * stats.norm / stats.numel - stats.mean * stats.mean))


def quantiles_of(stats: Stats) -> tuple[tuple[float, ...], bool]:
    """The nine quantiles of a usable gradient (module doc), and whether they are exact."""
    assert stats.min is not None and stats.max is not None and stats.mean is not None
    if stats.values is not None and stats.values:
        ordered = sorted(stats.values)
        return tuple(_quantile(ordered, bp / 10000) for bp in BASIS_POINTS), True
    std = std_of(stats)
    out = [
        stats.min
        if k == -math.inf
        else stats.max
        if k == math.inf
        else min(stats.max, max(stats.min, stats.mean + k * std))
        for k in SIGMAS
    ]
    return tuple(out), False


def members(series: PassSeries, name: str) -> list[str]:
    """The parameters whose gradients make `name`'s distribution: itself if it is a parameter,
    else the parameters of module `name`."""
    if name in series.names:
        return [name]
    return [param for param in series.names if module_of(param) == name]


def combined(parts: list[Stats]) -> Stats:
    """The statistics of the elements of several usable gradients together (module doc)."""
    count = sum(s.numel for s in parts)
    values = None
    if all(s.values is not None for s in parts):
        values = tuple(v for s in parts for v in s.values or ())
    return full_stats(
        (count,),
        parts[0].dtype,
        parts[0].device,
        math.sqrt(sum(s.norm * s.norm for s in parts)),
        min(s.min for s in parts if s.min is not None),
        max(s.max for s in parts if s.max is not None),
        sum((s.mean or 0.0) * s.numel for s in parts) / count,
        0,
        values,
    )


def stats_at(series: PassSeries, point: SeriesPoint, name: str) -> Stats | None:
    """The gradient statistics of parameter or module `name` at `point` (None: not all known)."""
    if name in series.names:
        return series.stats_of(point, name)
    parts = [series.stats_of(point, param) for param in members(series, name)]
    if not parts or not all(usable(p) for p in parts):
        return None
    return combined([p for p in parts if p is not None])


def bands(series: PassSeries, name: str) -> list[Band]:
    """Parameter or module `name`'s band at every pass of the series that has one, in pass order."""
    out = []
    for point in series.points:
        stats = stats_at(series, point, name)
        if usable(stats):
            assert stats is not None
            quantiles, exact = quantiles_of(stats)
            out.append(Band(point.index, point.time, quantiles, exact))
    return out


@dataclass(frozen=True, slots=True)
class Column:
    """One pass of the histogram over time: its bin counts (bin 0 the lowest), or, when its values
    were not kept, only its range and mean (`counts` None)."""

    index: int
    counts: tuple[int, ...] | None
    low: float
    high: float
    mean: float


@dataclass(frozen=True, slots=True)
class HistogramOverTime:
    """Every pass's column over one value range split into `len(edges) - 1` equal bins."""

    columns: tuple[Column, ...]
    edges: tuple[float, ...]

    def bin_of(self, value: float) -> int:
        """The bin `value` falls in (the last bin includes the top edge)."""
        rows = len(self.edges) - 1
        low, high = self.edges[0], self.edges[-1]
        if high <= low:
            return 0
        return min(rows - 1, max(0, int((value - low) / (high - low) * rows)))


def histogram_over_time(series: PassSeries, name: str, rows: int) -> HistogramOverTime:
    """Parameter or module `name`'s gradient per pass, binned into `rows` bins over every pass's range."""
    kept: list[tuple[int, Stats]] = [
        (point.index, stats)
        for point in series.points
        if (stats := stats_at(series, point, name)) is not None and usable(stats)
    ]
    if not kept or rows < 1:
        return HistogramOverTime((), ())
    low = min(s.min for _, s in kept if s.min is not None)
    high = max(s.max for _, s in kept if s.max is not None)
    edges = tuple(low + (high - low) * i / rows for i in range(rows + 1))
    shape = HistogramOverTime((), edges)
    columns = []
    for index, stats in kept:
        assert stats.min is not None and stats.max is not None and stats.mean is not None
        counts = None
        if stats.values is not None:
            bins = [0] * rows
            for v in stats.values:
                bins[shape.bin_of(v)] += 1
            counts = tuple(bins)
        columns.append(Column(index, counts, stats.min, stats.max, stats.mean))
    return HistogramOverTime(tuple(columns), edges)
