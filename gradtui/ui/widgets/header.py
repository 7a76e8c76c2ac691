"""The one-line header: script, pass, call, engine state. No clock, so snapshots are stable."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

_STATE_STYLE = {
    "paused": "$warning bold",
    "running": "$accent",
    "finished": "$success bold",
    "failed": "$error bold",
    "quit": "$text-muted",
    "starting": "$text-muted",
}


class GradHeader(Widget):
    """` gradtui  chain.py  pass 0 · z.backward()  · 1/3 ran      ● paused at #1 MulBackward0 (y)`."""

    DEFAULT_CSS = """
    GradHeader { height: 1; dock: top; background: $panel; }
    """

    script: reactive[str] = reactive("")
    """Basename of the script being debugged."""
    pass_text: reactive[str] = reactive("")
    """`pass 0 · z.backward()`, empty before the first pass."""
    progress: reactive[str] = reactive("")
    """`17/911 ran`: nodes of the pass that have run."""
    status: reactive[str] = reactive("starting")
    """The engine state word: starting, running, paused, finished, failed, quit."""
    status_text: reactive[str] = reactive("starting")
    """The full state text shown at the right."""

    def render(self) -> Content:
        """The header line: left part, padding, state at the right."""
        left = Content.assemble(
            (" gradtui ", "bold $text-accent"), " ", (self.script, "bold"),
            *([("  " + self.pass_text, "$text-muted")] if self.pass_text else []),
            *([("  · " + self.progress, "$text-muted")] if self.progress else []),
        )
        right = Content.assemble(
            ("● " if self.status == "paused" else "", "$warning"),
            (self.status_text, _STATE_STYLE.get(self.status, "")), " ",
        )
        width = self.size.width
        room = width - right.cell_length
        if left.cell_length > room - 1:
            left = left.truncate(max(0, room - 1), ellipsis=True)
        return left + Content(" " * max(1, width - left.cell_length - right.cell_length)) + right
