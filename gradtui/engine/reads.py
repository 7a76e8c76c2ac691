"""Reading a pass's statistics back in bulk, and the value watch over them: a mixin of `Session`.

The session's hooks put gradients in the pass's `StatsWindow` (gradtui.engine.window) and call
`_read` when the statistics are wanted: at a pause, every `check_every` nodes while a `nan` /
`norm>X` breakpoint is armed, when the window holds too much, and at the end of a pass. A read
emits the `NodeRan` events of the nodes that ran since the last one, tests the value
breakpoints on them in the order they ran (gradtui.engine.watch), and pauses at the first hit,
naming its node exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradtui.model import events as ev
from gradtui.model.breakpoints import Breakpoint, Breakpoints
from gradtui.engine.stepper import Pause
from gradtui.model.nodes import node_title
from gradtui.engine.recorder import PassRecord, Ran
from gradtui.engine.watch import Hit, current, handles_tensors, hit_text, scan
from gradtui.engine.window import resolve


class BulkReads:
    """The session's reads (see module doc); the attributes below are the session's."""

    breakpoints: Breakpoints
    _detached: bool

    if TYPE_CHECKING:  # the session's and NodeHooks' (stubs here would shadow them)
        def emit(self, event: ev.Event) -> None: ...

        def _hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str: ...

        def _wait(self, state: PassRecord, node: int, phase: str, reason: str, grads: tuple[Any, ...],
                  late: bool = False) -> Pause: ...

    def _read(self, state: PassRecord, node: int | None, after: tuple[int, tuple[Any, ...]] | None,
              pause: bool) -> Breakpoint | None:
        """Read the window back in bulk: emit a NodeRan for every node that ran since the last
        read, test value breakpoints on them in the order they ran, and pause (if `pause`) at the
        first hit, which names its node exactly. `node`: the node whose prehook reads (its
        incoming gradients are tested too: a match there is returned, for a pause before it);
        `after`: (node, outgoing gradients) of the posthook that reads."""
        window = state.window
        # read() starts a new generation in new lists: this one keeps the tensors, for a late
        # pause's gradients (a leaf's is its .grad, which it became: a copy, read() must not see it).
        tensors = window.tensors
        if window.leaves:
            tensors = list(tensors)
            for entry, leaf in window.leaves.items():
                tensors[entry] = leaf.grad
        stats = window.read()
        if state.incoming:
            state.incoming = {n: resolve(h, stats) for n, h in state.incoming.items()}
        if state.handoff:
            state.handoff = {k: (t, v, stats[h] if type(h) is int else h) for k, (t, v, h) in state.handoff.items()}
        ran, state.ran = state.ran, []
        index, emit, node_ran = state.index, self.emit, ev.NodeRan
        seen = []
        for r in ran:
            event = node_ran(index, r.node, r.order, resolve(r.incoming, stats), resolve(r.outgoing, stats))
            seen.append(event)
            emit(event)
        values = self.breakpoints.values
        if self._detached or not values:
            return None
        hit = None
        # Nothing non-finite read back and only `nan` watched: no node can match (statistics
        # reused from an earlier read were tested as what their sender sent on).
        if window.nonfinite or any(bp.spec.kind != "nan" for bp in values):
            hit, state.nan_seen = scan(seen, self.breakpoints, state.nan_seen)
        if hit is not None and pause:
            self._pause_late(state, hit, ran, tensors, after)
        if node is None:
            return None
        found, state.nan_seen = current(state.incoming[node], self.breakpoints, state.nan_seen)
        return found

    def _pause_late(self, state: PassRecord, hit: Hit, ran: list[Ran], tensors: list[Any],
                    after: tuple[int, tuple[Any, ...]] | None) -> None:
        """Pause for a value breakpoint that matched a node that has run: shown after it (what it
        sent on) if it made a non-finite gradient, else before it (what it received); no edits."""
        item = ran[hit.index]
        if after is not None and after[0] == item.node and hit.phase == "after":
            grads = after[1]
        else:
            grads = handles_tensors(item.outgoing if hit.phase == "after" else item.incoming, tensors)
        title = node_title(state.capture.graph if state.capture.graph.built else _Titles(state.capture.attrs),
                           item.node)
        reason = f"{self._hit(hit.breakpoint, state, item.node)}: {hit_text(hit, len(ran), title)}"
        self._wait(state, item.node, hit.phase, reason, grads, late=after is None or after[0] != item.node)


class _Titles:
    """Just enough of a graph for `node_title` (`.nodes[i]`), over a capture's attribute dicts,
    so naming a node does not build the networkx view."""

    def __init__(self, attrs: list[dict[str, Any]]) -> None:
        self.nodes = attrs
