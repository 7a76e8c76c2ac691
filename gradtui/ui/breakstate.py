"""The breakpoints as the UI knows them, a part of the UI state (`UIState.breaks`): the target's
list as its last `BreakpointsChanged` said (each with its spec as parsed where it was typed: the
node list marks its rows by it, nothing here parses it again); the ones the user turned off in the
breakpoints pane; the hits per pass and each breakpoint's last hit. No Textual.
"""

from __future__ import annotations

from gradtui.protocol import events as ev
from gradtui.ui.changes import Changes


class BreakpointsState:
    """The breakpoints and their hits (see module doc)."""

    def __init__(self) -> None:
        self.breakpoints: tuple[ev.BreakpointInfo, ...] = ()
        """The target's breakpoints, as its last BreakpointsChanged said (their specs parsed)."""
        self.off: list[str] = []
        """Breakpoints turned off in the breakpoints pane: their specs (the target deleted them)."""
        self.hits: dict[int, int] = {}
        """Pass index -> how many breakpoint hits it had."""
        self.last_hits: dict[int, tuple[int, int]] = {}
        """Breakpoint number -> (pass index, node) of its last hit (the breakpoints pane's jump)."""

    def hit(self, event: ev.BreakpointHit) -> Changes:
        """A breakpoint hit: counted for its pass, and its last hit."""
        self.hits[event.pass_index] = self.hits.get(event.pass_index, 0) + 1
        self.last_hits[event.number] = (event.pass_index, event.node)
        return Changes()

    def changed(self, event: ev.BreakpointsChanged) -> Changes:
        """The target's breakpoints changed: the node list's markers with them."""
        self.breakpoints = event.breakpoints
        return Changes(breakpoints=True)
