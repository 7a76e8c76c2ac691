"""The node list: every node of the pass in engine order, one row each, drawn lazily; or
(`by_module`) the same nodes folded into a tree of nn.Module paths (`ModuleTree`); each row's
segments are `node_rows.RowPainter`'s, and which node or module each row shows is
`listrows.ListRows`'s.

A Line API widget (ScrollView + `render_line`): only the rows on screen are ever rendered,
so a 10,000-node pass costs what 40 rows cost, and a step redraws only the rows whose
marker changed (`refresh_nodes`), never the whole list. The tree's rows are a flat list
rebuilt on expand and collapse, so it is drawn the same way.

It watches the app's `changes` (what the UI state's events changed): a new pass resets it, a
pause selects the paused node, changed rows are redrawn; what the other panes must redraw for
the selection it says in messages (`PassShown`, `Refreshed`), as it says a move (`Selected`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gradtui.ui.changes import Changes
from gradtui.ui.listrows import ListRows, TreeMove
from gradtui.ui.modtree import ModuleTree
from gradtui.ui.state import PassView, UIState
from gradtui.ui.widgets.node_rows import RowPainter, Widths


class NodeList(ScrollView, can_focus=True):
    """Rows of `state.view.order`: marker, id, op name, labels, module, flags (⚠ non-finite,
    ● breakpoint); or the module tree: module rows (count, norm of the gradient leaving it, ⚠)
    that expand to their submodules and nodes."""

    COMPONENT_CLASSES = {
        "node-list--cursor",
        "node-list--id",
        "node-list--label",
        "node-list--done",
        "node-list--current",
        "node-list--failed",
        "node-list--warning",
        "node-list--breakpoint",
        "node-list--pending",
        "node-list--module",
        "node-list--module-path",
        "node-list--count",
        "node-list--diff",
    }

    BINDINGS = [
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "jump(0)", "first", show=False),
        Binding("end", "jump(-1)", "last", show=False),
        Binding("enter,space", "fold", "fold", show=False),
        Binding("right,l", "expand", "expand", show=False),
        Binding("left,h", "collapse", "collapse", show=False),
    ]

    cursor: reactive[int] = reactive(0, always_update=True, init=False, repaint=False)
    """Row of the selection."""
    by_module: reactive[bool] = reactive(False, init=False)
    """Show the module tree instead of engine order."""
    by_difference: reactive[bool] = reactive(False, init=False)
    """Against a reference: the nodes sorted by their difference from it, largest first."""

    @dataclass
    class Selected(Message):
        """The selection moved to `node`."""

        node: int

    @dataclass
    class ModuleSelected(Message):
        """The selection moved to the row of module `path` (module view)."""

        path: str

    @dataclass
    class PassShown(Message):
        """Another pass is on screen (the list was reset to it): size the panes, show its selection."""

        node_list: NodeList

        @property
        def control(self) -> NodeList:
            """The node list that shows it."""
            return self.node_list

    @dataclass
    class Refreshed(Message):
        """Rows changed (`rows`) or the script ended (`finished`) while `node` stays selected
        (None: a module row, or nothing): the panes that show it may be stale."""

        node: int | None
        rows: frozenset[int]
        finished: bool

    def __init__(self, state: UIState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        """The UI state: the pass shown, the paused node, the breakpoints' markers."""
        self.rows = ListRows(state)
        """Which node or module each row shows (the reactives `by_module`, `by_difference` set it)."""
        self._painter = RowPainter(self._style)
        self._kept_node: int | None = None
        """The node selected before the view changed, to select again after."""

    def on_mount(self) -> None:
        """Redraw what the state's changes touch, as the app publishes them."""
        self.watch(self.app, "changes", self._changed, init=False)

    def _changed(self, changes: Changes) -> None:
        if changes.new_pass:
            self.reset()
            self.retitle()
            self.post_message(self.PassShown(self))
        elif changes.rows:
            self.refresh_nodes(changes.rows)
        if changes.breakpoints:
            self.refresh()  # the markers of any row on screen
        current = self.state.current
        if changes.paused and current is not None:
            self.select_node(current)  # the Selected message redraws the panes
        elif changes.rows or changes.finished:
            self.post_message(self.Refreshed(self.selected, frozenset(changes.rows), changes.finished))

    def retitle(self) -> None:
        """Title the pane by the pass shown and the order (`ListRows.titles`)."""
        titles = self.rows.titles()
        if titles is not None:
            self.border_title, self.border_subtitle = titles

    # ---- what is shown -------------------------------------------------------------------

    @property
    def view(self) -> PassView | None:
        """The pass shown."""
        return self.state.view

    @property
    def tree(self) -> ModuleTree | None:  # type: ignore[override]  # the module tree, not DOMNode's debug tree
        """The module tree of the shown pass (module view only)."""
        return self.rows.tree

    @property
    def row_count(self) -> int:
        """How many rows the list has."""
        return self.rows.count

    def node_at(self, row: int) -> int | None:
        """The node shown on `row` (None for a module row or past the end)."""
        return self.rows.node_at(row)

    @property
    def selected(self) -> int | None:
        """The selected node id (None on a module row)."""
        count = self.row_count
        return self.node_at(min(self.cursor, count - 1)) if count else None

    @property
    def selected_module(self) -> str | None:
        """The selected module path, on a module row of the module view."""
        return self.rows.module_at(self.cursor)

    @property
    def natural_width(self) -> int:
        """Cells the shown pass's rows need (the app sizes the pane by it)."""
        return self._painter.widths.natural

    def reset(self) -> None:
        """A new pass on screen: size the list for it and select its first row."""
        view = self.view
        self.rows.forget_tree()
        if view:
            self._painter.widths = Widths.of(view)
        self._resize()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.cursor = 0
        self.refresh()

    def _resize(self) -> None:
        size = Size(0, self.row_count)
        if size != self.virtual_size:
            self.virtual_size = size
            # The scroll range is the old one until the next layout: a scroll to the cursor now (the
            # module view opened with the paused node below the old last row) would stop short.
            self.call_after_refresh(self._show_cursor)

    def _show_cursor(self) -> None:
        """Bring the cursor's row to the middle of the list if it is off screen."""
        top, row = round(self.scroll_offset.y), self.cursor
        if not top <= row < top + self.size.height:
            self.scroll_to_region(Region(0, row, 1, 1), animate=False, immediate=True, center=True)

    def select_node(self, node: int) -> None:
        """Move the selection to `node` (in the module view, expanding the modules around it)."""
        self._move(self.rows.reveal(node))

    def _move(self, move: TreeMove) -> None:
        if move.changed:
            self._resize()
            self.refresh()
        if move.cursor is not None:
            self.cursor = move.cursor

    def refresh_nodes(self, nodes: set[int]) -> None:
        """Redraw the rows of these nodes, if they are on screen (module view: every row on
        screen, since module rows sum up their nodes)."""
        view = self.view
        if view is None or not nodes:
            return
        if self.by_module or self.by_difference:
            self.refresh()  # module rows sum up their nodes; sorted rows move when differences come
            return
        top = round(self.scroll_offset.y)
        bottom = top + self.size.height
        for node in nodes:
            row = view.row.get(node)
            if row is not None and top <= row < bottom:
                self.refresh_line(row)

    def watch_by_module(self, by_module: bool) -> None:
        """Switch views, keeping the selected node selected."""
        self.rows.by_module = by_module
        node = self._kept_node
        self.rows.forget_tree()
        self._resize()
        self.refresh()
        self.retitle()
        if node is not None:
            self.select_node(node)
        else:
            self.cursor = min(self.cursor, max(0, self.row_count - 1))

    def toggle_modules(self) -> None:
        """Between engine order and the module tree."""
        self._kept_node = self.selected
        self.by_module = not self.by_module

    def watch_by_difference(self, by_difference: bool) -> None:
        """Switch the flat list's order, keeping the selected node selected."""
        self.rows.by_difference = by_difference
        self.watch_by_module(self.by_module)

    def toggle_difference(self) -> None:
        """Between engine order and the order of the difference from the reference (the flat
        list: from the module tree too)."""
        self._kept_node = self.selected
        self.by_module = False
        self.by_difference = not self.by_difference

    # ---- keys ----------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        """Move the selection by `delta` rows."""
        self._set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        """Move the selection by a screenful."""
        self._set_cursor(self.cursor + direction * max(1, self.size.height - 1))

    def action_jump(self, row: int) -> None:
        """Select the first (0) or last (-1) row."""
        self._set_cursor(row if row >= 0 else self.row_count - 1)

    def _set_cursor(self, row: int) -> None:
        count = self.row_count
        if count:
            self.cursor = max(0, min(count - 1, row))

    def action_fold(self) -> None:
        """Module view: expand or collapse the selected module."""
        self._move(self.rows.fold(self.cursor))

    def action_expand(self) -> None:
        """Module view: expand the selected module, or step into an expanded one."""
        self._move(self.rows.expand(self.cursor))

    def action_collapse(self) -> None:
        """Module view: collapse the selected module, or go to the module around the selection."""
        self._move(self.rows.collapse(self.cursor))

    def watch_cursor(self, old: int, new: int) -> None:
        """Redraw the two rows, keep the cursor on screen (centred when it jumps), tell the app."""
        self.refresh_line(old)
        self.refresh_line(new)
        self._show_cursor()
        # Rows just added (a pass's first batch, `gradtui attach` to a script paused deep in it)
        # give the list its scrollbar only at the next layout: until then it cannot scroll, and
        # the paused row was left off screen. Looked at again once laid out.
        self.call_after_refresh(self._show_cursor)
        node = self.selected
        if node is not None:
            self.post_message(self.Selected(node))
        elif self.selected_module is not None:
            self.post_message(self.ModuleSelected(self.selected_module))

    def on_click(self, event) -> None:
        """Select the clicked row: the row number is in the style's meta of what was drawn
        there (as Textual's OptionList does), so borders and scrolling cannot shift it."""
        row = event.style.meta.get("row")
        if isinstance(row, int):
            self._set_cursor(row)

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
        width = self.scrollable_content_region.width  # not under the scrollbar
        base = self.rich_style
        if self.view is None or row >= self.row_count:
            return Strip.blank(width, base)
        if row == self.cursor:
            base = base + self._style("cursor")
        segments = self._painter.row(self.rows, row, width, base, self.state.current, self.state.breakpoints)
        return Strip(segments).crop_extend(0, width, base).apply_meta({"row": row})

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"node-list--{name}")
