"""The node list's column (node list above, output below), whose right border can be dragged.

Textual has no splitter: a press on the column's last cell (the panes' right borders) captures
the mouse, and while the button is held each move posts `Dragged` with the column the pointer
is at; the app sizes the column to it (gradtui.ui.layout)."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.containers import Vertical
from textual.message import Message


class LeftColumn(Vertical):
    """A vertical container whose right edge follows a drag of its border (see module doc)."""

    @dataclass
    class Dragged(Message):
        """The border was dragged to screen column `x`."""

        x: int

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dragging = False

    def on_mouse_down(self, event: events.MouseDown) -> None:
        """A press on the right border starts a drag."""
        if event.screen_x == self.region.right - 1:
            self.dragging = True
            self.capture_mouse()
            event.stop()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        """While dragging, the border follows the pointer."""
        if self.dragging:
            event.stop()
            self.post_message(self.Dragged(event.screen_x))

    def on_mouse_up(self, event: events.MouseUp) -> None:
        """The drag ends."""
        if self.dragging:
            self.dragging = False
            self.release_mouse()
            event.stop()
