"""Events only a torchrun job has: the state of every rank, for the rank strip and `ranks`.

Plain frozen dataclasses like gradtui.core.events (the wire codec knows them too).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradtui.core.events import Event


@dataclass(frozen=True, slots=True)
class RankState:
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


@dataclass(frozen=True, slots=True)
class RanksChanged(Event):
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


@dataclass(frozen=True, slots=True)
class RankWaiting(Event):
    """A rank has waited a while at a node's gate for these ranks (sent by the rank to the hub)."""

    pass_index: int
    node: int
    waiting_for: tuple[int, ...]
