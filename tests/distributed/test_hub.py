"""The job hub and a rank's gate without torchrun: fake ranks, the job's store a HashStore.
Fast and deterministic for orders that a real job under load gives only sometimes."""

from __future__ import annotations

from types import SimpleNamespace

import torch.distributed as dist

from gradtui.distributed.hub import JobHub
from gradtui.distributed.orders import Park, RankOrder, Release, from_wire_form
from gradtui.distributed.rank import RankLink
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, parse
from gradtui.protocol.nodes import NodeInfo
from gradtui.wire import frames
from tests.helpers import QuietSession as _Session


class _Local:
    """Rank 0's tap as the hub sees it."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.controls: list[RankOrder] = []

    def submit(self, command: Command, request: int) -> None:
        self.submitted.append(command.text)

    def control(self, order: RankOrder) -> None:
        self.controls.append(order)

    def quit(self) -> None:
        self.submitted.append("<the run's quit path>")


class _Conn:
    """Another rank's agent as the hub sees it: the frames sent to it."""

    def __init__(self) -> None:
        self.sent: list[frames.ClientFrame] = []

    def send(self, frame: frames.ClientFrame) -> None:
        self.sent.append(frame)

    def commands(self) -> list[str]:
        return [f.command_of().text for f in self.sent if isinstance(f, frames.Submit)]

    def orders(self) -> list[RankOrder]:
        return [from_wire_form(bytes(f.order)) for f in self.sent if isinstance(f, frames.Order)]


def _paused(node: int, reason: str) -> ev.Paused:
    return ev.Paused(0, node, f"op{node}", "before", reason, (), node, 6)


def test_a_step_typed_before_the_hub_heard_rank_1_pause_still_moves_rank_1():
    local, conn, out = _Local(), _Conn(), []
    hub = JobHub(2, out.append, local, dist.HashStore())
    hub._conns[1] = conn  # noqa: SLF001 - connect_all's work, without agents
    hub.on_event(0, _paused(0, "step"))
    hub.submit(parse("step"), 1)  # the client answers rank 0's first pause; rank 1 still runs to its own
    assert local.submitted == ["step"] and conn.commands() == []
    before = len(local.controls)
    hub.on_event(1, _paused(0, "step"))
    assert conn.commands() == ["step"], conn.sent  # rank 1's first stop was the one resumed
    assert not any(isinstance(e, ev.Paused) and e.reason.startswith("rank 1") for e in out)
    assert not any(isinstance(c, Park) for c in local.controls[before:])  # rank 0 runs on
    hub.on_event(1, _paused(1, "breakpoint 1: #1"))  # a later stop of its own is the client's
    assert conn.commands() == ["step"]


def test_a_rank_whose_peer_reached_the_gate_runs_the_node_before_it_parks():
    """Rank 1 passed gate 0, ran #0 and paused at #1 (the hub's park order comes from that):
    rank 0, still at gate 0, must run #0 and park at #1, beside it, not a node behind."""
    store = dist.HashStore()
    link = RankLink(_Session(), store, 0, 2)
    attrs = [{"info": NodeInfo(f"op{i}", "op", 6 - i, ())} for i in range(6)]
    state = SimpleNamespace(
        index=0, done=0, capture=SimpleNamespace(graph=SimpleNamespace(nodes=attrs), nodes=[None] * 6)
    )
    store.set("g/0/0/1", "")  # rank 1's arrival at gate 0
    link.control(Park("parked: rank 1 is paused at #1 op1 (pass 0)"))
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
    checks.submit(parse("breakpoints"), 7)
    checks.submit(parse("delete all"), 8)
    link.control(Release())  # the hub: rank 1 died
    hold.join(10)
    assert not hold.is_alive(), "a dead rank must end the hold at once"
    assert session.submitted == ["breakpoints", "delete all"], session.events
    assert not any(isinstance(e, ev.CommandResult) and not e.ok for e in session.events), session.events
    assert isinstance(session.events[-1], ev.Resumed)


def _hub() -> tuple[JobHub, _Local, _Conn, list[ev.Event], dist.HashStore]:
    local, conn, out, store = _Local(), _Conn(), [], dist.HashStore()
    hub = JobHub(2, out.append, local, store)
    hub._conns[1] = conn  # noqa: SLF001 - connect_all's work, without agents
    return hub, local, conn, out, store


def _hold(index: int) -> ev.Paused:
    """A diverge hold's pause, as gradtui.distributed.checks says it."""
    return ev.Paused(index, 4, "AccumulateGrad", "after", "breakpoint diverge: 2.bias differs across ranks", (), 6, 6)


def _controls(local: _Local, conn: _Conn) -> list[RankOrder]:
    return local.controls + conn.orders()


def test_a_diverge_hold_heard_after_the_client_resumed_it_parks_no_rank_and_gets_no_command():
    """The detach-then-diverge coin toss: rank 0's hold is resumed (through the store), the
    client detaches, then rank 1's hold of the same pass is heard. Nothing may park rank 0 on that
    stale pause or send rank 1 a `continue` that would end its next hold; the next pass's hold is
    the job's and waits for the next client."""
    hub, local, conn, out, store = _hub()
    hub.on_event(0, _hold(2))
    hub.submit(parse("continue"), 1)
    hub.release_all()
    hub.on_event(1, _hold(2))
    assert not any(isinstance(c, Park) for c in _controls(local, conn)), _controls(local, conn)
    assert store.check(["vr/2"]) and store.get("vr/2") == b"continue"  # every held rank reads it
    assert local.submitted == [] and conn.commands() == [], conn.sent  # no command ends a hold
    assert not any(isinstance(e, ev.Paused) and e.reason.startswith("rank 1") for e in out)
    hub.on_event(1, ev.Resumed(2, "continue"))
    hub.on_event(0, ev.Resumed(2, "continue"))
    hub.on_event(0, _hold(3))
    hub.on_event(1, _hold(3))
    hub.submit(parse("ranks"), 2)
    listed = [e for e in out if isinstance(e, ev.CommandResult)][-1].text
    assert "rank 0: paused at pass 3" in listed and "rank 1: paused at pass 3" in listed, listed
    assert not store.check(["vr/3"]) and conn.commands() == []  # held for the next client


def test_a_pause_heard_after_its_stop_was_resumed_is_ended_once_and_parks_no_rank():
    hub, local, conn, out, store = _hub()
    hub.on_event(0, _paused(5, "breakpoint 1: #5"))
    assert [c for c in _controls(local, conn) if isinstance(c, Park)] == [
        Park("parked: rank 0 is paused at #5 op5 (pass 0)")
    ]
    hub.submit(parse("continue"), 1)
    hub.release_all()  # a client that detaches at once: no second `continue` for rank 0
    assert local.submitted == ["continue"]
    before = len(_controls(local, conn))
    hub.on_event(1, _paused(5, "breakpoint 1: #5"))  # the same stop, heard late: ended, once
    assert conn.commands() == ["continue"], conn.sent
    assert not any(isinstance(c, Park) for c in _controls(local, conn)[before:])
    hub.on_event(1, ev.Resumed(0, "continue"))
    hub.on_event(1, _paused(7, "breakpoint 2: #7"))  # a new stop: rank 0 is parked for it
    assert local.controls[-1] == Park("parked: rank 1 is paused at #7 op7 (pass 0)")
    hub.submit(parse("continue"), 2)
    hub.on_event(0, _paused(7, "parked: rank 1 is paused at #7 op7 (pass 0)"))  # its unpark resumed it
    assert local.submitted == ["continue"] and conn.commands() == ["continue", "continue"], conn.sent
    assert not any(isinstance(e, ev.Paused) and e.reason.startswith("rank 0 · parked") for e in out)
    hub.submit(parse("ranks"), 3)
    assert "rank 0: parked" not in [e for e in out if isinstance(e, ev.CommandResult)][-1].text


def test_the_shown_ranks_step_pause_reaches_the_client_once_every_rank_has_caught_up():
    """After `step` rank 0 (shown) pauses at #1 before rank 1 does: the client, which answers the
    pause with its next command (`ranks`), must get it only after rank 1 paused at #1 too, the
    rank strip before it showing both there. A rank that never catches up does not hold the pause
    past gradtui.distributed.settle's bound."""
    import time

    from gradtui.distributed import settle
    from gradtui.protocol.dist_events import RanksChanged

    hub, local, conn, out, store = _hub()
    hub.on_event(0, _paused(0, "step"))
    hub.on_event(1, _paused(0, "step"))
    hub.submit(parse("step"), 1)
    hub.on_event(0, ev.Resumed(0, "step"))
    hub.on_event(0, _paused(1, "step"))
    assert not [e for e in out if isinstance(e, ev.Paused) and e.node == 1], out  # rank 1 still at #0
    hub.on_event(1, ev.Resumed(0, "step"))
    hub.on_event(1, _paused(1, "step"))
    shown = [i for i, e in enumerate(out) if isinstance(e, ev.Paused) and e.node == 1]
    assert len(shown) == 1 and out[shown[0]].reason == "rank 0 · step", out
    strip = [e for e in out[: shown[0]] if isinstance(e, RanksChanged)][-1]
    assert all(" · #1 " in r.at for r in strip.ranks), strip
    hub.submit(parse("step"), 2)
    hub.on_event(0, ev.Resumed(0, "step"))
    hub.on_event(0, _paused(2, "step"))  # rank 1 never pauses at #2: shown after the bound
    deadline = time.monotonic() + settle.SETTLE_TIMEOUT + 10
    while not [e for e in out if isinstance(e, ev.Paused) and e.node == 2] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len([e for e in out if isinstance(e, ev.Paused) and e.node == 2]) == 1, out


def test_a_quit_typed_at_the_hub_takes_the_runs_one_quit_path():
    hub, local, conn, out, store = _hub()
    hub.submit(parse("q"), 3)
    assert local.submitted == ["<the run's quit path>"] and conn.sent == []  # the path sends the ranks theirs
