"""How wide the panes are: sized by what they show, moved by the user. No Textual here.

The node list's column is as wide as its rows need (a short pass's rows are short: its
column was 40% of a 160-column terminal, mostly empty, while the detail pane cut the source
lines), at least LEFT_MIN and at most LEFT_SHARE of the terminal unless the user widens it. In
the wide layout the graph pane is as wide as its longest line (at most GRAPH_SHARE of what the
node list leaves), the detail pane takes the rest. `<` `>` and `-` `+` (or a drag of the node
list's right border) move them by STEP cells and stay moved for the passes after.
"""

from __future__ import annotations

from dataclasses import dataclass

LEFT_MIN, LEFT_SHARE = 34, 0.4
"""The node list column's least width, and its share of the terminal when sized by content."""

GRAPH_MIN, GRAPH_SHARE = 30, 0.45
"""The graph pane's least width (wide layout), and its share of what the node list leaves."""

FLOOR = 16
"""No pane is made narrower than this by the user."""

LEFT_CHROME = 3
"""Border (2) and the scrollbar gutter (1) around the node list's rows."""

GRAPH_CHROME = 5
"""Border (2), padding (2) and the scrollbar gutter (1) around the graph pane's lines."""

STEP = 4
"""Cells a key moves a pane's edge by."""


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, max(low, high)))


@dataclass
class PaneSizes:
    """The user's moves of the panes' edges, and the widths they give (see module doc)."""

    left_moved: int = 0
    """Cells the user moved the node list's right edge by (+: wider)."""
    graph_moved: int = 0
    """Cells the user widened the graph pane by (wide layout)."""

    def left(self, width: int, natural: int) -> int:
        """The node list column's width on a `width`-cell terminal for rows of `natural` cells."""
        sized = _clamp(natural + LEFT_CHROME, LEFT_MIN, int(width * LEFT_SHARE))
        return _clamp(sized + self.left_moved, FLOOR, width - 2 * FLOOR)

    def graph(self, room: int, natural: int | None) -> int:
        """The graph pane's width (wide layout) in the `room` cells right of the node list, for
        lines of `natural` cells (None: not known, a pass too big to draw whole)."""
        share = int(room * GRAPH_SHARE)
        sized = share if natural is None else _clamp(natural + GRAPH_CHROME, GRAPH_MIN, share)
        return _clamp(sized + self.graph_moved, FLOOR, room - FLOOR)

    def drag_left(self, width: int, natural: int, edge: int) -> None:
        """The user dragged the node list's right border to column `edge`."""
        self.left_moved += edge + 1 - self.left(width, natural)
