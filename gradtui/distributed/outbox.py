"""The job hub's orders to the ranks, sent in the order the hub decided them (`RankOrders`).

The hub decides under its lock (which rank parks, which resumes) and must send outside it: a
send to rank 0 runs rank 0's own code (`RankLink.control`), which may wait for rank 0's script
thread, which may be emitting an event to the hub. Decided under the lock and sent after it by
whichever thread decided, an order decided earlier (a park) could reach a rank after one decided
later (the unpark of that stop) and leave the rank parked on a pause nobody will end. So every
order goes through one queue, filled under the hub's lock and sent by one thread at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from gradtui.distributed.orders import RankOrder, wire_form
from gradtui.protocol.commands import Command
from gradtui.wire import frames


class Outbox:
    """A FIFO of sends (see module doc); `lock` is the hub's."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._queue: deque[Callable[[], None]] = deque()
        self._flushing = False

    def put(self, send: Callable[[], None]) -> None:
        """Queue `send` (with the hub's lock held or not)."""
        with self._lock:
            self._queue.append(send)

    def flush(self) -> None:
        """Send what is queued, in order; never call it with the hub's lock held. A thread that
        finds another sending returns at once: that one sends what was queued too."""
        with self._lock:
            if self._flushing:
                return
            self._flushing = True
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._flushing = False
                        return
                    send = self._queue.popleft()
                send()
        except BaseException:
            with self._lock:
                self._flushing = False
            raise


class RankOrders:
    """What the hub sends each rank, through one `Outbox`: orders (gradtui.distributed.orders),
    commands (under a hub id whose answer `answers` turns into the client's) and quits, typed
    (`frames` to another rank's agent). Rank 0 is `local` (its tap,
    called), the others their connections (`conns`, filled by the hub as ranks join)."""

    def __init__(self, lock: threading.RLock, local: Any, conns: dict[int, Any], answers: Any) -> None:
        self._outbox = Outbox(lock)
        self._local = local
        self._conns = conns
        self._answers = answers

    def control(self, rank: int, order: RankOrder) -> None:
        """Queue an order for `rank` (sent by `flush`)."""
        if rank == 0:
            self._outbox.put(lambda: self._local.control(order))
        elif rank in self._conns:
            conn = self._conns[rank]
            frame = frames.Order(msgspec.Raw(wire_form(order)))
            self._outbox.put(lambda: conn.send(frame))

    def submit(
        self, rank: int, command: Command, request: int | None, *, note: str | None = None, gather: Any = None
    ) -> None:
        """Queue `command` for `rank` under a hub id; its answer goes to the client as `request`."""
        hub_id = self._answers.ask(request, note, gather)
        if rank == 0:
            self._outbox.put(lambda: self._local.submit(command, hub_id))
        elif rank in self._conns:
            conn = self._conns[rank]
            frame = frames.Submit.of(command, hub_id)
            self._outbox.put(lambda: conn.send(frame))

    def quit(self, rank: int) -> None:
        """Tell `rank` (not 0: rank 0's quit is its own run's) that the client quit, at once."""
        self._conns[rank].send(frames.Quit())

    def flush(self) -> None:
        """Send the queued orders; never with the hub's lock held."""
        self._outbox.flush()
