"""The job hub's orders to the ranks, sent in the order the hub decided them.

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
