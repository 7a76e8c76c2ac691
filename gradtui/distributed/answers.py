"""The answers the ranks send back to the hub, routed to the job's client: each order the hub
sends a rank goes under a hub request id (negative: a client's ids are not), mapped here to the
client's request it answers (or to none: an order of the hub's own), with a note to add (an
edit's word about DDP); a `print` sent to several paused ranks is gathered and answered side by
side once all have answered, or after GATHER_TIMEOUT."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from gradtui.protocol import events as ev

GATHER_TIMEOUT = 3.0
"""Seconds `print` waits for every paused rank's answer."""


@dataclass
class Gather:
    """A `print` sent to several paused ranks, answered side by side once all have answered."""

    text: str
    request: int
    ranks: list[int]
    answers: dict[int, ev.CommandResult] = field(default_factory=dict)
    done: bool = False


class Answers:
    """The hub's requests in flight and what their answers become for the client (see module doc)."""

    def __init__(self, lock: threading.RLock, out: Callable[[ev.Event], None]) -> None:
        self._lock = lock
        self._out = out
        self._ids = iter(range(-1, -(1 << 62), -1))
        self._requests: dict[int, int] = {}
        """Hub request id -> the client's request id, for the answers the client asked for."""
        self._gathers: dict[int, Gather] = {}
        self._notes: dict[int, str] = {}
        """Hub request id -> a line added to its answer (an edit's note about DDP)."""

    def ask(self, request: int | None, note: str | None = None, gather: Gather | None = None) -> int:
        """A hub id for an order answering the client's `request` (None: nobody's)."""
        hub_id = next(self._ids)
        with self._lock:
            if request is not None or gather is not None:
                self._requests[hub_id] = request if request is not None else -1
            if note is not None:
                self._notes[hub_id] = note
            if gather is not None:
                self._gathers[hub_id] = gather
        return hub_id

    def gather(self, text: str, request: int, ranks: list[int]) -> Gather:
        """A gathering of `ranks`' answers to `text`, answered at the latest after GATHER_TIMEOUT."""
        gathered = Gather(text, request, ranks)
        timer = threading.Timer(GATHER_TIMEOUT, lambda: self.finish(gathered))
        timer.daemon = True
        timer.start()
        return gathered

    def answer(self, rank: int, event: ev.CommandResult) -> ev.CommandResult | None:
        """The client's view of `rank`'s answer to a hub id (None: nobody asked, or gathered)."""
        hub_id = event.request
        assert hub_id is not None
        gathered = self._gathers.pop(hub_id, None)
        if gathered is not None:
            self._requests.pop(hub_id, None)
            gathered.answers[rank] = event
            if len(gathered.answers) == len(gathered.ranks):
                self.finish(gathered)
            return None
        request = self._requests.pop(hub_id, None)
        if request is None or request < 0:
            return None
        note = self._notes.pop(hub_id, None)
        text = f"{event.text}\n{note}" if note is not None and event.ok else event.text
        return msgspec.structs.replace(event, text=text, request=request)

    def finish(self, gathered: Gather) -> None:
        """Answer the gathered `print`, side by side (once; a rank that did not answer says so)."""
        with self._lock:
            if gathered.done:
                return
            gathered.done = True
            lines = []
            for r in gathered.ranks:
                answer = gathered.answers.get(r)
                body = answer.text if answer is not None else "(no answer)"
                lines.append(f"rank {r}:")
                lines += [f"  {line}" for line in body.splitlines()]
            ok = any(a.ok for a in gathered.answers.values())
            self._out(ev.CommandResult(gathered.text, "\n".join(lines), ok=ok, request=gathered.request))
