"""The job hub and a rank's gate without torchrun: fake ranks, the job's store a HashStore.
Fast and deterministic for orders that a real job under load gives only sometimes."""

from __future__ import annotations

from types import SimpleNamespace

import torch.distributed as dist

from gradtui.model import events as ev
from gradtui.distributed.hub import JobHub
from gradtui.distributed.rank import CONTROL, RankLink


class _Local:
    """Rank 0's tap as the hub sees it."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.controls: list[str] = []

    def submit(self, text: str, request: int) -> None:
        self.submitted.append(text)

    def control(self, text: str) -> None:
        self.controls.append(text)


class _Conn:
    """Another rank's agent as the hub sees it: the frames sent to it."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def commands(self) -> list[str]:
        return [m["submit"] for m in self.sent if not m.get("submit", "").startswith(CONTROL)]


def _paused(node: int, reason: str) -> ev.Paused:
    return ev.Paused(0, node, f"op{node}", "before", reason, (), node, 6)


def test_a_step_typed_before_the_hub_heard_rank_1_pause_still_moves_rank_1():
    local, conn, out = _Local(), _Conn(), []
    hub = JobHub(2, out.append, local, dist.HashStore())
    hub._conns[1] = conn  # noqa: SLF001 - connect_all's work, without agents
    hub.on_event(0, _paused(0, "step"))
    hub.submit("step", 1)  # the client answers rank 0's first pause; rank 1 still runs to its own
    assert local.submitted == ["step"] and conn.commands() == []
    before = len(local.controls)
    hub.on_event(1, _paused(0, "step"))
    assert conn.commands() == ["step"], conn.sent  # rank 1's first stop was the one resumed
    assert not any(isinstance(e, ev.Paused) and e.reason.startswith("rank 1") for e in out)
    assert not any(c.startswith("park") for c in local.controls[before:])  # rank 0 runs on
    hub.on_event(1, _paused(1, "breakpoint 1: #1"))  # a later stop of its own is the client's
    assert conn.commands() == ["step"]


class _Session:
    quitting = False
    paused = False
    breakpoints = ()

    def emit(self, event: ev.Event) -> None:
        pass


def test_a_rank_whose_peer_reached_the_gate_runs_the_node_before_it_parks():
    """Rank 1 passed gate 0, ran #0 and paused at #1 (the hub's park order comes from that):
    rank 0, still at gate 0, must run #0 and park at #1, beside it, not a node behind."""
    store = dist.HashStore()
    link = RankLink(_Session(), store, 0, 2)
    attrs = [{"kind": "op", "name": f"op{i}"} for i in range(6)]
    state = SimpleNamespace(index=0, done=0, capture=SimpleNamespace(graph=SimpleNamespace(nodes=attrs), nodes=[None] * 6))
    store.set("g/0/0/1", "")  # rank 1's arrival at gate 0
    link.control("park parked: rank 1 is paused at #1 op1 (pass 0)")
    assert link.follow(state, 0) is None
    state.done = 1
    assert link.follow(state, 1) == "parked: rank 1 is paused at #1 op1 (pass 0)"


class _HeldSession(_Session):
    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.submitted: list[str] = []

    def emit(self, event: ev.Event) -> None:
        self.events.append(event)

    def submit(self, command, request=None) -> None:
        self.submitted.append(command.text)

    def run_on(self) -> None:
        pass


def test_a_diverge_hold_lists_and_deletes_breakpoints_and_a_dead_rank_ends_it():
    import threading

    from gradtui.distributed.checks import Checks

    session, store = _HeldSession(), dist.HashStore()
    link = RankLink(session, store, 0, 2)
    checks = Checks(session, store, 0, 2, link)
    finished = ev.PassFinished(1, 6, 6, None)
    hold = threading.Thread(target=checks._hold, args=(finished, 5, "breakpoint diverge: w differs", ()), daemon=True)  # noqa: SLF001
    hold.start()
    checks.submit("breakpoints", 7)
    checks.submit("delete all", 8)
    link.control("release")  # the hub: rank 1 died
    hold.join(10)
    assert not hold.is_alive(), "a dead rank must end the hold at once"
    assert session.submitted == ["breakpoints", "delete all"], session.events
    assert not any(isinstance(e, ev.CommandResult) and not e.ok for e in session.events), session.events
    assert isinstance(session.events[-1], ev.Resumed)
