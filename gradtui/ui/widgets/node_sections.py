"""The detail pane's sections about one node, each a few lines of Content: where the backward
failed, what the node is, the gradient arriving (and before an edit), its norm over passes, what it
sent on, its source and saved values, its neighbours (each a click away), a leaf's `.grad`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.content import Content

from gradtui.protocol.nodes import NodeInfo, node_info
from gradtui.protocol.stats import format_number
from gradtui.ui import fmt
from gradtui.ui.state import PassView, UIState
from gradtui.ui.widgets.body import node_ref
from gradtui.ui.widgets.detail_text import ACCENT, ERROR, KEY, MUTED, OK, WARN, bad, heading, line, saved_text
from gradtui.ui.widgets.grad_stats import grad_lines, grads_lines
from gradtui.ui.widgets.source import source_block, source_row


@dataclass(frozen=True, slots=True)
class NodeSections:
    """The sections of `node` in `view` (see module doc), `width` cells wide; `compact`: the
    80x24 layout (the source line right under the labels, without context lines)."""

    state: UIState
    home: str | None
    """The script's folder: paths in tracebacks are shown relative to it."""
    width: int
    compact: bool

    def lines(self, view: PassView, node: int) -> list[Content]:
        """Every section with something to say, a blank line between two; the outgoing gradients
        first when the node is paused after it ran."""
        state = self.state
        after = node == state.current and state.paused is not None and state.paused.phase == "after"
        flow = (
            (self.outgoing, self.incoming, self.over_passes)
            if after
            else (self.incoming, self.over_passes, self.outgoing)
        )
        lines: list[Content] = []
        for section in (self.failure, self.about, *flow, self.source, self.neighbours, self.leaf):
            part = list(section(view, node))
            if part:
                if lines:
                    lines.append(Content(""))
                lines.extend(part)
        return lines

    def failure(self, view: PassView, node: int) -> Iterable[Content]:
        """The backward's error, and the user's part of its traceback, on the node that raised."""
        if view.failed_node != node:
            return
        yield line(("✗ the backward failed here: ", f"bold {ERROR}"), (view.error or "", ERROR))
        if self.state.traceback:
            for text in fmt.user_traceback(self.state.traceback, self.home).rstrip().splitlines():
                yield Content.styled(text, ERROR)

    def about(self, view: PassView, node: int) -> Iterable[Content]:
        """Op, kind, where the engine is with it, why it paused; labels, parameter, module."""
        data = node_info(view.graph, node)
        paused = self.state.paused if node == self.state.current else None
        if node == view.failed_node:
            where = ("✗ raised while running", ERROR)
        elif paused is not None:
            where = (
                "▶ paused here, before it runs"
                if paused.phase == "before" and not self.compact
                else "▶ paused here"
                if paused.phase == "before"
                else "▶ paused after it ran",
                WARN,
            )
        elif node in view.ran:
            where = (f"✓ ran {view.ran[node]} of {view.total}", OK)
        else:
            where = ("pending", MUTED)
        kind: list[str | tuple[str, str]] = [("  kind ", MUTED), data.kind] if data.kind != "op" else []
        yield line(("op ", MUTED), (data.name, KEY), *kind, "  ", where)
        if paused is not None and paused.reason != "step":
            yield line(("why ", MUTED), (paused.reason, WARN))
        names: list[str | tuple[str, str]] = [("labels ", MUTED), (", ".join(data.labels) or "—", ACCENT)]
        if data.param:
            names += [("  param ", MUTED), (data.param, ACCENT)]
        if data.module:
            names += [("  module ", MUTED), data.module]
        yield line(*names)
        if self.compact:  # `at demo.py:24 │ loss = ((prediction - target) ** 2).mean()`: the line, one row
            yield from source_row(data, self.width)

    def source(self, view: PassView, node: int) -> Iterable[Content]:
        """The node's source line with a few lines around, highlighted, the line marked; its saved values."""
        data = node_info(view.graph, node)
        lines = [] if self.compact else source_block(data, self.width)
        if lines:
            yield heading("source", data.source or "")
            yield from lines
        saved = saved_text(data.saved)
        if saved:
            yield line(("saved ", MUTED), saved)

    def over_passes(self, view: PassView, node: int) -> Iterable[Content]:
        """A sparkline of this node's incoming norm over the last recorded passes (same id and op)."""
        name = node_info(view.graph, node).name
        series = [(index, norm) for index, norm in self.state.norms.series(node, name) if index <= view.index]
        if len(series) < 2:
            return
        norms = [norm for _, norm in series]
        known = [n for n in norms if n is not None]
        low = format_number(min(known)) if known else "-"
        high = format_number(max(known)) if known else "-"
        room = max(8, self.width - len(low) - len(high) - 12)
        bars = fmt.series_sparkline(norms[-room:])
        yield heading(
            "incoming norm over passes", f"passes {series[-room:][0][0]}–{series[-1][0]} · #{node} {name} in each"
        )
        yield bad(line(("  min ", MUTED), low, " ", (bars, ACCENT), " ", high, (" max", MUTED)))

    def incoming(self, view: PassView, node: int) -> Iterable[Content]:
        """The gradient arriving at the node (of the tensor it made), and what it was before an edit."""
        data = node_info(view.graph, node)
        grads = view.grad_outputs.get(node)
        yield self._incoming_heading(view, node, data)
        if grads is None:
            if node == view.failed_node:
                yield Content.styled("  not known: the node raised before it finished", MUTED)
            else:
                yield from self._not_received(view, node)
            return
        hist = view.grad_outputs_hist.get(node)
        yield from grads_lines(grads, hist, "in", self.width)
        edits = view.edits.get(node, [])
        if edits:
            before = edits[0][1]
            arrived = view.arrived_hist.get(node)
            if hist is None and arrived is not None:
                # the edit's summary has no histogram or values: keep the ones it arrived with
                yield Content.styled("  as it arrived, before the edit:", MUTED)
                yield from grads_lines(arrived, arrived, "in", self.width)
            else:
                yield line(("  before the edit: ", MUTED), "; ".join(fmt.one_line(s) for s in before))

    @staticmethod
    def _not_received(view: PassView, node: int) -> Iterable[Content]:
        """A node that has not run: which of the nodes that send it its gradient have sent their
        part (their outgoing gradients say what), and which have not. It said "not arrived yet"
        when its one sender had sent it long before."""
        senders = sorted(view.graph.predecessors(node))
        sent = [sender for sender in senders if sender in view.grad_inputs]
        waiting = [sender for sender in senders if sender not in view.grad_inputs]
        if not sent:
            yield Content.styled("  not arrived yet", MUTED)
            return
        yield line(
            ("  sent by ", MUTED),
            _refs(view, sent),
            (" (its outgoing gradients)" if len(sent) == 1 else " (their outgoing gradients)", MUTED),
        )
        if waiting:
            yield line(("  still to send: ", MUTED), _refs(view, waiting))
        yield Content.styled("  received when this node runs", MUTED)

    @staticmethod
    def _incoming_heading(view: PassView, node: int, data: NodeInfo) -> Content:
        of = ", ".join(data.tags)
        note = f"grad of {of}" if of else ""
        edits = view.edits.get(node, [])
        if edits:
            note += ("  · " if note else "") + "edited: " + ", ".join(cmd for cmd, _ in edits)
        return heading("incoming gradient", note, WARN if edits else MUTED)

    def outgoing(self, view: PassView, node: int) -> Iterable[Content]:
        """What the node sent on, slot by slot, to each input (a click away)."""
        grads = view.grad_inputs.get(node)
        if grads is None:
            return
        targets = {slot: nxt for _, nxt, slot in view.graph.out_edges(node, data="slot")}
        hist = view.grad_inputs_hist.get(node)
        yield heading("outgoing gradients", "what it sent on to its inputs")
        for slot, stats in enumerate(grads):
            target = targets.get(slot)
            to = (
                node_ref(Content.styled(view.title(target), ACCENT), target)
                if target is not None
                else Content.styled("(no input)", ACCENT)
            )
            yield line(("  → ", MUTED), to)
            yield from grad_lines(
                stats, hist[slot] if hist is not None and slot < len(hist) else None, "    ", self.width
            )

    @staticmethod
    def neighbours(view: PassView, node: int) -> Iterable[Content]:
        """Its inputs and consumers, each a click away (`node_ref`)."""

        def refs(nodes: Iterable[int], none: str) -> Content:
            titles = [node_ref(Content.styled(view.title(n), ACCENT), n) for n in nodes]
            return Content("  ").join(titles) if titles else Content.styled(none, MUTED)

        yield line(("↓ inputs (gradient goes to)  ", MUTED), refs(view.graph.successors(node), "none: a leaf"))
        yield line(("↑ consumers (comes from)     ", MUTED), refs(view.graph.predecessors(node), "none: the root"))

    def leaf(self, view: PassView, node: int) -> Iterable[Content]:
        """A leaf's `.grad` once the pass has ended."""
        if node not in view.leaf_grads:
            return
        data = node_info(view.graph, node)
        name = data.param or (data.labels[0] if data.labels else "leaf")
        yield heading(f"{name}.grad after the pass")
        yield from grad_lines(view.leaf_grads[node], None, "  ", self.width)


def _refs(view: PassView, nodes: list[int]) -> Content:
    """Nodes' titles, each a click away, comma separated."""
    return Content(", ").join(node_ref(Content.styled(view.title(n), ACCENT), n) for n in nodes)
