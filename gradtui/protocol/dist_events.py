"""Events only a torchrun job has: the state of every rank, for the rank strip and `ranks`.

Plain frozen msgspec Structs like gradtui.protocol.events (the wire codec knows them too).
"""

from __future__ import annotations

import msgspec

from gradtui.protocol.events import Event, ParamFlow
from gradtui.protocol.stats import format_number


class RankState(msgspec.Struct, frozen=True):
    """One rank as the job hub last heard of it."""

    rank: int
    state: str
    """`starting`, `running`, `paused` (its own pause), `parked` (held for another rank's pause),
    `waiting` (held at the gate before a node), `done`, `dead`."""
    at: str = ""
    """Where: `pass 3 · #17 MulBackward0`, or how it ended."""
    loss: float | None = None
    """The loss of its last pass (the first scalar root)."""
    nonfinite: int = 0
    """Non-finite gradient elements in its last pass's parameter gradients."""
    pid: int | None = None


class RanksChanged(Event, msgspec.Struct, frozen=True):
    """The ranks of the job now, and which one the client is shown (`rank N` switches)."""

    ranks: tuple[RankState, ...]
    shown: int
    world: int


def format_ranks(event: RanksChanged) -> list[str]:
    """`ranks` as text lines, the shown rank marked."""
    lines = []
    for r in event.ranks:
        loss = f" · loss {r.loss:.6g}" if r.loss is not None else ""
        bad = f" · {r.nonfinite} non-finite" if r.nonfinite else ""
        mark = "*" if r.rank == event.shown else " "
        lines.append(f"{mark} rank {r.rank}: {r.state}{f' at {r.at}' if r.at else ''}{loss}{bad}")
    return lines


class RankWaiting(Event, msgspec.Struct, frozen=True):
    """A rank has waited a while at a node's gate for these ranks (sent by the rank to the hub)."""

    pass_index: int
    node: int
    waiting_for: tuple[int, ...]


def flow_table(flows: dict[int, tuple[ParamFlow, ...]], world: int) -> list[str]:
    """`flow` on a job: per parameter, its gradient norm on every rank and their spread (max - min)."""
    names: dict[str, dict[int, float | None]] = {}
    for rank, rows in flows.items():
        for row in rows:
            names.setdefault(row.name, {})[rank] = row.grad_norm
    if not names:
        return ["no gradient flow yet: no backward pass has finished"]
    lines = [
        "gradient norm per rank (spread = max - min):",
        "  " + "parameter".ljust(24) + "".join(f"rank {r}".rjust(12) for r in range(world)) + "spread".rjust(12),
    ]
    for name, norms in names.items():
        values = [norms.get(r) for r in range(world)]
        known = [v for v in values if v is not None]
        spread = max(known) - min(known) if len(known) > 1 else None
        lines.append(
            "  "
            + name[:24].ljust(24)
            + "".join(format_number(v).rjust(12) for v in values)
            + format_number(spread).rjust(12)
        )
    return lines
