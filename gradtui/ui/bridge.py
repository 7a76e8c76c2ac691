"""Engine events -> Textual messages, posted from the script's thread, NodeRan and Output batched.

The session calls its listeners on the script's thread (and, for a refused command, on the
thread that submitted it). `Bridge` turns each event into a message posted to the app
(`post_message` is thread-safe) and never touches a widget. In `continue` the engine emits
one NodeRan per node, and a chatty script one Output per line, so those are batched: one
message at most every `interval` seconds, always flushed before any other event, so order is
kept. The app calls `flush` on a timer too, so the last lines of a burst never wait for the
next event.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from gradtui.core import events as ev

_BATCHED = (ev.NodeRan, ev.Output)


class Bridge:
    """A session listener that posts engine events to the app as messages (see module doc)."""

    @dataclass
    class EngineEvent(Message):
        """One engine event (anything but NodeRan and Output)."""

        event: ev.Event

    @dataclass
    class NodesRan(Message):
        """NodeRan events, in the order they happened."""

        events: list[ev.NodeRan]

    @dataclass
    class Printed(Message):
        """Output events (the script's lines), in the order they happened."""

        events: list[ev.Output]

    def __init__(self, post: Callable[[Message], object], interval: float = 0.05) -> None:
        self._post = post
        self.interval = interval
        """Seconds between two batches."""
        self._lock = threading.RLock()  # also held while posting, so batches never overtake
        self._pending: list[ev.Event] = []
        self._last = float("-inf")

    def __call__(self, event: ev.Event) -> None:
        """Listener entry point (any thread)."""
        with self._lock:
            if isinstance(event, _BATCHED):
                self._pending.append(event)
                if time.monotonic() - self._last >= self.interval:
                    self.flush()
                return
            self.flush()
            self._send(Bridge.EngineEvent(event))

    def flush(self) -> None:
        """Post the pending NodeRan and Output events now, a message per run of one kind."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._last = time.monotonic()
            for kind, run in itertools.groupby(batch, type):
                self._send(Bridge.NodesRan(list(run)) if kind is ev.NodeRan else Bridge.Printed(list(run)))

    def _send(self, message: Message) -> None:
        try:
            self._post(message)
        except RuntimeError:
            pass  # the app's event loop is closed: nobody is left to show it
