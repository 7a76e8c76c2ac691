"""Frames to the attached client, each with a deadline: a client that reads nothing cannot hold
the agent.

The client's socket stays blocking for its reader thread; a frame is written here with
non-blocking sends between waits for the socket to take more (`poll`), so a send that makes no
progress ends: after `STALL` seconds of a client reading nothing (it is then dropped, as if it
had detached), or at the moments `limit` set (the script has ended: the last frames and the
goodbye get a few seconds, not forever). A frame cut off half-written leaves the stream unusable:
the sender is then `broken` and sends nothing more. A frame that `limit` keeps from beginning is
not sent at all and leaves the stream whole, so the goodbye can still say what was not sent.
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
        self._begin_by = math.inf
        """Frames (but the last) not begun by then are not sent (the stream stays whole)."""
        self._end_by = math.inf
        """Frames are cut off then (the stream is broken), and the last may begin until then."""
        self.broken = False
        """A frame was cut off (or the socket failed): nothing more can be sent."""
        self.stalled = False
        """It broke because the client took nothing for `stall` seconds."""

    def limit(self, deadline: float, end: float | None = None) -> None:
        """From now on, a frame must begin by `deadline` and end by `end` (default `deadline`;
        `time.monotonic()` values), and the last frame (`send(last=True)`: the goodbye) may begin
        until `end`: the time between is the goodbye's, and the frame in flight's to finish."""
        self._begin_by = min(self._begin_by, deadline)
        self._end_by = min(self._end_by, deadline if end is None else max(end, deadline))

    def send(self, data: bytes, *, last: bool = False) -> bool:
        """Write `data` whole; False if the client is gone, stalled past its deadline, a frame
        before was cut off (then `broken`: the caller drops the client), or the frame could not
        begin by its deadline (`broken` stays False: nothing of it was written)."""
        begin_by = self._end_by if last else self._begin_by
        if not self._lock.acquire(timeout=max(0.0, min(begin_by - time.monotonic(), self._stall))):
            return False
        try:
            if self.broken or time.monotonic() >= begin_by:
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
            if now >= self._end_by:
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
            wait = min(_SLICE, self._end_by - now, self._stall - (now - progress))
            try:
                poller.poll(max(0.0, wait) * 1000)
            except (OSError, ValueError):
                return False
        return True
