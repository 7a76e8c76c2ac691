"""What waits to be sent to the attached client: bounded, whatever the client does.

Events queue in order while the client keeps up. When more than `MAX_QUEUED` wait (the client
reads nothing: a frozen terminal, a dropped SSH session), the queue is given up for a summary:
from then on only the script's last `OUTPUT_LINES` lines are kept and the other events are
counted, not kept. When the client can take a frame again it is sent a `Notice` saying what it
missed and then the present as a client attaching
now would see it (the backlog's `present`: the breakpoints and the current pass's events; the UI
shows a pass sent again in place of the old one). Memory is thus bounded by the queue's cap and
the backlog's own bounds, not by how long the client stalls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gradtui.protocol import events as ev

MAX_QUEUED = 20000
"""Events that may wait for the client before it is deemed behind and the queue is summarised
(a pass's start counts once per node of its graph, which it carries)."""

OUTPUT_LINES = 2000
"""Lines of the script's output kept for a client that is behind (the last ones)."""

_LOW = (ev.NodeRan, ev.NodesRan, ev.Output, ev.Progress)
"""Events that may wait to be gathered into a frame with the next ones (the rest go at once)."""


class Outbox:
    """The events waiting for the attached client (see module doc); the caller holds a lock."""

    def __init__(self, cap: int = MAX_QUEUED) -> None:
        self._cap = cap
        self._events: list[ev.Event] = []
        self._weight = 0
        """The events' weight against the cap (`_weight_of`)."""
        self._allowance = 0
        """A new client's backlog, let past the cap until it is taken."""
        self._behind = False
        self._output: deque[ev.Output] = deque(maxlen=OUTPUT_LINES)
        self._dropped_events = 0
        self._dropped_lines = 0
        self._passes: tuple[int, int] | None = None
        """The first and last pass indexes the dropped events belonged to."""
        self._urgent = 0
        """How many of the queued events may not wait for the next ones."""

    def __bool__(self) -> bool:
        return self._behind or bool(self._events)

    @property
    def untold(self) -> int:
        """Events (lines of output included) the client would miss if nothing waiting were sent:
        those queued, or for a client behind those the notice would count and the lines kept."""
        if not self._behind:
            return len(self._events)
        return self._dropped_events + self._dropped_lines + len(self._output)

    @property
    def behind(self) -> bool:
        """Has the client fallen too far behind (the queue is a summary now)?"""
        return self._behind

    @property
    def only_low(self) -> bool:
        """Do only events that may wait for the next ones wait (no pause, no answer)?"""
        return not self._behind and not self._urgent

    def add(self, event: ev.Event, low: bool = False) -> bool:
        """Queue `event`; True if it should go at once (it matters now, or it is the first).
        `low`: it may wait for the next ones whatever its kind (a pass the client is sent
        undescribed: its start and end only count passes, gradtui.agent.server)."""
        if self._behind:
            self._drop(event)
            return False
        low = low or isinstance(event, _LOW)
        self._urgent += not low
        self._events.append(event)
        self._weight += _weight_of(event)
        if self._weight > self._cap + self._allowance:
            self._behind = True
            events, self._events = self._events, []
            self._urgent = 0
            for old in events:
                self._drop(old)
            return True
        return not low or len(self._events) == 1

    def replace(self, events: list[ev.Event]) -> None:
        """Queue exactly `events` (a new client's backlog), as a fresh queue."""
        self.clear()
        self._events = list(events)
        self._weight = self._allowance = sum(_weight_of(e) for e in events)
        self._urgent = sum(not isinstance(e, _LOW) for e in events)

    def clear(self) -> None:
        """Forget everything waiting (the client went)."""
        self._events = []
        self._weight = self._allowance = self._urgent = 0
        self._behind = False
        self._output.clear()
        self._dropped_events = self._dropped_lines = 0
        self._passes = None

    def take(self, present: Callable[[], list[ev.Event]]) -> list[ev.Event]:
        """Everything to send now, the queue emptied: the events in order, or for a client that
        fell behind, the notice, the last lines of output and `present()`."""
        if not self._behind:
            events, self._events = self._events, []
            self._weight = self._allowance = self._urgent = 0
            return events
        notice = ev.Notice(self._notice())
        out: list[ev.Event] = [notice, *self._output, *present()]
        self.clear()
        return out

    def _drop(self, event: ev.Event) -> None:
        match event:
            case ev.Output():
                if len(self._output) == self._output.maxlen:
                    self._dropped_lines += 1
                self._output.append(event)
                return
            case (
                ev.PassStarted(pass_index=index)
                | ev.NodeRan(pass_index=index)
                | ev.NodesRan(pass_index=index)
                | ev.Paused(pass_index=index)
                | ev.PassFinished(pass_index=index)
                | ev.Progress(pass_index=index)
            ):
                first, last = self._passes or (index, index)
                self._passes = (min(first, index), max(last, index))
        self._dropped_events += 1

    def _notice(self) -> str:
        passes = ""
        if self._passes is not None:
            first, last = self._passes
            passes = f" of pass {first}" if first == last else f" of passes {first}-{last}"
        lines = f" and {self._dropped_lines} lines of output" if self._dropped_lines else ""
        return (
            f"this client read nothing for a while: {self._dropped_events} events{passes}{lines} "
            "were dropped; showing the present"
        )


def _weight_of(event: ev.Event) -> int:
    """What `event` counts against the cap: 1, a pass's start 1 per node of the graph it carries."""
    match event:
        case ev.PassStarted(graph=graph):
            return 1 + graph.number_of_nodes()
        case ev.NodesRan(count=count):
            return count
    return 1
