"""Frames to the attached client, each with a deadline: a client that reads nothing cannot hold
the agent.

The client's socket stays blocking for its reader thread; a frame is written here with
non-blocking sends between waits for the socket to take more (`poll`), so a send that makes no
progress ends: after `STALL` seconds of a client reading nothing (it is then dropped, as if it
had detached), or at the moment `limit` set (the script has ended: the last frames and the
goodbye get a few seconds, not forever). A frame cut off half-written leaves the stream unusable:
the sender is then `broken` and sends nothing more.
"""

from __future__ import annotations

import math
import select
import socket
import threading
import time

STALL = 300.0
"""Seconds a frame may make no progress (the client reads nothing) before the client is dropped."""

_SLICE = 0.1
"""Seconds between two looks at the deadlines while the client's socket takes nothing."""


class ClientSender:
    """Writes whole frames to one client's socket with deadlines (see module doc)."""

    def __init__(self, conn: socket.socket, stall: float = STALL) -> None:
        self._conn = conn
        self._stall = stall
        self._lock = threading.Lock()
        self._limit = math.inf
        self.broken = False
        """A frame was cut off (or the socket failed): nothing more can be sent."""
        self.stalled = False
        """It broke because the client took nothing for `stall` seconds."""

    def limit(self, deadline: float) -> None:
        """From now on, every send ends by `deadline` (a `time.monotonic()` value)."""
        self._limit = min(self._limit, deadline)

    def send(self, data: bytes) -> bool:
        """Write `data` whole; False if the client is gone, stalled past its deadline, or a frame
        before was cut off (the caller drops the client)."""
        if not self._lock.acquire(timeout=max(0.0, min(self._limit - time.monotonic(), self._stall))):
            return False
        try:
            if self.broken:
                return False
            self.broken = not self._write(memoryview(data))
            return not self.broken
        finally:
            self._lock.release()

    def _write(self, view: memoryview) -> bool:
        poller = select.poll()
        poller.register(self._conn.fileno(), select.POLLOUT)
        progress = time.monotonic()
        while view:
            now = time.monotonic()
            if now >= self._limit:
                return False
            if now - progress >= self._stall:
                self.stalled = True
                return False
            try:
                sent = self._conn.send(view, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                return False
            if sent:
                view = view[sent:]
                progress = time.monotonic()
                continue
            wait = min(_SLICE, self._limit - now, self._stall - (now - progress))
            try:
                poller.poll(max(0.0, wait) * 1000)
            except (OSError, ValueError):
                return False
        return True
