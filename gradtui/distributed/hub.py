"""Rank 0's side of a job: the job's one address, the shown rank, commands routed to every rank.

Every rank's agent writes `a/RANK` (its address, token, pid) in the job's store once
torch.distributed is initialised; rank 0's agent reads them all and connects to each other
rank's agent as its client over the ordinary wire (hello, token, events, commands). The job's
client attaches to rank 0's agent as to any agent. The hub hears every rank's events (rank 0's
from its own session, the others' over their connections), keeps each rank's state and present
pass, forwards the *shown* rank's events to the client (the others' output too, prefixed) and
a `RanksChanged` whenever a rank's state changes. A rank that pauses on its own (a breakpoint,
a step) has the others parked (`park`; a diverge hold parks none: every rank holds after that
pass); a pause heard after the client resumed its stop is let go unseen (gradtui.distributed.stops);
orders to the ranks leave in the order decided (gradtui.distributed.outbox's RankOrders); if the shown rank was not itself paused, the client is
switched to the rank that paused (as gdb does for the thread that hit a breakpoint), its pass
replayed first. Commands from the client: see `JobHub.submit`. A rank whose connection ends
without a `ScriptFinished` is dead: `x/RANK` goes in the store (gates no longer wait for it),
the client is told, and the other ranks are released (no more gates, paused ones continue),
so they end at their next collective rather than hang.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from gradtui.distributed.answers import Answers
from gradtui.distributed.conn import RankConn
from gradtui.distributed.deaths import Deaths
from gradtui.distributed.orders import ClientAttached, Diverge, Park, Unpark
from gradtui.distributed.outbox import RankOrders
from gradtui.distributed.settle import HeldPause
from gradtui.distributed.stops import PARKED, Pending, RankView, is_hold, is_parked, resume_holds
from gradtui.protocol import breakpoint_commands
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Role
from gradtui.protocol.commands import (
    Break,
    Clip,
    Command,
    Continue,
    Delete,
    Finish,
    Flow,
    ListBreakpoints,
    Print,
    Quit,
    Rank,
    Ranks,
    Scale,
    SetGrad,
    Step,
    Zero,
)
from gradtui.protocol.dist_events import RanksChanged, flow_table, format_ranks

EDIT_NOTE = "(edited on rank {rank} only: DDP will average this gradient into every rank at the all-reduce)"

SWITCH_AFTER = 0.3
"""Seconds after another rank's own pause before the client is switched to it."""


class JobHub:
    """Rank 0's job hub (see module doc)."""

    def __init__(self, world: int, out: Callable[[ev.Event], None], local: Any, store: Any) -> None:
        """`out`: the job's client (rank 0's AgentServer as a listener); `local`: rank 0's tap
        (`control(order)`, `submit(command, request)`, `quit()`, `quit_self()`); `store`: the job's store (gradtui's keys)."""
        self.world = world
        self.shown = 0
        self._out = out
        self._local = local
        self._store = store
        self._lock = threading.RLock()
        self._ranks = [RankView(r) for r in range(world)]
        self._ranks[0].pid = os.getpid()
        self._conns: dict[int, RankConn] = {}
        self._answers = Answers(self._lock, out)
        """The orders in flight and what their answers become for the client."""
        self.diverge = False
        self.attached: Callable[[], bool] = lambda: True
        """Is a client attached to the job now (rank 0's server says)?"""
        self._detached = False
        """A client has come and gone: step pauses resume by themselves while none is attached."""
        self._orders = RankOrders(self._lock, local, self._conns, self._answers)
        """What to send to the ranks, in the order the hub decided it (gradtui.distributed.outbox)."""
        self._deaths = Deaths(self._ranks, store, out, self._orders, self._changed)
        self._held = HeldPause(self._lock, out)
        """The shown rank's step pause, until the other ranks have caught up (gradtui.distributed.settle)."""

    # ---- joining --------------------------------------------------------------------------

    def connect_all(self, timeout: float = 120.0) -> None:
        """Read every other rank's registration from the store and connect to its agent."""
        from datetime import timedelta

        for r in range(1, self.world):
            key = f"a/{r}"
            self._store.wait([key], timedelta(seconds=timeout))
            entry = json.loads(self._store.get(key))
            self._ranks[r].pid = entry.get("pid")
            self._conns[r] = RankConn(r, entry["address"], entry["token"], self.on_event, self._gone)
        self._changed()

    # ---- events from the ranks --------------------------------------------------------------

    def on_event(self, rank: int, event: ev.Event) -> None:
        """An event of `rank`'s session (rank 0's from its tap, the others' from their connection)."""
        actions: list[Callable[[], None]] = []
        with self._lock:
            st = self._ranks[rank]
            before = st.public()
            forward: ev.Event | None = event if st.heard(event) else None
            match event:
                case ev.Paused():
                    forward = self._on_paused(st, event, actions)
                case ev.ScriptFinished() if rank != 0:
                    forward = None  # the job ends with rank 0 (and torchrun)
                case ev.CommandResult(request=request) if request is not None and request < 0:
                    forward = self._answers.answer(rank, event)
                case ev.CommandResult():
                    # An answer nobody asked for (a rank's answer to the hub's own `continue` after
                    # an unpark): a client would take it for its command's and send the next early.
                    forward = None
                case ev.Output() if rank != self.shown:
                    forward = msgspec.structs.replace(
                        event, text="".join(f"[rank {rank}] {line}" for line in event.text.splitlines(keepends=True))
                    )
            if (
                isinstance(forward, ev.Paused)
                and isinstance(event, ev.Paused)
                and rank == self.shown
                and event.reason == "step"
                and self._behind(rank)
            ):
                self._held.hold(forward)
                forward = None
            if forward is not None and (rank == self.shown or isinstance(event, (ev.Output, ev.CommandResult))):
                self._out(forward)
            if st.public() != before:
                self._changed()
            if self._held.held and not self._behind(self.shown):
                self._held.release()  # after the rank strip that shows every rank caught up
        self._orders.flush()
        for action in actions:
            action()

    def _on_paused(self, st: RankView, event: ev.Paused, actions: list[Callable[[], None]]) -> ev.Paused | None:
        """`st`'s rank paused (under the lock): a pause of a stop already resumed is let go unseen
        (`RankView.stale`); a new one is the job's: shown, and the others parked unless it is a
        diverge hold (every rank holds after that pass by itself). Returns what the client sees."""
        verdict = st.judge(event)
        if verdict.stale:
            st.passing = True
            if verdict.resume is not None:
                self._orders.submit(st.rank, verdict.resume, None)
            return None
        st.paused = PARKED if is_parked(event) else "own"
        st.pause = event
        st.state = "parked" if st.paused == PARKED else "paused"
        st.at = f"pass {event.pass_index} · #{event.node} {event.name}"
        if st.paused == "own":
            if not is_hold(event):
                self._park_others(st.rank, event)
            if st.rank != self.shown and self._ranks[self.shown].paused != "own":
                actions.append(functools.partial(self._switch_soon, st.rank))
            if event.reason == "step" and self._detached and not self.attached():
                actions.append(self._run_on)  # as a lone agent's step pause, with no client
        return msgspec.structs.replace(event, reason=f"rank {st.rank} · {event.reason}")

    def _behind(self, rank: int) -> bool:
        """Is another live rank than `rank` still running (not paused, parked or waiting at a gate)?"""
        return any(st.live and st.rank != rank and st.paused is None and st.state != "waiting" for st in self._ranks)

    def _park_others(self, rank: int, event: ev.Paused) -> None:
        """Park order for every other live rank not paused on its own (under the lock)."""
        why = f"{PARKED}: rank {rank} is paused at #{event.node} {event.name} (pass {event.pass_index})"
        for st in self._ranks:
            if st.rank != rank and st.live and st.paused != "own":
                st.park_order = why
                self._orders.control(st.rank, Park(why))

    def _changed(self) -> None:
        self._out(self._snapshot())

    def _switch_soon(self, rank: int) -> None:
        """Show `rank`, which paused on its own, unless the shown rank pauses too by then (ranks
        that hit the same breakpoint together keep the client where it was)."""

        def check() -> None:
            with self._lock:
                stay = self._ranks[self.shown].paused == "own" or self._ranks[rank].paused != "own"
            if not stay:
                self.show(rank)

        timer = threading.Timer(SWITCH_AFTER, check)
        timer.daemon = True
        timer.start()

    def show(self, rank: int) -> None:
        """Show `rank` to the client: its state, then its present pass replayed."""
        with self._lock:
            self.shown = rank
            self._held.drop()  # its pause, if it is paused, is replayed below
            self._changed()
            st = self._ranks[rank]
            last_pause = None
            for event in st.current:
                if isinstance(event, ev.Paused):
                    last_pause = event
                elif not isinstance(event, ev.Resumed):
                    self._out(event)  # its graph, the nodes that ran, the pass's end
            if st.paused and last_pause is not None:  # only the pause it is in now
                self._out(msgspec.structs.replace(last_pause, reason=f"rank {rank} · {last_pause.reason}"))
            # Again after the pass: a late client replays from its PassStarted on (the agent's
            # backlog starts there), so the rank strip it gets must come after it.
            self._changed()

    def _gone(self, rank: int, bye: str | None) -> None:
        """`rank`'s connection ended: done if it said so, else dead (gradtui.distributed.deaths)."""
        with self._lock:
            if not self._deaths.gone(rank, bye):
                return
        self._orders.flush()
        if rank == self.shown:
            self.show(0)

    # ---- commands from the client ------------------------------------------------------------

    def submit(self, command: Command, request: int) -> None:
        """A command the job's client typed (parsed there): `ranks`, `rank N`, `break diverge`
        and a job's `flow` are the hub's; resuming commands go to every rank (follow mode);
        `break`/`delete` to every rank; `print` to every paused rank, answered side by side; edits
        and the rest to the shown rank (edits say that DDP will average them), each as the command
        it came as. Decided under the lock, sent after it."""
        with self._lock:
            self._command(command, request)
        self._orders.flush()

    def _command(self, command: Command, request: int) -> None:
        text = command.text
        match command:
            case Ranks():
                self._reply(text, "\n".join(format_ranks(self._snapshot())), request)
            case Rank(number=number):
                self._rank_command(text, number, request)
            case Break(spec=spec) if spec.role is Role.JOB:
                self._break_diverge(text, request)
            case Step() | Continue() | Finish():
                self._resume(command, request)
            case _ if isinstance(command, breakpoint_commands.CHANGES):
                if isinstance(command, Delete) and command.number is None and self.diverge:
                    self.diverge = False  # `delete all` disarms the job's diverge check too
                    for r in self._live():
                        self._orders.control(r, Diverge(False))
                for r in self._live():
                    self._orders.submit(r, command, request if r == self.shown else None)
            case Print():
                paused = [r for r in self._live() if self._ranks[r].paused]
                if len(paused) < 2:
                    self._orders.submit(self.shown, command, request)
                else:
                    gathered = self._answers.gather(text, request, paused)
                    for r in paused:
                        self._orders.submit(r, command, None, gather=gathered)
            case Scale() | Zero() | Clip() | SetGrad():
                self._orders.submit(self.shown, command, request, note=EDIT_NOTE.format(rank=self.shown))
            case Quit():
                self._local.quit()  # the run's quit path, which on rank 0 is `quit_all`
            case Flow() if self.world > 1:
                self._reply(text, "\n".join(flow_table({st.rank: st.flow for st in self._ranks}, self.world)), request)
            case ListBreakpoints() if self.diverge:  # the job's own check is listed with the rank's
                self._orders.submit(self.shown, command, request, note="job: break diverge (checked after every pass)")
            case _:
                self._orders.submit(self.shown, command, request)

    def _resume(self, command: Step | Continue | Finish, request: int) -> None:
        """Every rank resumes: parked ones through `unpark MODE`, ones held by `break diverge`
        through the job's store (`vr/PASS`, which every held rank reads), paused ones by the
        command, and one the hub has not heard pause yet at the pause of this stop it may be on
        its way to (`RankView.pending`). Each rank is resumed once: from now on the hub counts it
        running, so a second resume (a client that detaches at once) sends it nothing more."""
        with self._lock:
            self._held.drop()  # a pause resumed before it was shown is not shown
            live = [st for st in self._ranks if st.live]
            shown = self._ranks[self.shown]
            stop = shown.pause if shown.paused == "own" else next((st.pause for st in live if st.paused == "own"), None)
            for st in live:
                self._orders.control(st.rank, Unpark(command))
                st.park_order = None
                if st.paused is None:
                    if stop is not None or st.pending is None:  # a second resume of no stop keeps the first's
                        st.pending = Pending(command, stop)
                elif st.paused == "own" and is_hold(st.pause):
                    assert st.pause is not None
                    resume_holds(
                        self._store, st.pause.pass_index, "continue" if isinstance(command, Continue) else "step"
                    )
                elif st.paused == "own":
                    self._orders.submit(st.rank, command, request if st.rank == self.shown else None)
                st.paused = None

    def _rank_command(self, text: str, rank: int, request: int) -> None:
        if not 0 <= rank < self.world:
            return self._reply(text, f"rank N: N is a rank of this job, 0-{self.world - 1}", request, ok=False)
        if self._ranks[rank].state == "dead":
            return self._reply(text, f"rank {rank} is dead: {self._ranks[rank].at}", request, ok=False)
        self.show(rank)
        self._reply(text, f"showing rank {rank}", request)  # after its pause: a client's feeder sends on at the pause

    def _break_diverge(self, text: str, request: int) -> None:
        self.diverge = True
        for r in self._live():
            self._orders.control(r, Diverge(True))
        self._reply(
            text,
            "breakpoint diverge: the job stops after a pass whose parameter gradients differ "
            "across ranks after their all-reduce",
            request,
        )

    def notice_deaths(self) -> None:
        """Declare dead every rank whose process is gone, now (before this process ends)."""
        for rank in self._deaths.dead_now():
            self._gone(rank, None)

    def quit_all(self) -> None:
        """Stop every rank's script (the client quit)."""
        for r in self._live():
            if r != 0:
                self._orders.quit(r)
        self._local.quit_self()

    def client(self, attached: bool) -> None:
        """The job's client attached or went: while one is attached the job can pause, so every
        rank keeps its groups' timeouts raised (RankLink.can_pause)."""
        for r in self._live():
            self._orders.control(r, ClientAttached(attached))
        self._orders.flush()

    def release_all(self) -> None:
        """The client went: the job runs on with its breakpoints armed, as a lone agent does: a
        stop that a step made resumes (and, from now on, each one while no client is attached),
        a breakpoint hit or a diverge hold waits for the next client."""
        with self._lock:
            self._detached = True
            held = any(
                st.live and st.paused == "own" and st.pause is not None and st.pause.reason != "step"
                for st in self._ranks
            )
        if not held:
            self._run_on()

    def _run_on(self) -> None:
        """Resume the job as `continue` does, for no client."""
        self._resume(Continue("continue"), -1)
        self._orders.flush()

    # ---- sending -------------------------------------------------------------------------

    def _live(self) -> list[int]:
        return [r.rank for r in self._ranks if r.state not in ("dead", "done")]

    def _snapshot(self) -> RanksChanged:
        with self._lock:
            return RanksChanged(tuple(r.public() for r in self._ranks), self.shown, self.world)

    def _reply(self, text: str, answer: str, request: int, ok: bool = True) -> None:
        self._out(ev.CommandResult(text, answer, ok=ok, request=request))
