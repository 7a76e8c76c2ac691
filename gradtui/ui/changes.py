"""What changed in the UI state since the app last drew it: the value of the app's `changes`
reactive, which the widgets watch (each redraws only its part). No Textual here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Changes:
    """What events (or the user's browsing) changed, so each widget redraws only that."""

    rows: set[int] = field(default_factory=set)
    """Node ids whose rows (markers) changed."""
    new_pass: bool = False
    header: bool = False
    paused: bool = False
    """A pause began: jump the selection to the paused node."""
    finished: bool = False
    """The script ended."""
    log: list[str] = field(default_factory=list)
    """Lines for the output pane (a nested backward)."""
    breakpoints: bool = False
    """The target's breakpoints changed (the node list's markers)."""

    def merge(self, later: Changes) -> Changes:
        """This change and a later one, drawn as one."""
        return Changes(
            self.rows | later.rows,
            self.new_pass or later.new_pass,
            self.header or later.header,
            self.paused or later.paused,
            self.finished or later.finished,
            self.log + later.log,
            self.breakpoints or later.breakpoints,
        )
