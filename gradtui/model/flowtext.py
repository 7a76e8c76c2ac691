"""The gradient flow table as text (headless output, the `flow` command, replay). No torch
here: a client formats the ParamFlow rows it received."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gradtui.model.events import ParamFlow


def flow_order(row: ParamFlow) -> tuple[int, float]:
    """The flow table's sort key: parameters with no gradient first, then by ratio, non-finite last."""
    if row.ratio is None:
        return (0, 0.0)
    if row.nonfinite or not math.isfinite(row.ratio):
        return (2, 0.0)
    return (1, row.ratio)


def format_flow(flow: Sequence[ParamFlow], limit: int | None = None) -> list[str]:
    """Readable lines of a gradient flow table (headless output, `flow` command)."""
    if not flow:
        return []
    rows = list(flow)
    hidden = 0
    if limit is not None and len(rows) > limit:
        hidden = len(rows) - limit
        half = limit // 2
        rows = rows[:half] + rows[len(rows) - (limit - half):]
    width = max(len(r.name) for r in rows)
    lines = [f"{'param':<{width}}  {'grad norm':>10}  {'weight norm':>11}  {'ratio':>9}  nonfinite"]
    for i, r in enumerate(rows):
        if hidden and limit is not None and i == limit // 2:
            lines.append(f"{'...':<{width}}  ({hidden} more)")
        g = "None" if r.grad_norm is None else f"{r.grad_norm:.4g}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.3g}"
        lines.append(f"{r.name:<{width}}  {g:>10}  {r.weight_norm:>11.4g}  {ratio:>9}  {r.nonfinite}")
    return lines
