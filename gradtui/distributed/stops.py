"""What the job hub knows of each rank, and which of a rank's pauses belong to a stop already resumed.

A rank's events reach the hub late: over its connection, after the client may already have
resumed the stop they belong to. So the hub cannot take every `Paused` it hears for a new stop
of the job. It keeps, per rank, the last park order it sent (a parked pause is the job's only
while that order stands: the `unpark` that followed it resumed the rank already) and, for a rank
it had not heard pause when the client resumed, that resume (`Pending`): a pause of the stop
the client resumed (a step pause, a breakpoint at the same node, the same pass's diverge hold)
is ended (or just let go) unseen, parking nobody; any other is a new stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command
from gradtui.protocol.dist_events import RankState, RankWaiting

PARKED = "parked"
"""How a parked rank's pause reason starts."""

HOLD = "breakpoint diverge: "
"""How the reason of a diverge hold (gradtui.distributed.checks, after a pass) starts."""


def is_hold(pause: ev.Paused | None) -> bool:
    """Is `pause` a diverge hold (every rank holds after the same pass; they resume through the
    job's store, so a hold parks no other rank and is never sent a command to resume)?"""
    return pause is not None and pause.reason.startswith(HOLD)


def resume_holds(store: Any, index: int, mode: str) -> None:
    """Resume every rank's diverge hold after pass `index` as `mode` ("continue" or "step"): the
    job's store says so (`vr/PASS`, which every held rank reads); nothing if the store is gone."""
    try:
        store.set(f"vr/{index}", mode)
    except Exception:  # noqa: BLE001 - the job's store is gone: the job is ending
        pass


def is_parked(pause: ev.Paused) -> bool:
    """Is `pause` a park (the rank waits because another is paused)?"""
    return pause.reason.startswith(PARKED)


@dataclass(frozen=True)
class Pending:
    """A resuming command typed while the rank was running: `command`, and the stop it resumed
    (the pause the client saw, or None: no rank was paused, as when a client detaches)."""

    command: Command
    stop: ev.Paused | None

    def ends(self, pause: ev.Paused) -> bool:
        """Does `pause` (the rank's own, heard after this resume) belong to the stop resumed?"""
        if pause.reason == "step":
            return True  # the rank was on its way to the step pause the command ended
        stop = self.stop
        if stop is None:
            return False
        if is_hold(pause) or is_hold(stop):
            return is_hold(pause) and is_hold(stop) and pause.pass_index == stop.pass_index
        return (pause.pass_index, pause.node, pause.phase) == (stop.pass_index, stop.node, stop.phase)


class Verdict(NamedTuple):
    """What the hub makes of a pause it just heard."""

    stale: bool
    """It belongs to a stop already resumed: let go unseen, parking nobody."""
    resume: Command | None = None
    """The command that ends it (a stale pause of the rank's own session), or None: a park ends by
    its unpark, a diverge hold through the job's store, a new stop by the client."""


@dataclass
class RankView:
    """What the hub knows of one rank."""

    rank: int
    pid: int | None = None
    state: str = "starting"
    at: str = ""
    loss: float | None = None
    nonfinite: int = 0
    paused: str | None = None
    """`own` or `parked` while paused (as far as the hub knows: None once it sent the resume)."""
    pause: ev.Paused | None = None
    """Its present pause (as the rank said it, no `rank N ·` prefix), or None."""
    current: list[ev.Event] = field(default_factory=list)
    """Its present pass's events (PassStarted first), replayed when the client switches to it."""
    flow: tuple[ev.ParamFlow, ...] = ()
    passing: bool = False
    """Its present pause belongs to a stop already resumed: not shown, not waited for."""
    pending: Pending | None = None
    """The resume typed while this rank was running, for the pause it may be on its way to."""
    park_order: str | None = None
    """The reason of the park order last sent to it, None once an `unpark` (or release) followed."""

    def public(self) -> RankState:
        """Its line of the rank strip."""
        return RankState(self.rank, self.state, self.at, self.loss, self.nonfinite, self.pid)

    @property
    def live(self) -> bool:
        """Neither dead nor done."""
        return self.state not in ("dead", "done")

    def heard(self, event: ev.Event) -> bool:
        """Note what `event` of this rank says of it (its pass, state, loss, flow); False for an
        event its client is not to see (the resume of a pause let go unseen, a wait at a gate).
        A pause is only kept here: the hub judges it (`judge`)."""
        match event:
            case ev.PassStarted():
                if event.recorded:
                    self.current = [event]
                self.loss = next((v for v in event.losses if v is not None), self.loss)
                self.state, self.at = "running", f"pass {event.pass_index}"
            case ev.NodeRan() | ev.Paused():
                self.current.append(event)
            case ev.Resumed():
                self.current.append(event)
                self.paused, self.pause, self.state = None, None, "running"
                if self.passing:
                    self.passing = False
                    return False
            case ev.PassFinished():
                self.current.append(event)
                self.paused, self.pause, self.state = None, None, "running"
                self.flow = event.flow
                self.nonfinite = sum(f.nonfinite for f in event.flow)
            case ev.ScriptFinished():
                self.paused, self.pause, self.state = None, None, "done"
                self.at = event.how or f"exit status {event.exit_status}"
            case RankWaiting():
                self.state = "waiting"
                self.at = f"pass {event.pass_index} · #{event.node} (for rank {', '.join(map(str, event.waiting_for))})"
                return False
        return True

    def judge(self, pause: ev.Paused) -> Verdict:
        """Does `pause`, just heard, belong to a stop already resumed? Consumes the pending resume."""
        pending, self.pending = self.pending, None
        if is_parked(pause):
            # Parks and unparks go to a rank in the order the hub decided them: a park whose
            # order was followed by an unpark has been resumed by the rank itself.
            return Verdict(pause.reason != self.park_order)
        if pending is not None and pending.ends(pause):
            return Verdict(True, None if is_hold(pause) else pending.command)
        return Verdict(False)
