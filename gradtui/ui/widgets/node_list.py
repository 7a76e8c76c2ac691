"""The node list: every node of the pass in engine order, one row each, drawn lazily; or
(`by_module`) the same nodes folded into a tree of nn.Module paths (`ModuleTree`); each row's
segments are `node_rows.RowPainter`'s.

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
from gradtui.ui.modtree import ModuleTree
from gradtui.ui.state import PassView, UIState
from gradtui.ui.widgets.node_rows import RowPainter, Widths


class NodeList(ScrollView, can_focus=True):
    """Rows of `state.view.order`: marker, id, op name, labels, module, flags (⚠ non-finite,
    ● breakpoint); or the module tree: module rows (count, norm of the gradient leaving it, ⚠)
    that expand to their submodules and nodes."""

    COMPONENT_CLASSES = {
        "node-list--cursor", "node-list--id", "node-list--label", "node-list--done",
        "node-list--current", "node-list--failed", "node-list--warning", "node-list--breakpoint",
        "node-list--pending", "node-list--module", "node-list--module-path", "node-list--count",
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

        node_list: "NodeList"

        @property
        def control(self) -> "NodeList":
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
        self._painter = RowPainter(self._style)
        self._tree: ModuleTree | None = None

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
        """Title the pane by the pass shown and the order (short enough for the 34-column list at
        80x24; engine order is the default: unsaid)."""
        view = self.view
        if view is None:
            return
        self.border_title = (f"by module · pass {view.index} · {view.total}" if self.by_module
                             else f"by difference · pass {view.index}" if self.by_difference
                             else f"pass {view.index} · {view.total} nodes")
        if not view.recorded:
            self.border_title = f"nodes · pass {view.index} ran unhooked"
        self.border_subtitle = "nodes · grad leaving" if self.by_module and view.recorded else ""

    # ---- what is shown -------------------------------------------------------------------

    @property
    def view(self) -> PassView | None:
        """The pass shown."""
        return self.state.view

    @property
    def tree(self) -> ModuleTree | None:
        """The module tree of the shown pass (module view only), built on first use."""
        view = self.view
        if not self.by_module or view is None:
            return None
        if self._tree is None or self._tree.view is not view:
            self._tree = ModuleTree(view)
            self._tree.auto_expand()
        return self._tree

    @property
    def order(self) -> list[int]:
        """The nodes of the flat list, row by row: engine order, or (`by_difference`) by their
        difference from the reference, largest first, the unknown last (kept per set of
        differences the pass got)."""
        view = self.view
        if view is None:
            return []
        if not self.by_difference:
            return view.order
        if self._sorted is None or self._sorted[0] is not view.differences:
            unknown = -1.0
            ranked = sorted(view.order, key=lambda n: -(d if (d := view.difference(n)) is not None else unknown))
            self._sorted = (view.differences, ranked, {node: i for i, node in enumerate(ranked)})
        return self._sorted[1]

    def _row_of(self, node: int) -> int | None:
        if not self.by_difference:
            return self.view.row.get(node) if self.view is not None else None
        self.order  # noqa: B018 - makes the sorted rows current
        return self._sorted[2].get(node) if self._sorted is not None else None

    _sorted: tuple[dict, list[int], dict[int, int]] | None = None

    @property
    def row_count(self) -> int:
        """How many rows the list has."""
        tree = self.tree
        if tree is not None:
            return len(tree.rows)
        return len(self.order)

    def node_at(self, row: int) -> int | None:
        """The node shown on `row` (None for a module row or past the end)."""
        tree = self.tree
        if tree is not None:
            return tree.rows[row].node if 0 <= row < len(tree.rows) else None
        order = self.order
        return order[row] if 0 <= row < len(order) else None

    @property
    def selected(self) -> int | None:
        """The selected node id (None on a module row)."""
        count = self.row_count
        return self.node_at(min(self.cursor, count - 1)) if count else None

    @property
    def selected_module(self) -> str | None:
        """The selected module path, on a module row of the module view."""
        tree = self.tree
        if tree is None or not 0 <= self.cursor < len(tree.rows):
            return None
        return tree.rows[self.cursor].module

    @property
    def natural_width(self) -> int:
        """Cells the shown pass's rows need (the app sizes the pane by it)."""
        return self._painter.widths.natural

    def reset(self) -> None:
        """A new pass on screen: size the list for it and select its first row."""
        view = self.view
        self._tree = None
        if view:
            self._painter.widths = Widths.of(view)
        self._resize()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.cursor = 0
        self.refresh()

    def _resize(self) -> None:
        self.virtual_size = Size(0, self.row_count)

    def select_node(self, node: int) -> None:
        """Move the selection to `node` (in the module view, expanding the modules around it)."""
        tree = self.tree
        if tree is not None:
            before = len(tree.rows)
            row = tree.reveal(node)
            if len(tree.rows) != before:
                self._resize()
                self.refresh()
            if row is not None:
                self.cursor = row
        elif (row := self._row_of(node)) is not None:
            self.cursor = row

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
        node = self._kept_node
        self._tree = None
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
        self.watch_by_module(self.by_module)

    def toggle_difference(self) -> None:
        """Between engine order and the order of the difference from the reference (the flat
        list: from the module tree too)."""
        self._kept_node = self.selected
        self.by_module = False
        self.by_difference = not self.by_difference

    _kept_node: int | None = None

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
        path, tree = self.selected_module, self.tree
        if path is not None and tree is not None:
            tree.toggle(path)
            self._resize()
            self.refresh()

    def action_expand(self) -> None:
        """Module view: expand the selected module, or step into an expanded one."""
        path, tree = self.selected_module, self.tree
        if path is None or tree is None:
            return
        if tree.set_expanded(path, True):
            self._resize()
            self.refresh()
        elif self.cursor + 1 < self.row_count:
            self.cursor += 1

    def action_collapse(self) -> None:
        """Module view: collapse the selected module, or go to the module around the selection."""
        tree = self.tree
        if tree is None or not self.row_count:
            return
        row = tree.rows[self.cursor]
        if row.module is not None and tree.set_expanded(row.module, False):
            self._resize()
            self.refresh()
            return
        parent = tree.modules[row.module].parent if row.module is not None else tree.member.get(row.node)
        target = tree.row_of_module(parent) if parent is not None else None
        if target is not None:
            self.cursor = target

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
        view = self.view
        if view is None or row >= self.row_count:
            return Strip.blank(width, base)
        if row == self.cursor:
            base = base + self._style("cursor")
        tree, rows, current = self.tree, self._painter, self.state.current
        if tree is None:
            segments = rows.node_row(view, self.order[row], width, base, current, self.state.markers)
        else:
            item = tree.rows[row]
            if item.module is not None:
                segments = rows.module_row(tree, item.module, item.depth, width, base)
            else:
                segments = rows.node_row(view, item.node, width, base, current, self.state.markers,
                                          indent=2 * item.depth)
        return Strip(segments).crop_extend(0, width, base).apply_meta({"row": row})

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"node-list--{name}")
