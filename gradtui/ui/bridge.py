"""Engine events -> Textual messages, posted from the script's thread, NodeRan batched.

The session calls its listeners on the script's thread (and, for a refused command, on the
thread that submitted it). `Bridge` turns each event into a message posted to the app
(`post_message` is thread-safe) and never touches a widget. In `continue` the engine emits
one NodeRan per node, so those are batched: one `NodesRan` message at most every
`interval` seconds, and always flushed before any other event, so order is kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from gradtui.core import events as ev


class Bridge:
    """A session listener that posts engine events to the app as messages (see module doc)."""

    @dataclass
    class EngineEvent(Message):
        """One engine event (anything but NodeRan)."""

        event: ev.Event

    @dataclass
    class NodesRan(Message):
        """NodeRan events, in the order they happened."""

        events: list[ev.NodeRan]

    def __init__(self, post: Callable[[Message], object], interval: float = 0.05) -> None:
        self._post = post
        self._interval = interval
        self._lock = threading.Lock()
        self._pending: list[ev.NodeRan] = []
        self._last = float("-inf")

    def __call__(self, event: ev.Event) -> None:
        """Listener entry point (any thread)."""
        if isinstance(event, ev.NodeRan):
            with self._lock:
                self._pending.append(event)
                due = time.monotonic() - self._last >= self._interval
            if due:
                self.flush()
            return
        self.flush()
        self._send(Bridge.EngineEvent(event))

    def flush(self) -> None:
        """Post the pending NodeRan events now, as one message."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._last = time.monotonic()
        if batch:
            self._send(Bridge.NodesRan(batch))

    def _send(self, message: Message) -> None:
        try:
            self._post(message)
        except RuntimeError:
            pass  # the app's event loop is closed: nobody is left to show it
