"""The one-line header: script, pass, call, engine state. No clock, so snapshots are stable.

At 80 columns not everything fits: parts go in a fixed order (the brand, the call text, the
long form of the state, the loss, the script name) so that the pass index, `N/M ran`,
`browsing` and the state stay.
It watches the app's `changes` and copies what the UI state says into its reactives.
"""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from gradtui.ui.changes import Changes
from gradtui.ui.headertext import HeaderPart
from gradtui.ui.state import UIState

_STATE_STYLE = {
    "paused": "$warning bold",
    "running": "$accent",
    "finished": "$success bold",
    "failed": "$error bold",
    "quit": "$text-muted",
    "starting": "$text-muted",
}

BRAND_DROP, CALL_DROP, LOSS_DROP, SCRIPT_DROP, PROGRESS_DROP = 5, 4, 3, 2, 1
"""How soon the brand, the call, the loss, the script name and `N/M ran` go (see HeaderPart.drop;
the call's and the loss's are given in gradtui.ui.headertext)."""

FITS = (
    (False, 99),
    (False, BRAND_DROP),
    (False, CALL_DROP),
    (True, CALL_DROP),
    (True, LOSS_DROP),
    (True, SCRIPT_DROP),
    (True, PROGRESS_DROP),
)
"""What the header tries, in turn, until the line fits: (the state's short form?, the level from
which parts are dropped). The short state (`paused #3 (y)`) comes before the loss or the script's
name go: at 80 columns a long op name pushed the script's name out."""


class GradHeader(Widget):
    """` gradtui  chain.py  pass 0 · z.backward()  · 1/3 ran      ● paused at #1 MulBackward0 (y)`."""

    DEFAULT_CSS = """
    GradHeader { height: 1; dock: top; background: $panel; }
    """

    script: reactive[str] = reactive("")
    """Basename of the script being debugged."""
    pass_text: reactive[str] = reactive("")
    """`pass 0 · z.backward()`, empty before the first pass."""
    pass_parts: reactive[tuple[HeaderPart, ...]] = reactive(())
    """`pass_text` in parts (what a narrow header drops first)."""
    progress: reactive[str] = reactive("")
    """`17/911 ran`: nodes of the pass that have run."""
    status: reactive[str] = reactive("starting")
    """The engine state word: starting, running, paused, finished, failed, quit."""
    status_text: reactive[str] = reactive("starting")
    """The full state text shown at the right."""
    status_short: reactive[str] = reactive("")
    """The state text when the full one does not fit."""

    def __init__(self, state: UIState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state

    def on_mount(self) -> None:
        """Name the script; follow the state as the app publishes its changes."""
        self.script = self.state.script_name
        self.watch(self.app, "changes", self._changed, init=False)

    def _changed(self, changes: Changes) -> None:
        if changes.header:
            self.show_state()

    def show_state(self) -> None:
        """Say what the state says: the pass shown, how much of it ran, the engine's state."""
        state = self.state
        view = state.view
        if view is not None:
            self.pass_text = state.pass_text()
            self.pass_parts = state.pass_parts()
            done, total = state.progress if state.browsed is None else (view.done, view.total)
            self.progress = f"{done}/{total} ran" if view.recorded else ""
        self.status = state.status
        self.status_text = state.status_text()
        self.status_short = state.status_short()

    def _left(self, dropped: int) -> Content:
        """The left part without the parts that go at level `dropped` or sooner."""
        keep = lambda level: level < dropped  # noqa: E731
        parts = self.pass_parts or ((HeaderPart(self.pass_text, 0),) if self.pass_text else ())
        pieces: list[tuple[str, str] | str] = []
        if keep(BRAND_DROP):
            pieces += [(" gradtui ", "bold $text-accent"), " "]
        if keep(SCRIPT_DROP):
            pieces += [(self.script, "bold")]
        text = " · ".join(part.text for part in parts if keep(part.drop))
        if text:
            pieces.append(("  " + text if pieces else " " + text, "$text-muted"))
        if self.progress and keep(PROGRESS_DROP):
            pieces.append(("  · " + self.progress, "$text-muted"))
        return Content.assemble(*pieces)

    def render(self) -> Content:
        """The header line: left part, padding, state at the right; parts dropped to fit."""
        width = self.size.width
        for short, dropped in FITS:
            status = (self.status_short or self.status_text) if short else self.status_text
            right = Content.assemble(
                ("● " if self.status == "paused" else "", "$warning"), (status, _STATE_STYLE.get(self.status, "")), " "
            )
            left = self._left(dropped)
            if left.cell_length + right.cell_length + 1 <= width:
                return left + Content(" " * (width - left.cell_length - right.cell_length)) + right
        left = left.truncate(max(0, width - right.cell_length - 1), ellipsis=True)
        return left + Content(" " * max(1, width - left.cell_length - right.cell_length)) + right
