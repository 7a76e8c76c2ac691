"""The gradient flow table's model: which parameters stand out, and a log-scale bar. No Textual.

`PassFinished.flow` comes sorted from vanishing to exploding. A row is flagged
- `non-finite` when its gradient holds nan or inf,
- `no grad` when the parameter got no gradient,
- `vanishing` when its ratio (grad norm / weight norm) is zero, below `TINY`, or more than
  `SPREAD` times below the median ratio,
- `zero weight` when the weight itself is all zeros (a zero-initialised bias): its ratio is
  infinite, which says nothing about the gradient, so it is neither exploding nor compared,
- `exploding` when its ratio is above `HUGE`, or more than `SPREAD` times above the median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gradtui.protocol.events import ParamFlow
from gradtui.protocol.flowtext import zero_weight

TINY = 1e-8
HUGE = 10.0
SPREAD = 100.0

BAR_WIDTH = 12
"""Cells of the log-scale ratio bar."""


@dataclass(frozen=True, slots=True)
class FlowRow:
    """One parameter's row: the ParamFlow, its flag (empty when unremarkable), its bar."""

    flow: ParamFlow
    flag: str
    bar: str


def flag_of(row: ParamFlow, median: float | None) -> str:
    """The flag of one row given the median finite positive ratio (see module doc)."""
    if row.nonfinite or (row.grad_norm is not None and not math.isfinite(row.grad_norm)):
        return "non-finite"
    if row.ratio is None:
        return "no grad"
    if zero_weight(row):
        return "zero weight"
    if not math.isfinite(row.ratio) or row.ratio > HUGE or (median and row.ratio > median * SPREAD):
        return "exploding"
    if row.ratio < TINY or (median and row.ratio < median / SPREAD):
        return "vanishing"
    return ""


def flow_rows(flow: Sequence[ParamFlow]) -> list[FlowRow]:
    """Rows with flags and bars; bars place log10(ratio) between the smallest and largest ratio."""
    finite = [r.ratio for r in flow if r.ratio is not None and math.isfinite(r.ratio) and r.ratio > 0]
    median = statistics.median(finite) if finite else None
    low = math.log10(min(finite)) if finite else 0.0
    high = math.log10(max(finite)) if finite else 0.0
    rows = []
    for row in flow:
        bar = ""
        if row.ratio is not None and math.isfinite(row.ratio) and row.ratio > 0:
            share = 1.0 if high == low else (math.log10(row.ratio) - low) / (high - low)
            bar = "█" * max(1, round(share * BAR_WIDTH))
        elif row.ratio is not None and not math.isfinite(row.ratio) and row.weight_norm != 0:
            bar = "█" * BAR_WIDTH
        rows.append(FlowRow(row, flag_of(row, median), bar))
    return rows
