"""What the UI remembers of passes that have ended, in bounded memory.

A training loop may run 10,000 passes; the UI keeps
- the full `PassView` of the last `KEEP_VIEWS` passes (fewer when they are huge: at most
  `KEEP_NODES` nodes in all), so the user can browse their per-node statistics;
- a one-line `PassSummary` (index, call, losses, recorded) of the last `KEEP_SUMMARIES` passes;
- per recorded pass, the incoming-gradient norm of every node, as one float array indexed by
  node id, for the last `KEEP_NORMS` recorded passes: the sparkline of a node over passes.

Nodes are matched across passes by (node id, op name): ids are breadth-first discovery order,
so they are stable when the graph has the same shape every iteration.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gradtui.protocol.stats import Stats

KEEP_VIEWS = 20
"""Full views of at most this many passes are kept (the live one included)."""

KEEP_NODES = 60_000
"""...and at most this many nodes in all (the last two passes are always kept)."""

KEEP_SUMMARIES = 1000
"""One-line summaries of at most this many passes are kept."""

KEEP_NORMS = 60
"""Per-node norm arrays of at most this many recorded passes are kept (the sparkline's length)."""

MISSING = -1.0
"""A norm array's value for a node that never received a gradient (norms are >= 0, or nan)."""


def combined_norm(grads: Iterable[Stats | None] | None) -> float | None:
    """The L2 norm of several gradients taken together: sqrt of the sum of their squared norms."""
    if grads is None:
        return None
    total, seen = 0.0, False
    for stats in grads:
        if stats is not None:
            total += stats.norm * stats.norm
            seen = True
    return math.sqrt(total) if seen else None


@dataclass(frozen=True, slots=True)
class PassSummary:
    """One line about a pass: which it was, its loss, whether it was recorded, how it ended."""

    index: int
    call_text: str
    losses: tuple[float | None, ...]
    recorded: bool
    nodes: int
    error: str | None = None
    nonfinite: int = 0
    """Nodes (a recorded pass) or leaves (an unhooked one) that saw a non-finite gradient."""
    finished: bool = False
    kept: bool = True
    """False: a recording's pass that ran hooked but whose node statistics were not kept."""
    difference: float | None = None
    """Against a reference: the pass's largest relative difference from it (None: none known)."""
    against: bool = False
    """Was the pass compared with a reference (its differences came)?"""
    drawn: bool = True
    """False: a live pass the agent sent without its graph, as it ran while the UI drew an earlier
    one (gradtui.agent.server): its loss and size only, no node data."""


@dataclass(frozen=True, slots=True)
class NormRecord:
    """Incoming-gradient norms of every node of one recorded pass."""

    index: int
    names: tuple[str, ...]
    """Op name per node id (shared between passes of the same shape)."""
    norms: array
    """Norm per node id, MISSING where no gradient arrived."""


class NormHistory:
    """Per-node incoming norms over the last `KEEP_NORMS` recorded passes (see module doc)."""

    def __init__(self, keep: int = KEEP_NORMS) -> None:
        self.records: deque[NormRecord] = deque(maxlen=keep)

    def add(self, index: int, names: tuple[str, ...], norms: dict[int, float | None]) -> None:
        """Remember the norms of pass `index` (`names[i]` is node i's op name)."""
        if self.records and self.records[-1].names == names:
            names = self.records[-1].names  # one tuple for every pass of the same shape
        values = array("f", [MISSING]) * len(names)
        for node, norm in norms.items():
            if norm is not None and 0 <= node < len(names):
                values[node] = norm
        self.records.append(NormRecord(index, names, values))

    def series(self, node: int, name: str) -> list[tuple[int, float | None]]:
        """(pass index, norm or None) for every kept pass in which node `node` was a `name`."""
        out = []
        for record in self.records:
            if node < len(record.names) and record.names[node] == name:
                value = record.norms[node]
                out.append((record.index, None if value == MISSING else float(value)))
        return out
