"""A gradient's statistics as the detail pane's lines: shape; norm, mean, non-finite count; min,
histogram, max (the histogram doubled, or on its own line, by the room there is); the first values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from textual.content import Content

from gradtui.protocol.stats import Stats, format_number
from gradtui.ui import fmt
from gradtui.ui.passview import Grads
from gradtui.ui.widgets.detail_text import ACCENT, ERROR, KEY, MUTED, OK, bad, line


def grads_lines(grads: Grads, hist: Grads | None, label: str, width: int) -> Iterable[Content]:
    """Each gradient of a node's slots (`label[i]` above each when there are several), in `width` cells."""
    for i, stats in enumerate(grads):
        if len(grads) > 1:
            yield Content.styled(f"  {label}[{i}]", MUTED)
        yield from grad_lines(stats, hist[i] if hist is not None and i < len(hist) else None, "  ", width)


def grad_lines(stats: Stats | None, hist: Stats | None, indent: str, width: int) -> Iterable[Content]:
    """Shape; norm, mean, non-finite; min, histogram, max; the first values (see module doc)."""
    if stats is None:
        yield line(indent, ("None (no gradient)", MUTED))
        return
    yield line(indent, (fmt.shape_text(stats), KEY))
    nonfinite = (str(stats.nonfinite), f"bold {ERROR}" if stats.nonfinite else OK)
    if stats.min is None:  # light stats: the node ran while the engine was running on
        yield bad(line(indent, ("norm ", MUTED), format_number(stats.norm), ("  non-finite ", MUTED), nonfinite))
        yield line(indent, ("min max mean: recorded when stepping or with --report", MUTED))
        return
    yield bad(
        line(
            indent,
            ("norm ", MUTED),
            format_number(stats.norm),
            ("  mean ", MUTED),
            format_number(stats.mean),
            ("  non-finite ", MUTED),
            nonfinite,
        )
    )
    yield from _range(stats, hist, indent, width)
    if stats.values or stats.preview or not stats.numel:  # no values known: no `[… 512 more]`
        yield bad(line(indent, ("values ", MUTED), fmt.values_text(stats)))


def finite_range(stats: Stats) -> tuple[float, float] | None:
    """The min and max of a gradient's finite values when some of its values are not (its own
    min and max are then nan or infinite): a pause's statistics carry them, a small gradient's
    values give them; None when there is none or they are not known."""
    if not stats.nonfinite:
        return None
    if stats.finite_range is not None:
        return stats.finite_range
    finite = [v for v in stats.values or () if math.isfinite(v)]
    return (min(finite), max(finite)) if finite else None


def _range(stats: Stats, hist: Stats | None, indent: str, width: int) -> Iterable[Content]:
    """`min -1.2 ▁▃█▅▂ 3.4 max`, or the numbers alone when the values are few. Beside a non-finite
    count, the finite values' min and max (`min nan max nan` said nothing), or why they are not shown."""
    bars = fmt.sparkline(hist.histogram) if hist is not None and hist.histogram else ""
    finite = finite_range(stats)
    if stats.nonfinite and finite is None:
        if stats.nonfinite == stats.numel:
            yield line(indent, ("min max ", MUTED), ("none: no value is finite", f"bold {ERROR}"))
        else:
            yield line(indent, ("min max ", MUTED), ("not read for the finite values alone here", MUTED))
        return
    low, high = (
        (format_number(stats.min), format_number(stats.max))
        if finite is None
        else (format_number(finite[0]), format_number(finite[1]))
    )
    note = "  (finite values)" if finite is not None else ""
    if not bars or stats.numel <= fmt.PREVIEW_LIMIT:
        yield bad(line(indent, ("min ", MUTED), low, ("  max ", MUTED), high, (note, MUTED)))
        return
    # 10 for "min ", " max" and two spaces; 2 more in case a scrollbar appears later
    room = width - len(indent) - len(low) - len(high) - 12 - len(note)
    if room >= 2 * len(bars):
        bars = "".join(bar * 2 for bar in bars)
    if room >= len(bars):
        yield bad(line(indent, ("min ", MUTED), low, " ", (bars, ACCENT), " ", high, (" max" + note, MUTED)))
    else:  # narrow: numbers, then the histogram on its own line
        yield bad(line(indent, ("min ", MUTED), low, ("  max ", MUTED), high))
        yield line(indent, (bars, ACCENT), (note, MUTED))
