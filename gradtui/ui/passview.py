"""One backward pass as the UI knows it (`PassView`), and walking its graph (`neighbour`).
Plain Python fed by engine events, no Textual (see state.py, which keeps the views)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import engine_order, node_info, node_title
from gradtui.protocol.stats import Stats, any_nonfinite, format_number
from gradtui.ui.history import PassSummary, combined_norm

Grads = tuple[Stats | None, ...]


@dataclass
class PassView:
    """One backward pass as the UI knows it: its graph, engine order and what has flowed."""

    index: int
    call: str
    call_text: str
    call_site: str
    graph: nx.DiGraph
    order: list[int]
    """Node ids in the order the engine runs them (the node list's rows)."""
    row: dict[int, int]
    """Node id -> its row in `order`."""
    total: int
    done: int = 0
    ran: dict[int, int] = field(default_factory=dict)
    """Node id -> the position (1-based) in which it ran."""
    grad_outputs: dict[int, Grads] = field(default_factory=dict)
    """Gradients that reached a node (after edits)."""
    grad_outputs_hist: dict[int, Grads] = field(default_factory=dict)
    """Incoming gradients with histograms, as a pause saw them, or as an edit made them when
    its summary has histograms (else dropped by the edit: `arrived_hist` keeps the original)."""
    arrived_hist: dict[int, Grads] = field(default_factory=dict)
    """Incoming gradients with histograms as they arrived, before any edit."""
    grad_inputs: dict[int, Grads] = field(default_factory=dict)
    """Gradients a node sent on, once it ran."""
    grad_inputs_hist: dict[int, Grads] = field(default_factory=dict)
    """Outgoing gradients with histograms (a pause after the node: `break nan`)."""
    edits: dict[int, list[tuple[str, Grads]]] = field(default_factory=dict)
    """Node id -> (command, gradients before it) for every edit made there."""
    nonfinite: set[int] = field(default_factory=set)
    """Nodes that received or sent a non-finite value."""
    finished: bool = False
    error: str | None = None
    failed_node: int | None = None
    leaf_grads: dict[int, Stats | None] = field(default_factory=dict)
    """Accumulator node id -> its leaf's `.grad` after the pass."""
    losses: tuple[float | None, ...] = ()
    """Per root, the loss value when backward was called (None if not a single element)."""
    recorded: bool = True
    """False: the pass ran unhooked, its graph is empty and no node statistics exist."""
    flow: tuple[ev.ParamFlow, ...] = ()
    """Gradient flow per leaf once the pass has ended, vanishing to exploding."""
    size: int | None = None
    """How many nodes the pass had, when its graph was not told (a recording's pass)."""
    kept: bool = True
    """False: a recording's pass that ran hooked but whose node statistics were not kept."""
    variables: ev.CallSiteVariables | None = None
    """The tensors and modules where backward was called (sent at the pass's first pause)."""
    differences: dict[int, ev.NodeDifference] = field(default_factory=dict)
    """Against a reference (`--against`): each matched node's difference, once the pass ended."""
    reference: str | None = None
    """The reference's name, once the pass's differences came (None: no reference)."""
    largest_difference: float | None = None
    """The pass's largest relative difference from the reference (None: none known)."""

    def difference(self, node: int) -> float | None:
        """The node's difference column: its gradient's or its forward's relative difference from
        the reference, whichever is larger (None: not matched, or not known)."""
        found = self.differences.get(node)
        return found.largest if found is not None else None

    @classmethod
    def from_event(cls, event: ev.PassStarted) -> PassView:
        """A fresh view of a pass that just started."""
        order = engine_order(event.graph)
        seen = set(order)
        order += [n for n in event.graph.nodes if n not in seen]  # defensive: never lose a node
        return cls(
            event.pass_index,
            event.call,
            event.call_text,
            event.call_site,
            event.graph,
            order,
            {node: i for i, node in enumerate(order)},
            event.graph.number_of_nodes(),
            losses=tuple(event.losses),
            recorded=event.recorded,
            size=event.nodes,
            kept=event.kept,
        )

    # ---- what the pass's events change ----------------------------------------------------

    def node_ran(self, event: ev.NodeRan) -> None:
        """A node of this pass ran: its place in the run and the gradients in and out."""
        self.ran[event.node] = event.order
        self.done = max(self.done, event.order)
        self.grad_outputs[event.node] = event.grad_outputs
        self.grad_inputs[event.node] = event.grad_inputs
        if any_nonfinite(event.grad_outputs) or any_nonfinite(event.grad_inputs):
            self.nonfinite.add(event.node)

    def paused_at(self, event: ev.Paused) -> None:
        """The engine paused at a node of this pass: the gradients it saw there (with histograms)."""
        self.done = max(self.done, event.done)
        if event.phase == "before":
            self.grad_outputs[event.node] = event.grads
            self.grad_outputs_hist[event.node] = event.grads
            self.arrived_hist.setdefault(event.node, event.grads)
        else:
            self.grad_inputs[event.node] = event.grads
            self.grad_inputs_hist[event.node] = event.grads
        if any_nonfinite(event.grads):
            self.nonfinite.add(event.node)

    def edited(self, event: ev.GradEdited) -> None:
        """An edit replaced a node's incoming gradient: the new one, the old kept with the command."""
        self.edits.setdefault(event.node, []).append((event.command, event.before))
        self.grad_outputs[event.node] = event.after
        if any(s is not None and s.histogram for s in event.after):
            self.grad_outputs_hist[event.node] = event.after
        else:
            self.grad_outputs_hist.pop(event.node, None)
        if any_nonfinite(event.after):
            self.nonfinite.add(event.node)

    def ended(self, event: ev.PassFinished) -> set[int]:
        """The pass ended (or raised): its leaf gradients and flow, the failed node; the rows it changed."""
        self.finished = True
        self.done = event.done
        self.leaf_grads = dict(event.leaf_grads)
        self.flow = tuple(event.flow)
        if event.error is None or event.error == "quit":
            return set()
        self.error = event.error
        self.failed_node = event.node
        if event.node is None:
            return set()
        if event.failed_grads:
            self.grad_outputs[event.node] = event.failed_grads
        return {event.node}

    # ---- what it says --------------------------------------------------------------------

    def loss_text(self) -> str:
        """`loss 0.4182`, `losses 0.41, 1.2`, or empty when no root was a single value."""
        known = [format_number(v) for v in self.losses if v is not None]
        if not known:
            return ""
        return f"loss {known[0]}" if len(self.losses) == 1 else "losses " + ", ".join(known)

    def incoming_norms(self) -> dict[int, float | None]:
        """Node id -> the combined norm of the gradients that reached it."""
        return {node: combined_norm(grads) for node, grads in self.grad_outputs.items()}

    def summary(self) -> PassSummary:
        """This pass in one line (kept long after the view is dropped)."""
        if self.recorded:
            bad = len(self.nonfinite)
        else:
            bad = sum(
                1 for f in self.flow if f.nonfinite or (f.grad_norm is not None and not math.isfinite(f.grad_norm))
            )
        return PassSummary(
            self.index,
            self.call_text or f"{self.call}()",
            self.losses,
            self.recorded,
            self.total or self.size or 0,
            self.error,
            bad,
            self.finished,
            self.kept,
            self.largest_difference,
            bool(self.differences),
        )

    def variable_norm(self, var: ev.Variable) -> float | None:
        """The norm of a call-site variable's gradient from this pass, once it is known: a leaf's
        (or a module's parameters' together) `.grad` once the pass has ended, a non-leaf's as its
        grad_fn received it; None before, or off the graph."""
        if not var.nodes:
            return None
        first = var.nodes[0]
        if var.kind == "module" or first in self.graph and node_info(self.graph, first).kind == "accumulate":
            return combined_norm(self.leaf_grads.get(node) for node in var.nodes) if self.finished else None
        grads = self.grad_outputs.get(var.nodes[0])
        stats = grads[var.slot] if grads is not None and var.slot < len(grads) else None
        return None if stats is None else stats.norm

    def leaf_names(self, nodes: Iterable[int]) -> dict[int, str]:
        """Leaf accumulator id -> what the pass's flow would call its tensor: its parameter's name,
        else its first label, else `#ID` (as the engine names a flow row)."""
        out = {}
        for node in nodes:
            if node in self.graph:
                info = node_info(self.graph, node)
                out[node] = info.param or (info.labels[0] if info.labels else f"#{node}")
        return out

    def title(self, node: int) -> str:
        """`#1 MulBackward0 (y)`."""
        return node_title(self.graph, node)

    def find(self, query: str, after_row: int) -> int | None:
        """Row of the next node (wrapping) whose op name, label or parameter contains `query`."""
        needle = query.strip().lower().removeprefix("#")
        if not needle:
            return None
        count = len(self.order)
        for step in range(1, count + 1):
            row = (after_row + step) % count
            node = self.order[row]
            data = node_info(self.graph, node)
            haystack = [data.name, *data.tags]
            if query.strip().startswith("#") and needle == str(node):
                return row
            if any(needle in item.lower() for item in haystack):
                return row
        return None


def neighbour(view: PassView, node: int, up: bool) -> int | None:
    """The node `u` (up: a consumer, toward the root) or `d` (down: the first input, toward
    the leaves) goes to from `node`; the one of them that comes first in engine order."""
    graph = view.graph
    if node not in graph:
        return None
    if up:
        found = sorted(graph.predecessors(node), key=lambda n: view.row.get(n, 0))
    else:
        found = [n for _, n, _ in sorted(graph.out_edges(node, data="slot"), key=lambda e: e[2])]
    return found[0] if found else None
