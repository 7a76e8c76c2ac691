"""The gradient flow table as text (headless output, the `flow` command, replay). No torch
here: a client formats the ParamFlow rows it received."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gradtui.protocol.events import ParamFlow


def zero_weight(row: ParamFlow) -> bool:
    """Is the weight all zeros with a finite gradient (a zero-initialised bias at step 0)? Its
    ratio grad / 0 says nothing about the gradient: it has no ratio, and is not "exploding"."""
    return (
        row.weight_norm == 0
        and row.ratio is not None
        and not row.nonfinite
        and (row.grad_norm is None or math.isfinite(row.grad_norm))
    )


def flow_order(row: ParamFlow) -> tuple[int, float]:
    """The flow table's sort key: parameters with no gradient first, then those of a zero weight
    (by grad norm: they have no ratio), then by ratio, non-finite last."""
    if row.ratio is None:
        return (0, 0.0)
    if zero_weight(row):
        return (1, row.grad_norm or 0.0)
    if row.nonfinite or not math.isfinite(row.ratio):
        return (3, 0.0)
    return (2, row.ratio)


def ratio_text(row: ParamFlow) -> str:
    """The ratio as the table writes it: `-` without a gradient, `w=0` for a zero weight."""
    if row.ratio is None:
        return "-"
    return "w=0" if zero_weight(row) else f"{row.ratio:.3g}"


def format_flow(flow: Sequence[ParamFlow], limit: int | None = None) -> list[str]:
    """Readable lines of a gradient flow table (headless output, `flow` command); a zero weight's
    ratio is `w=0` (see `zero_weight`), a note under the table says so."""
    if not flow:
        return []
    rows = list(flow)
    hidden = 0
    if limit is not None and len(rows) > limit:
        hidden = len(rows) - limit
        half = limit // 2
        rows = rows[:half] + rows[len(rows) - (limit - half) :]
    width = max(len(r.name) for r in rows)
    lines = [f"{'param':<{width}}  {'grad norm':>10}  {'weight norm':>11}  {'ratio':>9}  nonfinite"]
    for i, r in enumerate(rows):
        if hidden and limit is not None and i == limit // 2:
            lines.append(f"{'...':<{width}}  ({hidden} more)")
        g = "None" if r.grad_norm is None else f"{r.grad_norm:.4g}"
        ratio = ratio_text(r)
        lines.append(f"{r.name:<{width}}  {g:>10}  {r.weight_norm:>11.4g}  {ratio:>9}  {r.nonfinite}")
    if any(zero_weight(r) for r in rows):
        lines.append("w=0: a zero weight (a zero-initialised bias): no ratio, listed apart")
    return lines


def flow_answer(index: int, flow: Sequence[ParamFlow]) -> str:
    """The answer to `flow` (a live run's last pass, a replay's shown pass, `flow N`): pass
    `index`'s table under one heading."""
    return "\n".join([f"gradient flow after pass {index}:", *format_flow(flow)])
