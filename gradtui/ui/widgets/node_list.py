"""The node list: every node of the pass in engine order, one row each, drawn lazily.

A Line API widget (ScrollView + `render_line`): only the rows on screen are ever rendered,
so a 10,000-node pass costs what 40 rows cost, and a step redraws only the rows whose
marker changed (`refresh_nodes`), never the whole list.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gradtui.core.breakpoints import Breakpoints, matches_node
from gradtui.core.graph import node_tags
from gradtui.ui.state import PassView, UIState

NAME_WIDTH = 22
"""Op names longer than this are cut (labels start in one column)."""


class NodeList(ScrollView, can_focus=True):
    """Rows of `state.view.order`: marker, id, op name, labels, flags (⚠ non-finite, ● breakpoint)."""

    COMPONENT_CLASSES = {
        "node-list--cursor", "node-list--id", "node-list--label", "node-list--done",
        "node-list--current", "node-list--failed", "node-list--warning", "node-list--breakpoint",
        "node-list--pending",
    }

    BINDINGS = [
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "jump(0)", "first", show=False),
        Binding("end", "jump(-1)", "last", show=False),
    ]

    cursor: reactive[int] = reactive(0, always_update=True, init=False, repaint=False)
    """Row of the selected node."""

    @dataclass
    class Selected(Message):
        """The selection moved to `node`."""

        node: int

    def __init__(self, state: UIState, breakpoints: Breakpoints, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.breakpoints = breakpoints
        self._id_width = 1
        self._name_width = 8

    # ---- what is shown -------------------------------------------------------------------

    @property
    def view(self) -> PassView | None:
        """The pass shown."""
        return self.state.view

    @property
    def selected(self) -> int | None:
        """The selected node id."""
        view = self.view
        if view is None or not view.order:
            return None
        return view.order[min(self.cursor, len(view.order) - 1)]

    def reset(self) -> None:
        """A new pass: size the list for it and select its first row."""
        view = self.view
        rows = len(view.order) if view else 0
        if view:
            self._id_width = len(str(max(view.order, default=0)))
            self._name_width = min(NAME_WIDTH, max((len(view.graph.nodes[n]["name"]) for n in view.order), default=8))
        self.virtual_size = Size(0, rows)
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.cursor = 0
        self.refresh()

    def select_node(self, node: int) -> None:
        """Move the selection to `node`."""
        if self.view is not None and node in self.view.row:
            self.cursor = self.view.row[node]

    def refresh_nodes(self, nodes: set[int]) -> None:
        """Redraw the rows of these nodes, if they are on screen."""
        view = self.view
        if view is None:
            return
        top = round(self.scroll_offset.y)
        bottom = top + self.size.height
        for node in nodes:
            row = view.row.get(node)
            if row is not None and top <= row < bottom:
                self.refresh_line(row)

    def refresh_visible(self) -> None:
        """Redraw every row on screen (breakpoints changed)."""
        self.refresh()

    # ---- keys ----------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        """Move the selection by `delta` rows."""
        self._set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        """Move the selection by a screenful."""
        self._set_cursor(self.cursor + direction * max(1, self.size.height - 1))

    def action_jump(self, row: int) -> None:
        """Select the first (0) or last (-1) row."""
        count = len(self.view.order) if self.view else 0
        self._set_cursor(row if row >= 0 else count - 1)

    def _set_cursor(self, row: int) -> None:
        count = len(self.view.order) if self.view else 0
        if count:
            self.cursor = max(0, min(count - 1, row))

    def watch_cursor(self, old: int, new: int) -> None:
        """Redraw the two rows, keep the cursor on screen (centred when it jumps), tell the app."""
        self.refresh_line(old)
        self.refresh_line(new)
        top = round(self.scroll_offset.y)
        if not top <= new < top + self.size.height:  # off screen: bring it to the middle
            self.scroll_to_region(Region(0, new, 1, 1), animate=False, immediate=True, center=True)
        node = self.selected
        if node is not None:
            self.post_message(self.Selected(node))

    def on_click(self, event) -> None:
        """Select the clicked row."""
        self._set_cursor(round(self.scroll_offset.y) + event.y)

    def on_focus(self) -> None:
        """The cursor's colour depends on focus."""
        self.refresh()

    def on_blur(self) -> None:
        """The cursor's colour depends on focus."""
        self.refresh()

    # ---- drawing -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        """Row `scroll_y + y`."""
        row = round(self.scroll_offset.y) + y
        width = self.size.width
        base = self.rich_style
        view = self.view
        if view is None or row >= len(view.order):
            return Strip.blank(width, base)
        if row == self.cursor:
            base = base + self._style("cursor")
        segments = self._row_segments(view, view.order[row], width, base)
        return Strip(segments).crop_extend(0, width, base)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"node-list--{name}")

    def _row_segments(self, view: PassView, node: int, width: int, base: Style) -> list[Segment]:
        data = view.graph.nodes[node]
        marker, marker_style = self._marker(view, node)
        flags = []
        if node in view.nonfinite:
            flags.append(Segment("⚠", base + self._style("warning")))
        if self._has_breakpoint(view, node, data):
            flags.append(Segment("●", base + self._style("breakpoint")))
        name = data["name"]
        if len(name) > self._name_width:
            name = name[: self._name_width - 1] + "…"
        tags = " ".join(node_tags(data))
        fixed = 2 + self._id_width + 1 + self._name_width + 1
        room = max(0, width - fixed - 3)
        if len(tags) > room:
            tags = tags[: max(0, room - 1)] + "…" if room else ""
        name_style = base + (self._style("pending") if node not in view.ran and node != self.state.current else Style())
        segments = [
            Segment(f"{marker} ", base + marker_style),
            Segment(f"{node:>{self._id_width}} ", base + self._style("id")),
            Segment(f"{name:<{self._name_width}} ", name_style),
            Segment(tags, base + self._style("label")),
        ]
        used = fixed + len(tags)
        pad = width - used - len(flags) - 1
        if flags and pad > 0:
            segments.append(Segment(" " * pad, base))
            segments.extend(flags)
        return segments

    def _marker(self, view: PassView, node: int) -> tuple[str, Style]:
        if node == view.failed_node:
            return "✗", self._style("failed")
        if node == self.state.current:
            return "▶", self._style("current")
        if node in view.ran:
            return "✓", self._style("done")
        return " ", Style()

    def _has_breakpoint(self, view: PassView, node: int, data: dict) -> bool:
        first = view.order and view.order[0] == node
        return any(matches_node(bp.spec, data, node, view.index, bool(first)) for bp in self.breakpoints)
