"""Tensor statistics as plain data (`Stats`), and how they are printed.

No torch here: clients (the UI, a browser tab, `gradtui attach`) receive Stats over the wire
and format them without importing torch (which costs them seconds of start-up);
gradtui.engine.stats.summary computes them from tensors.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

VALUES_LIMIT = 64
"""A tensor with at most this many elements has all of them in `Stats.values`."""

PREVIEW_LENGTH = 8
"""How many leading values a big tensor shows in `Stats.preview`."""

HISTOGRAM_BINS = 16


class Stats(msgspec.Struct, frozen=True, gc=False):
    """Statistics of one tensor: numbers and strings only, safe to send across threads.

    Immutable and hashable by value. A msgspec Struct: made in C, a tenth of the time a
    Python `__init__` takes (a pass makes one per gradient, ~850 for a 12-layer encoder), and
    untracked by the garbage collector (it holds only numbers, strings and tuples of them, so
    it can be in no cycle).
    """

    shape: tuple[int, ...]
    dtype: str
    device: str
    norm: float
    min: float | None
    max: float | None
    mean: float | None
    """min, max and mean are None in light stats (only the norm was taken, see `summarize`)."""
    nonfinite: int
    values: tuple[float, ...] | None = None
    preview: tuple[float, ...] = ()
    """The first values: always for small tensors, for big ones only in a pause's stats."""
    histogram: tuple[int, ...] | None = None
    unreadable: str | None = None
    """Why the values could not be read (a meta or fake tensor has none); then norm is NaN,
    min, max and mean are None and nonfinite is 0."""
    finite_range: tuple[float, float] | None = None
    """The finite values' min and max, where min and max are not finite (a NaN propagates into
    both) and some values are: taken with the histogram (a pause's statistics), else None."""

    def reshaped(self, shape: tuple[int, ...]) -> Stats:
        """The same statistics for the same elements seen in another shape (a view's gradient)."""
        return msgspec.structs.replace(self, shape=shape)

    def negated(self) -> Stats:
        """The statistics of -x from those of x, exactly: the same norm and non-finite count, min
        and max swapped and negated, the mean and values negated (IEEE negation is exact, and a
        sum of negated values is the negated sum). An empty or unreadable gradient's stay as they
        are (a hook reads 0.0, not -0.0, of an empty one). No histogram: its bin edges would not
        follow exactly."""
        if self.unreadable is not None or not self.numel:
            return self
        lo, hi, mean, values = self.min, self.max, self.mean, self.values
        return full_stats(
            self.shape,
            self.dtype,
            self.device,
            self.norm,
            None if hi is None else -hi,
            None if lo is None else -lo,
            None if mean is None else -mean,
            self.nonfinite,
            None if values is None else tuple([-v for v in values]),
            tuple([-v for v in self.preview]),
            None,
            None if self.finite_range is None else (-self.finite_range[1], -self.finite_range[0]),
        )

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def to_json(self) -> dict[str, Any]:
        """The report's STATS object (docs/recording.md); `values` only when the tensor is small."""
        out: dict[str, Any] = {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "device": self.device,
            "norm": json_float(self.norm),
            "min": json_float(self.min),
            "max": json_float(self.max),
            "mean": json_float(self.mean),
            "nonfinite": self.nonfinite,
        }
        if self.unreadable is not None:
            out["norm"] = None
            out["unreadable"] = self.unreadable
        if self.values is not None:
            out["values"] = [json_float(v) for v in self.values]
        return out


# NOTE: the factories below are the only places a Stats is made (tests/protocol/test_one_statistic.py
# checks it): the engine's hooks, the bulk window, the quick reads, the compiled posthooks and a
# recording's rows all come here. `full_stats` is the one that takes every statistic, each
# parameter named as its field: the engine's Python reads call it by position (once per gradient
# on the hot path, where a keyword call costs more: gradtui.engine.stats.measures writes those calls
# from this signature and its description of the measured statistics), the compiled posthooks and a
# recording's rows by field name (gradtui/engine/hooks/native/records.h's `MEASURED`,
# gradtui.record.schema's `GRAD_STATS`). A new statistic is a new field above with a default of None
# (not taken), a parameter of `full_stats` derived here or measured (a line of the engine's
# description and of the compiled table), a column of the recording's `GRAD_STATS` and a line of
# the detail pane (docs/contributing.md, "A statistic").


def full_stats(
    shape: tuple[int, ...],
    dtype: str,
    device: str,
    norm: float,
    min: float | None,
    max: float | None,
    mean: float | None,
    nonfinite: int,
    values: tuple[float, ...] | None = None,
    preview: tuple[float, ...] = (),
    histogram: tuple[int, ...] | None = None,
    finite_range: tuple[float, float] | None = None,
) -> Stats:
    """A readable tensor's statistics: the norm, min, max and mean (None for any not taken), the
    count of non-finite elements, and the values, preview, histogram and the finite values'
    range where read. Each parameter is named as its field, so callers that hold statistics by
    name (the compiled posthooks, a recording's row) call it by keyword."""
    return Stats(shape, dtype, device, norm, min, max, mean, nonfinite, values, preview, histogram, None, finite_range)


def light_stats(shape: tuple[int, ...], dtype: str, device: str, norm: float, nonfinite: int) -> Stats:
    """Light statistics: only the norm (and the non-finite count) were taken."""
    return Stats(shape, dtype, device, norm, None, None, None, nonfinite)


def empty_stats(shape: tuple[int, ...], dtype: str, device: str) -> Stats:
    """A tensor with no elements: every statistic is 0, its values the empty tuple."""
    return Stats(shape, dtype, device, 0.0, 0.0, 0.0, 0.0, 0, ())


def unreadable_stats(shape: tuple[int, ...], dtype: str, device: str, why: str) -> Stats:
    """A tensor whose values cannot be read (a meta or fake tensor, a gradient already gone):
    the norm is NaN, the rest None, and `why` says why."""
    return Stats(shape, dtype, device, math.nan, None, None, None, 0, unreadable=why)


def small_stats(shape: tuple[int, ...], dtype: str, device: str, values: tuple[float, ...]) -> Stats:
    """Stats of a tensor small enough to list its values: all of them from the values (the
    window's reads, the planned hooks' and derived statistics share it, so they agree)."""
    numel = len(values)
    total = sum(values)
    nonfinite = 0 if math.isfinite(total) else sum(1 for v in values if not math.isfinite(v))
    if nonfinite and any(math.isnan(v) for v in values):
        lo = hi = norm = math.nan  # as torch's min, max and norm: a NaN propagates
    else:
        lo, hi = min(values), max(values)
        norm = math.hypot(*values)  # an infinity makes it infinite; no overflow on finite values
    return Stats(shape, dtype, device, norm, lo, hi, total / numel, nonfinite, values, values[:PREVIEW_LENGTH])


def json_float(value: float | None) -> float | str | None:
    """JSON has no NaN or infinity: spell them as strings so the report stays valid JSON."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def any_nonfinite(grads: tuple[Stats | None, ...]) -> bool:
    """Does any of these gradients hold a NaN or an infinity?"""
    return any(s is not None and s.nonfinite for s in grads)


def format_number(value: float | None) -> str:
    """Compact number: 4 significant digits, `nan`/`inf` spelled out, `-` when not recorded."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def format_grads(grads: tuple[Stats | None, ...], phase: str) -> list[str]:
    """`in[0] [1] float32 cpu  norm 12 ...` per gradient of a pause (`out[i]` after a node ran)."""
    label = "in" if phase == "before" else "out"
    return [f"{label}[{i}] {format_stats(s)}" for i, s in enumerate(grads)]


def format_stats(stats: Stats | None) -> str:
    """A one-line human summary, as headless mode and the UI print it."""
    if stats is None:
        return "None"
    shape = "[" + ", ".join(str(d) for d in stats.shape) + "]"
    if stats.unreadable is not None:
        return f"{shape} {stats.dtype} {stats.device}  no values: {stats.unreadable}"
    parts = [
        f"{shape} {stats.dtype} {stats.device}",
        f"norm {format_number(stats.norm)}",
        f"min {format_number(stats.min)}",
        f"max {format_number(stats.max)}",
        f"mean {format_number(stats.mean)}",
    ]
    if stats.nonfinite:
        parts.append(f"nonfinite {stats.nonfinite}")
    shown = stats.values if stats.values is not None and len(stats.values) <= PREVIEW_LENGTH else None
    if shown is not None:
        parts.append("values [" + ", ".join(format_number(v) for v in shown) + "]")
    return "  ".join(parts)
