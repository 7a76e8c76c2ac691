"""The node list's rows as Rich segments: a node's (marker, id, op name, labels, module path,
the difference from the reference, flags) and a module's in the module tree (twisty, name, node
count, norm of the gradient leaving it, its nodes' largest difference). `NodeList` draws only the
rows on screen and asks `RowPainter` for each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style

from gradtui.protocol.breakpoints import matches_node
from gradtui.protocol.events import BreakpointInfo
from gradtui.protocol.nodes import INFO, NodeInfo, node_info
from gradtui.protocol.stats import format_number
from gradtui.ui.fmt import cut_left, difference_text, list_op
from gradtui.ui.listrows import ListRows
from gradtui.ui.modtree import ModuleTree, display_name
from gradtui.ui.state import PassView

NAME_WIDTH = 22
"""Op names longer than this are cut (labels start in one column)."""

MODULE_WIDTH = 24
"""The module path column (engine order) is at most this wide, cut from the left."""

MODULE_ROOM = 6
"""...and shown only when this many cells are left after the labels (labels come first)."""

SHORT_BELOW = 16
"""Op names lose their `Backward0` when the labels would get fewer cells than this."""

DIFF_WIDTH = 8
"""Cells of the difference column (against a reference): a space and `3.1e-02`."""


@dataclass
class Widths:
    """Column widths for one pass, so labels start in one column on every row."""

    id: int = 1
    name: int = 8
    short: int = 4
    """The op name without its `Backward0`, on narrow panes."""
    tags: int = 0
    """The widest labels."""
    module: int = 0
    """The widest module path (at most MODULE_WIDTH: longer ones are cut)."""

    @classmethod
    def of(cls, view: PassView) -> Widths:
        """Measured in one walk over the nodes' data (a 10,000-node pass has a few distinct op
        names: looking each node up in networkx, three times, took 0.1 s of the first paint)."""
        names: set[str] = set()
        modules: set[str] = set()
        tags = 0
        for _, data in view.graph.nodes(data=INFO):
            names.add(data.name)
            modules.add(data.module or "")
            tags = max(tags, len(" ".join(data.tags)))
        return cls(
            len(str(max(view.order, default=0))),
            min(NAME_WIDTH, max((len(name) for name in names), default=8)),
            min(NAME_WIDTH, max((len(list_op(name)) for name in names), default=4)),
            tags,
            min(MODULE_WIDTH, max(map(len, modules), default=0)),
            view.reference is not None,
        )

    differences: bool = False
    """The pass is compared with a reference: a difference column."""

    @property
    def natural(self) -> int:
        """Cells a row needs to show everything: marker, id, op, labels, module, difference, flags."""
        module = self.module + 1 if self.module else 0
        return 2 + self.id + 1 + self.name + 1 + self.tags + module + (DIFF_WIDTH if self.differences else 0) + 3


class RowPainter:
    """The segments of one row (see module doc); `style(name)` is the widget's component style
    `node-list--NAME`."""

    def __init__(self, style: Callable[[str], Style]) -> None:
        self._style = style
        self.widths = Widths()

    def row(
        self,
        rows: ListRows,
        row: int,
        width: int,
        base: Style,
        current: int | None,
        breakpoints: tuple[BreakpointInfo, ...],
    ) -> list[Segment]:
        """Row `row` of the list: a node's, or in the module view a module's or an indented node's."""
        tree, view = rows.tree, rows.view
        assert view is not None  # a list with rows shows a pass
        if tree is None:
            return self.node_row(view, rows.order[row], width, base, current, breakpoints)
        item = tree.rows[row]
        if item.module is not None:
            return self.module_row(tree, item.module, item.depth, width, base)
        assert item.node is not None  # a row without a module is a node's
        return self.node_row(view, item.node, width, base, current, breakpoints, indent=2 * item.depth)

    def module_row(self, tree: ModuleTree, path: str, depth: int, width: int, base: Style) -> list[Segment]:
        """`▾ layers.3      61  1.204e-3 ⚠`: twisty, name, node count, norm of the gradient leaving it."""
        module = tree.modules[path]
        stats = tree.stats(path)
        twisty = "▾" if path in tree.expanded else "▸"
        norm = format_number(stats.out_norm) if stats.out_norm is not None else "·"
        digits = len(str(max((m.count for m in tree.modules.values()), default=1)))
        right = f" {stats.count:>{digits}} {norm:>9} "
        diff = f"{difference_text(tree.difference(path)):>{DIFF_WIDTH - 1}} " if tree.view.reference is not None else ""
        right += diff
        flag = "⚠" if stats.nonfinite else " "
        name = display_name(module)
        room = max(1, width - 2 * depth - 2 - len(right) - 1)
        if len(name) > room:
            name = cut_left(name, room)
        pad = max(0, width - 2 * depth - 2 - len(name) - len(right) - 1)
        done = stats.ran == stats.count
        return [
            Segment(" " * (2 * depth) + twisty + " ", base + self._style("id")),
            Segment(name, base + self._style("module")),
            Segment(" " * pad, base),
            Segment(f" {stats.count:>{digits}}", base + self._style("count")),
            Segment(f" {norm:>9} ", base + (self._style("done") if done else Style())),
            *((Segment(diff, base + self._style("diff")),) if diff else ()),
            Segment(flag, base + self._style("warning")),
        ]

    def node_row(
        self,
        view: PassView,
        node: int,
        width: int,
        base: Style,
        current: int | None,
        breakpoints: tuple[BreakpointInfo, ...],
        indent: int | None = None,
    ) -> list[Segment]:
        """Marker, id, op name, labels; the module path in engine order (`indent` None); the
        difference; the flags (⚠ ●) in cells of their own at the end. `current`: the node the
        engine is paused at."""
        data = node_info(view.graph, node)
        flags = self._flags(view, node, data, base, breakpoints)
        widths, lead = self.widths, indent or 0
        diff = view.reference is not None and width >= lead + 2 + widths.id + 1 + SHORT_BELOW + DIFF_WIDTH
        name, name_width = self._name(data.name, width - (lead + 4 + widths.id) - (DIFF_WIDTH if diff else 0))
        tail = len(flags) + 1 if flags else 0  # the flags and a blank after them
        gap = 1 if flags else 0  # and one before them
        reserve = tail + (DIFF_WIDTH if diff else 0)
        tags = " ".join(data.tags)
        fixed = lead + 2 + widths.id + 1 + name_width + 1
        room = max(0, width - fixed - reserve)
        module = (data.module or "") if indent is None and room - len(tags) - 1 >= MODULE_ROOM else ""
        if module:
            cap = min(MODULE_WIDTH, room - len(tags) - 1 - gap)
            if len(module) > cap:
                module = cut_left(module, cap)
            room -= len(module) + 1
        elif len(tags) > room - gap:
            tags = tags[: max(0, room - gap - 1)] + "…" if room - gap > 0 else ""
        marker, marker_style = self._marker(view, node, current)
        name_style = base + (self._style("pending") if node not in view.ran and node != current else Style())
        segments = [
            Segment(" " * lead + f"{marker} ", base + marker_style),
            Segment(f"{node:>{widths.id}} ", base + self._style("id")),
            Segment(f"{name:<{name_width}} ", name_style),
            Segment(tags, base + self._style("label")),
        ]
        used = fixed + len(tags)
        if module:
            pad = width - used - len(module) - reserve - 1
            segments.append(Segment(" " * max(1, pad), base))
            segments.append(Segment(module, base + self._style("module-path")))
            used += max(1, pad) + len(module)
        if diff:
            pad = width - used - DIFF_WIDTH - tail - gap
            segments.append(Segment(" " * max(0, pad), base))
            segments.append(
                Segment(f"{difference_text(view.difference(node)):>{DIFF_WIDTH}}", base + self._style("diff"))
            )
            used += max(0, pad) + DIFF_WIDTH
        pad = width - used - len(flags) - 1
        if flags and pad >= 0:
            segments.append(Segment(" " * pad, base))
            segments.extend(flags)
        return segments

    def _flags(
        self, view: PassView, node: int, data: NodeInfo, base: Style, breakpoints: tuple[BreakpointInfo, ...]
    ) -> list[Segment]:
        """⚠ (a non-finite gradient) and ● (a breakpoint matches the node)."""
        flags = []
        if node in view.nonfinite:
            flags.append(Segment("⚠", base + self._style("warning")))
        if _has_breakpoint(breakpoints, view, node, data):
            flags.append(Segment("●", base + self._style("breakpoint")))
        return flags

    def _name(self, name: str, room: int) -> tuple[str, int]:
        """The op name and its column's width, the same on every row of the pass whatever flags
        a row has (labels start in one column): `Mul` rather than `MulBackward0` when the labels
        (what the user named) would get fewer than SHORT_BELOW cells of `room`; cut with `…`."""
        width = self.widths.name
        if room - width < min(self.widths.tags, SHORT_BELOW):
            name, width = list_op(name), self.widths.short
        return (name[: width - 1] + "…" if len(name) > width else name), width

    def _marker(self, view: PassView, node: int, current: int | None) -> tuple[str, Style]:
        if node == view.failed_node:
            return "✗", self._style("failed")
        if node == current:
            return "▶", self._style("current")
        if node in view.ran:
            return "✓", self._style("done")
        return " ", Style()


def _has_breakpoint(breakpoints: tuple[BreakpointInfo, ...], view: PassView, node: int, data: NodeInfo) -> bool:
    first = view.order and view.order[0] == node
    return any(matches_node(bp.spec, data, node, view.index, bool(first)) for bp in breakpoints)
