"""The shown rank's step pause, held back from the client until the other ranks have caught up.

After `step` every rank moves one node, but the shown rank's pause reaches the hub first: a
client that answers it at once (`attach --headless` sends its next command) would see the other
ranks still running at the node before, though lockstep holds. So the hub holds that pause until
every other live rank has paused, parked or is waiting at a gate, for `SETTLE_TIMEOUT` seconds at
most (a rank whose graph differs may never pause there; the pause is then shown as it is).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gradtui.protocol import events as ev

SETTLE_TIMEOUT = 2.0
"""Seconds the shown rank's step pause waits for the other ranks before it is shown anyway."""


class HeldPause:
    """At most one pause held back from the client, and the timer that lets it go at the latest."""

    def __init__(self, lock: Any, out: Callable[[ev.Event], None]) -> None:
        """`lock`: the hub's (an RLock); `out`: the job's client."""
        self._lock = lock
        self._out = out
        self._pause: ev.Paused | None = None

    @property
    def held(self) -> bool:
        """Is a pause held now?"""
        return self._pause is not None

    def hold(self, pause: ev.Paused) -> None:
        """Hold `pause` (as the client will see it) for `SETTLE_TIMEOUT` seconds at most."""
        with self._lock:
            self._pause = pause
        timer = threading.Timer(SETTLE_TIMEOUT, lambda: self.release(pause))
        timer.daemon = True
        timer.start()

    def release(self, pause: ev.Paused | None = None) -> None:
        """Show the held pause now; with `pause` (a timer's), only if that one is still held."""
        with self._lock:
            if self._pause is None or (pause is not None and self._pause is not pause):
                return
            held, self._pause = self._pause, None
            self._out(held)

    def drop(self) -> None:
        """Forget the held pause (it was resumed, or is replayed by a switch of rank)."""
        with self._lock:
            self._pause = None
