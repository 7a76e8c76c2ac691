"""The graph pane: the selected node's neighbourhood, and the whole pass when it is small.

Drawn as text from the networkx graph: consumers above (gradient comes from them), the node,
its inputs below (gradient goes to them); then, for passes of at most `WHOLE_LIMIT` nodes,
every node layered by `nx.topological_generations` (layer k = k steps from the root).
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx
from textual.app import ComposeResult
from textual.content import Content

from gradtui.protocol.nodes import node_info
from gradtui.ui.fmt import short_op
from gradtui.ui.state import PassView, UIState
from gradtui.ui.widgets.body import Body, BodyPane, node_ref

WHOLE_LIMIT = 40
"""Passes with at most this many nodes are drawn whole."""

NEIGHBOURS_SHOWN = 8
"""At most this many consumers / inputs are listed."""


class GraphPane(BodyPane):
    """Neighbourhood of the selected node, and the layered pass if small (see module doc)."""

    def __init__(self, state: UIState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self._layers: list[list[int]] | None = None
        self._layers_of: int | None = None
        self._shown: int | None = None
        self._natural: tuple[int, int] | None = None
        """(id of the pass's graph, its natural width)."""

    def compose(self) -> ComposeResult:
        """One Body holds the drawing."""
        yield Body(id="graph-body")

    def show(self, node: int | None) -> None:
        """Draw around `node`."""
        self._shown = node
        view = self.state.view
        if view is not None and not view.recorded:
            self._draw(
                f"graph · pass {view.index}",
                Content.styled("this pass ran unhooked: its graph was not captured", "$text-muted"),
            )
            return
        if view is None or node is None or node not in view.graph:
            if view is None and self.state.script_over:
                text = "no graph: the script never called backward()"
            else:
                text = "no pass yet" if view is None else "select a node to see its neighbours"
            self._draw("graph", Content.styled(text, "$text-muted"))
            return
        lines = list(self._neighbourhood(view, node))
        if view.total <= WHOLE_LIMIT:
            lines += [Content(""), *self._whole(view, node)]
        self._draw(f"graph · pass {view.index} · {view.total} nodes", Content("\n").join(lines))

    def touched(self, node: int, rows: frozenset[int]) -> bool:
        """Does the drawing around `node` show any of `rows` (its neighbours, or the whole pass)?"""
        view = self.state.view
        return (
            view is not None
            and node in view.graph
            and (
                view.total <= WHOLE_LIMIT or bool(rows & {*view.graph.successors(node), *view.graph.predecessors(node)})
            )
        )

    def natural_width(self) -> int | None:
        """Cells the longest line needs for the shown pass (its neighbourhood lines, the whole
        pass's depth rows chip by chip); None for a pass too big to draw whole."""
        view = self.state.view
        if view is None or not view.recorded or view.total > WHOLE_LIMIT or not view.total:
            return None
        if self._natural is None or self._natural[0] != id(view.graph):
            chips = [self._chip(view, n, -1).cell_length for n in view.graph]
            titles = [len(view.title(n)) + 10 for n in view.graph]  # ` from ↓ ✓ ` before a title
            gutter = len(str(view.total)) + 4
            self._natural = (id(view.graph), max(max(titles), gutter + max(chips)))
        return self._natural[1]

    def on_resize(self) -> None:
        """The whole-pass rows are wrapped to the width: redraw once it is laid out."""
        self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self._shown is not None:
            self.show(self._shown)

    def show_module(self, path: str) -> None:
        """A module row is selected: there is no single node to draw around."""
        self._shown = None
        view = self.state.view
        title = f"graph · pass {view.index} · {view.total} nodes" if view is not None else self._title or "graph"
        self._draw(
            title, Content.styled(f"module {path}: select one of its nodes to see its neighbours", "$text-muted")
        )

    def _marker(self, view: PassView, node: int) -> tuple[str, str]:
        if node == view.failed_node:
            return "✗", "$text-error"
        if node == self.state.current:
            return "▶", "$text-warning"
        if node in view.nonfinite:
            return "⚠", "$text-warning"
        if node in view.ran:
            return "✓", "$text-success"
        return "·", "$text-muted"

    def _chip(self, view: PassView, node: int, selected: int, long: bool = False) -> Content:
        data = node_info(view.graph, node)
        tags = data.tags
        marker, style = self._marker(view, node)
        if long:
            text = view.title(node)
        else:
            text = f"#{node} {short_op(data.name)}" + (f"({tags[0]})" if tags else "")
        name_style = "bold reverse" if node == selected else ("" if node in view.ran else "$text-muted")
        return node_ref(Content.assemble((marker + " ", style), (text, name_style)), node)

    def _listing(self, view: PassView, label: str, nodes: list[int], selected: int) -> Iterable[Content]:
        """`label` on the first line, one node per line, at most NEIGHBOURS_SHOWN."""
        shown = nodes[:NEIGHBOURS_SHOWN]
        for i, other in enumerate(shown):
            yield Content.assemble(
                (f" {label if i == 0 else '':<6} ", "$text-muted"), self._chip(view, other, selected, long=True)
            )
        if len(nodes) > len(shown):
            yield Content.styled(f"        … {len(nodes) - len(shown)} more", "$text-muted")

    def _neighbourhood(self, view: PassView, node: int) -> Iterable[Content]:
        """Consumers (gradient comes from them), the node, its inputs (gradient goes to them)."""
        graph = view.graph
        consumers = sorted(graph.predecessors(node))
        inputs = [n for _, n, _ in sorted(graph.out_edges(node, data="slot"), key=lambda e: e[2])]
        if consumers:
            yield from self._listing(view, "from ↓", consumers, node)
        else:
            yield Content.styled(" from ↓ nothing: the root", "$text-muted")
        yield from self._listing(view, "node ↓", [node], node)
        if inputs:
            yield from self._listing(view, "to", inputs, node)
        else:
            yield Content.styled(" to     nothing: a leaf", "$text-muted")

    def _whole(self, view: PassView, selected: int) -> Iterable[Content]:
        if self._layers_of != id(view.graph):
            self._layers = [sorted(layer) for layer in nx.topological_generations(view.graph)]
            self._layers_of = id(view.graph)
        yield Content.styled("whole pass, by depth from the root", "bold $text-primary")
        width = len(str(len(self._layers or []) - 1))
        gutter = width + 4
        room = max(10, self.scrollable_content_region.width - gutter - 1)
        for depth, layer in enumerate(self._layers or []):
            # Wrapped by hand, chip by chip, so a continuation row keeps the depth gutter.
            rows: list[list[Content]] = [[]]
            used = 0
            for chip in (self._chip(view, n, selected) for n in layer):
                need = chip.cell_length + (2 if rows[-1] else 0)
                if rows[-1] and used + need > room:
                    rows.append([])
                    used, need = 0, chip.cell_length
                rows[-1].append(chip)
                used += need
            for i, row in enumerate(rows):
                label = f" {depth:>{width}} │ " if i == 0 else " " * (width + 1) + " │ "
                yield Content.assemble((label, "$text-muted"), Content("  ").join(row))
