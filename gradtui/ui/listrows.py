"""What the node list shows on each row, with no Textual: the shown pass's nodes in engine order,
sorted by their difference from a reference (`by_difference`), or folded into the module tree
(`by_module`, `modtree.ModuleTree`); the moves of the tree's keys (fold, expand, collapse,
reveal a node) as `TreeMove`s, which the widget applies (resize, redraw, move the cursor).
"""

from __future__ import annotations

from typing import NamedTuple

from gradtui.ui.modtree import ModuleTree
from gradtui.ui.state import PassView, UIState


class TreeMove(NamedTuple):
    """What a move did: the rows changed (`changed`: resize and redraw) and where the cursor goes
    (None: it stays)."""

    changed: bool = False
    cursor: int | None = None


class ListRows:
    """The rows of the node list (see module doc). The widget sets `by_module` and
    `by_difference` from its reactives."""

    def __init__(self, state: UIState) -> None:
        self.state = state
        self.by_module = False
        self.by_difference = False
        self._tree: ModuleTree | None = None
        self._sorted: tuple[dict, list[int], dict[int, int]] | None = None
        """(the differences sorted by, the nodes sorted, node -> its row)."""

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

    def forget_tree(self) -> None:
        """Build the module tree anew on next use (a new pass, another view)."""
        self._tree = None

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
        """The flat list's row of `node`."""
        if not self.by_difference:
            return self.view.row.get(node) if self.view is not None else None
        self.order  # noqa: B018 - makes the sorted rows current
        return self._sorted[2].get(node) if self._sorted is not None else None

    @property
    def count(self) -> int:
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

    def module_at(self, row: int) -> str | None:
        """The module path on `row`, a module row of the module view (else None)."""
        tree = self.tree
        if tree is None or not 0 <= row < len(tree.rows):
            return None
        return tree.rows[row].module

    def titles(self) -> tuple[str, str] | None:
        """The pane's title and subtitle for the pass shown and the order (short enough for the
        34-column list at 80x24; engine order is the default: unsaid); None before a pass."""
        view = self.view
        if view is None:
            return None
        if not view.recorded:
            title = f"nodes · pass {view.index} ran unhooked"
        elif self.by_module:
            title = f"by module · pass {view.index} · {view.total}"
        elif self.by_difference:
            title = f"by difference · pass {view.index}"
        else:
            title = f"pass {view.index} · {view.total} nodes"
        return title, "nodes · grad leaving" if self.by_module and view.recorded else ""

    # ---- moves ---------------------------------------------------------------------------

    def reveal(self, node: int) -> TreeMove:
        """Select `node`: its row (in the module view, the modules around it expanded)."""
        tree = self.tree
        if tree is None:
            return TreeMove(cursor=self._row_of(node))
        before = len(tree.rows)
        row = tree.reveal(node)
        return TreeMove(len(tree.rows) != before, row)

    def fold(self, row: int) -> TreeMove:
        """Module view: expand or collapse the module on `row`."""
        path, tree = self.module_at(row), self.tree
        if path is None or tree is None:
            return TreeMove()
        tree.toggle(path)
        return TreeMove(changed=True)

    def expand(self, row: int) -> TreeMove:
        """Module view: expand the module on `row`, or step into it if it is expanded."""
        path, tree = self.module_at(row), self.tree
        if path is None or tree is None:
            return TreeMove()
        if tree.set_expanded(path, True):
            return TreeMove(changed=True)
        return TreeMove(cursor=row + 1 if row + 1 < self.count else None)

    def collapse(self, row: int) -> TreeMove:
        """Module view: collapse the module on `row`, or go to the module around it."""
        tree = self.tree
        if tree is None or not self.count:
            return TreeMove()
        item = tree.rows[row]
        if item.module is not None and tree.set_expanded(item.module, False):
            return TreeMove(changed=True)
        parent = (
            tree.modules[item.module].parent
            if item.module is not None
            else tree.member.get(item.node)
            if item.node is not None
            else None
        )
        return TreeMove(cursor=tree.row_of_module(parent) if parent is not None else None)
