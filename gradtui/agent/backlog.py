"""What a client that attaches late must be told to catch up: a bounded memory of events.

An agent may run long before anyone attaches (`--listen`, `gradtui.listen()`), or between two
clients. The backlog keeps what a new client needs to draw the present: the script's start,
the breakpoints, the notebook cells' texts, the last lines of output, and every event since
the last recorded pass began (its graph, the nodes that ran, the pause it waits at). Passes that ran unhooked before
the first recorded pass are kept as a bounded run of their start and end events.
"""

from __future__ import annotations

from collections import deque

from gradtui.protocol import events as ev

OUTPUT_LINES = 2000
BEFORE_PASS = 500


class Backlog:
    """A bounded record of the events a late client replays (see module doc)."""

    def __init__(self) -> None:
        self._started: ev.ScriptStarted | None = None
        self._breakpoints: ev.BreakpointsChanged | None = None
        self._output: deque[ev.Output] = deque(maxlen=OUTPUT_LINES)
        self._sources: list[ev.SourceText] = []
        """Every notebook cell's text sent (each once): a later pass may name an old cell."""
        self._before: deque[ev.Event] = deque(maxlen=BEFORE_PASS)
        """Events before the current recorded pass (unhooked passes, nested passes...)."""
        self._current: list[ev.Event] = []
        """Events since the current recorded pass started, that pass's PassStarted first."""

    def add(self, event: ev.Event) -> None:
        """Remember `event` as far as a late client needs it."""
        match event:
            case ev.ScriptStarted():
                self._started = event
            case ev.BreakpointsChanged():
                self._breakpoints = event
            case ev.Output():
                self._output.append(event)
            case ev.SourceText():
                self._sources.append(event)
            case ev.PassStarted(recorded=True):
                self._current = [event]  # an older pass's graph is no longer the present
            case ev.CommandResult():
                pass  # answers belong to the client that asked
            case _:
                (self._current if self._current else self._before).append(event)

    def replay(self) -> list[ev.Event]:
        """The events a client attaching now should see, in an order it can apply."""
        out: list[ev.Event] = []
        if self._started is not None:
            out.append(self._started)
        out.extend(self._output)
        return out + self.present()

    def present(self) -> list[ev.Event]:
        """What draws the present for a client that has seen the script start and its output
        (one that fell behind, `gradtui.agent.outbox`): the breakpoints, the notebook cells'
        texts, the passes before the current recorded one and that pass's events so far."""
        out: list[ev.Event] = []
        if self._breakpoints is not None:
            out.append(self._breakpoints)
        out.extend(self._sources)
        out.extend(self._before)
        out.extend(self._current)
        return out
