"""The text of a pane (detail, graph): a Static that redraws only what changed.

`Static.update` asks for a layout of the whole screen by default (~70 ms at 120x40 on a
small machine, the whole of a step's budget), and the panes are shown several times a
pause. `Body.set` skips a text that did not change, and asks for a layout only when the
text's height at the current width changed (the only thing about it the layout depends
on); otherwise it repaints just its own region. `BodyPane` is a scrolling pane of one Body
whose title and text are each redrawn only if they changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.style import Style
from textual.widgets import Static


def node_ref(content: Content, node: int) -> Content:
    """`content` (a node's title or chip) made clickable: a click selects `node` (BodyPane)."""
    return content.stylize(Style.from_meta({"node": node}))


def same(a: Content | None, b: Content) -> bool:
    """The same text with the same styles (Content's `==` compares the plain text only)."""
    return a is not None and a.plain == b.plain and a.spans == b.spans


class Body(Static):
    """A pane's whole text as one Content (see module doc)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shown: Content | None = None
        """What `set` last drew."""
        self._measure: tuple[int, int] | None = None
        """(width, height) of `shown` when it was set."""

    def set(self, content: Content) -> None:
        """Show `content`: nothing if it is what is shown, a repaint if it is as high as that.

        The height is compared with the last text's (at the same width), not with the laid
        out size: a layout asked for and not done yet (the screen under a modal one is laid
        out only when it is on top again) still lays out whatever is shown by then."""
        if same(self.shown, content):
            return
        width = self.content_size.width if self.is_mounted else 0
        measure = (width, content.get_height(self.styles, width)) if width else None  # type: ignore[arg-type]  # textual's annotation says RulesMap; it reads any styles
        layout = measure is None or measure != self._measure
        self.shown, self._measure = content, measure
        self.update(content, layout=layout)


class BodyPane(VerticalScroll):
    """A pane (detail, graph) that shows its text in the one Body it composes, under a border
    title; `_draw` redraws each only if it changed. It may be zoomed (`Z`), which a
    scrolling container may not be by default."""

    ALLOW_MAXIMIZE = True

    @dataclass
    class NodeClicked(Message):
        """A node reference (`node_ref`) was clicked: select that node."""

        node: int

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title: str | None = None
        """The border title last drawn."""

    def on_click(self, event: events.Click) -> None:
        """A click on a node reference asks the app to select that node."""
        node = event.style.meta.get("node")
        if isinstance(node, int):
            event.stop()
            self.post_message(self.NodeClicked(node))

    def _draw(self, title: str, body: Content) -> None:
        """Title and text: each redrawn only if it changed (see Body)."""
        if title != self._title:
            self._title = title
            self.border_title = title
        self.query_one(Body).set(body)
