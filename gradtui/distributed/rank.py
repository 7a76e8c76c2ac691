"""Each rank's side of a job: the gate before every node (follow mode), parking, timeouts.

Follow mode rests on one fact verified here: a gloo collective already in flight keeps the
timeout it was launched with, so raising the timeouts for a pause (`torch.distributed.breakpoint`
does) cannot save a rank that launched a collective its paused peer has not. So no rank may run
a node that another rank has not reached: before each node of a hooked pass, every rank marks
its arrival at that node's *gate* in the job's store and waits for every other rank's arrival
(`store.check`, polled with a short backoff). Collectives are launched from nodes (DDP's
Reducer from the parameters' accumulators, FSDP2 from its hooks), so with a gate before every
node the ranks are never more than one node apart and no collective ever waits on a paused
rank. A rank that pauses on its own (a breakpoint, a step) does so before its arrival, so the
others wait at the same node; when the hub says that some rank is paused (`park`), a rank
waiting at a gate pauses there itself ("parked"), with its timeouts raised, so a client can
`print` on it. A rank that finished the pass (`d/PASS/RANK`), ended (`e/RANK`) or died
(`x/RANK`, set by the hub) no longer holds a gate.

The hub's orders (park, unpark, release...) arrive typed (gradtui.distributed.orders; see `RankLink.control`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradtui.distributed.job import Timeouts
from gradtui.distributed.orders import ClientAttached, Gone, Park, RankOrder, Release, Unpark
from gradtui.engine.stats.passrecord import PassRecord
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command, Continue
from gradtui.protocol.dist_events import RankWaiting
from gradtui.protocol.nodes import node_info

if TYPE_CHECKING:  # the session imports the engine; only its type is needed here
    from gradtui.engine.session import Session

SLICE = 0.1
"""Seconds between two looks, while waiting at a gate, at whether the awaited ranks ended."""

POLL_MAX = 0.005
"""The longest sleep between two polls of a gate (the store's `check`)."""

WAITING_AFTER = 0.5
"""Seconds at a gate after which the rank tells the hub it is held there."""


class RankLink:
    """One rank's part in follow mode (see module doc); the session's `follow` hook."""

    def __init__(self, session: Session, store: Any, rank: int, world: int) -> None:
        self.session = session
        self.store = store
        self.rank = rank
        self.world = world
        self.timeouts = Timeouts()
        self._lock = threading.Lock()
        self._park: str | None = None
        """Why to park at the next gate (another rank is paused), or None."""
        self._parked = False
        """The session is (about to be) paused because follow() said to park."""
        self._own_pause = False
        self._released = False
        """No more gates (a rank died, or the job was let go): run on like a lone process."""
        self._at: tuple[int, int] | None = None
        self._gate = -1
        self._gate_pass = -1
        self.gone: set[int] = set()
        """Ranks known to have ended or died (no longer awaited at gates)."""
        self.leaves: list[tuple[int, str, weakref.ref]] = []
        """This pass's leaves (accumulator node, name, the leaf) for the diverge check."""
        self.client = False
        """Is a client attached to the job (the hub says, `client on|off`)?"""
        self.armed: Callable[[], bool] = lambda: False
        """Is a job-wide check armed on this rank (`break diverge`)?"""
        self.progress = 0
        """Counts this rank's gates and events: the guard's sign that the rank moves."""

    # ---- the session hook ----------------------------------------------------------------

    def follow(self, state: PassRecord, node: int) -> str | None:
        """Before `node` runs: arrive at its gate and wait for the other ranks (see module doc).
        Returns why to park here, or None to run the node."""
        self.progress += 1
        with self._lock:
            self._parked = False
        if self._released or self.world < 2:
            return None
        index = state.index
        if self._at != (index, node):  # the first call for this node: arrive
            if self._gate_pass != index:
                self._forget_pass()
                self._gate_pass, self._gate = index, -1
                self.leaves = []
            self._gate += 1
            if self._gate >= 2:
                # Every rank has seen this rank's arrival two gates back: it is here, so all of
                # them arrived at the gate between, which they reached only by passing that one.
                self._forget(self._key(index, self._gate - 2, self.rank))
            self._at = (index, node)
            info = node_info(state.capture.graph, node)
            if info.kind == "accumulate":
                leaf = getattr(state.capture.nodes[node], "variable", None)
                if leaf is not None:
                    self.leaves.append((node, info.param or ",".join(info.labels) or f"#{node}", weakref.ref(leaf)))
            self.store.set(self._key(index, self._gate, self.rank), "")
            if state.done >= len(state.capture.nodes) - 1:
                # This rank's last node: it has no more gates in this pass. Said now, not at its
                # PassFinished: a rank whose graph has more nodes (a rank-specific branch) must
                # not wait at a gate this rank never reaches while this one waits for its
                # all-reduce in the backward's final callback.
                self._mark(f"d/{index}/{self.rank}")
        return self._wait(index, node)

    def _wait(self, index: int, node: int) -> str | None:
        """Wait at this rank's present gate of pass `index` (before `node`) for the other live
        ranks: None once they all arrived (or quit, or the store is gone), or why to park."""
        waiting = [r for r in range(self.world) if r != self.rank and r not in self.gone]
        keys = [self._key(index, self._gate, r) for r in waiting]
        since = last = time.monotonic()
        delay = 0.0
        told = False
        while True:
            # The gate first, then the park order: a rank whose peers all arrived runs the node,
            # so a peer that ran it and paused at the next one is not left a node ahead.
            try:
                if not keys or self.store.check(keys):
                    return None
            except Exception:  # noqa: BLE001 - the job's store is gone: the job is ending
                return None
            with self._lock:
                if self._park is not None:
                    self._parked = True
                    return self._park
            # Polled with check(), not store.wait(): a wait that runs out logs two warnings.
            time.sleep(delay)
            delay = min(delay * 2 or 0.0001, POLL_MAX)
            now = time.monotonic()
            if now - last >= SLICE:
                last = now
                if self.session.quitting:
                    return None  # the next hook raises GradtuiQuit
                waiting = [r for r in waiting if r not in self.gone and not self.passed(index, r)]
                keys = [self._key(index, self._gate, r) for r in waiting]
                if not told and now - since > WAITING_AFTER:
                    told = True
                    self.session.emit(RankWaiting(index, node, tuple(waiting)))

    def _key(self, index: int, gate: int, rank: int) -> str:
        return f"g/{index}/{gate}/{rank}"

    def _forget_pass(self) -> None:
        """A new hooked pass: delete this rank's last two arrivals of the previous one, so the
        job's store holds two gate keys per rank, not one per node and pass (a rank still at the
        previous pass's last gate sees this rank's `d/` mark of it instead; those marks, one per
        pass, are kept: which pass another rank is in is not known here)."""
        if self._gate_pass < 0:
            return
        for gate in (self._gate - 1, self._gate):
            if gate >= 0:
                self._forget(self._key(self._gate_pass, gate, self.rank))

    def _forget(self, key: str) -> None:
        try:
            self.store.delete_key(key)
        except Exception:  # noqa: BLE001 - the store is gone (the job is ending) or cannot delete
            pass

    def passed(self, index: int, rank: int) -> bool:
        """Is `rank` past every gate of pass `index` (finished it, ended or died)?"""
        try:
            if self.store.check([f"x/{rank}"]) or self.store.check([f"e/{rank}"]):
                self.gone.add(rank)
                return True
            return self.store.check([f"d/{index}/{rank}"])
        except Exception:  # noqa: BLE001 - the store went away: the job is ending
            self.gone.add(rank)
            return True

    # ---- events of this rank's session ------------------------------------------------------

    def on_event(self, event: ev.Event) -> None:
        """Raise the group timeouts while the job can pause, restore them after; mark passes done."""
        self.progress += 1
        match event:
            case ev.Paused():
                with self._lock:
                    self._own_pause = not self._parked
                self.timeouts.raise_()
            case ev.PassStarted():
                self.settle()  # before the pass launches its collectives
            case ev.Resumed():
                self._own_pause = False
                self.settle()
            case ev.PassFinished(pass_index=index):
                self._own_pause = False
                self._mark(f"d/{index}/{self.rank}")
                self.settle()
            case ev.ScriptFinished():
                self._mark(f"e/{self.rank}")
                self.timeouts.restore()

    def _mark(self, key: str) -> None:
        if self.world < 2:
            return
        try:
            self.store.set(key, "")
        except Exception:  # noqa: BLE001 - the job's store is gone (rank 0 ended first)
            pass

    @property
    def released(self) -> bool:
        """Has the job let this rank go (a rank died): no more gates or holds."""
        return self._released

    @property
    def can_pause(self) -> bool:
        """Can this rank (or so the job) pause from now on: a client attached, a breakpoint or a
        job-wide check armed? Ranks' graphs can differ (a rank-specific branch, expert routing),
        so a collective launched now may wait on a rank that pauses later: it must be launched
        with the raised timeout (in flight, it keeps the one it was launched with)."""
        return not self._released and (self.client or len(self.session.breakpoints) > 0 or self.armed())

    @property
    def holding(self) -> bool:
        """Is this rank paused, parked, or told to park (some rank of the job is paused)?"""
        return self._park is not None or self._parked or self._own_pause or bool(self.session.paused)

    def settle(self) -> None:
        """Raised timeouts while the job can pause or this rank is held, the script's own else."""
        if self.world < 2:
            return
        if self.holding or self.can_pause:
            self.timeouts.raise_()
        else:
            self.timeouts.restore()

    # ---- orders from the hub -------------------------------------------------------------------

    def control(self, order: RankOrder) -> None:
        """Do one of the hub's orders (gradtui.distributed.orders; `Diverge` is the tap's)."""
        match order:
            case Park(reason=reason):
                with self._lock:
                    self._park = reason
                self.timeouts.raise_()
            case Unpark(resume=resume):
                self._unpark(resume)
            case Release():
                self._released = True
                self._unpark(Continue("continue"))
                self.timeouts.restore()
            case Gone(rank=rank):
                self.gone.add(rank)
            case ClientAttached(attached=attached):
                self.client = attached
                self.settle()

    def _unpark(self, mode: Command) -> None:
        """Clear the park order; a rank paused because of it resumes by the command `mode`."""
        with self._lock:
            self._park = None
            parked, self._parked = self._parked, False
        if parked:
            deadline = time.monotonic() + 2.0
            while not self.session.paused and time.monotonic() < deadline:
                time.sleep(0.005)  # follow() said park; the session is about to pause
            self.session.submit(mode)  # its Resumed settles the timeouts
        elif not self._own_pause:
            self.settle()
