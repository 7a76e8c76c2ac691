"""Reading a pass's statistics back in bulk, and the value watch over them (`PassReads`, owned
by a pass's every-node hooks, gradtui.engine.hooks.everynode).

The hooks put gradients in the pass's `StatsWindow` (gradtui.engine.stats.window) and call `read`
when the statistics are wanted: at a pause, every `check_every` nodes while a `nan` /
`norm>X` breakpoint is armed, when the window holds too much, and at the end of a pass. A read
emits the `NodeRan` events of the nodes that ran since the last one, tests the value
breakpoints on them in the order they ran (gradtui.engine.stats.watch), and pauses at the first hit,
naming its node exactly.
"""

from __future__ import annotations

from typing import Any

from gradtui.engine.stats.passrecord import PassRecord, Ran
from gradtui.engine.stats.watch import Hit, current, handles_tensors, hit_text, scan
from gradtui.engine.stats.window import resolve
from gradtui.engine.stepper import Owner
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Nan
from gradtui.protocol.nodes import info_title


class PassReads:
    """The bulk reads of one pass (see module doc)."""

    def __init__(self, owner: Owner, state: PassRecord) -> None:
        self._owner = owner
        self._state = state

    def read(self, node: int | None, after: tuple[int, tuple[Any, ...]] | None, pause: bool) -> Breakpoint | None:
        """Read the window back in bulk: emit a NodeRan for every node that ran since the last
        read, test value breakpoints on them in the order they ran, and pause (if `pause`) at the
        first hit, which names its node exactly. `node`: the node whose prehook reads (its
        incoming gradients are tested too: a match there is returned, for a pause before it);
        `after`: (node, outgoing gradients) of the posthook that reads."""
        owner, state = self._owner, self._state
        window = state.window
        # read() starts a new generation in new lists: this one keeps the tensors, for a late
        # pause's gradients (a leaf's is its .grad, which it became: a copy, read() must not see it).
        tensors = window.tensors
        if window.leaves:
            tensors = list(tensors)
            for entry, leaf in window.leaves.items():
                tensors[entry] = leaf.grad
        stats = window.read()
        if state.grad_outputs:
            state.grad_outputs = {n: resolve(h, stats) for n, h in state.grad_outputs.items()}
        if state.handoff:
            state.handoff = {k: (t, v, stats[h] if type(h) is int else h) for k, (t, v, h) in state.handoff.items()}
        ran, state.ran = state.ran, []
        index, emit, node_ran = state.index, owner.emit, ev.NodeRan
        seen = []
        for r in ran:
            event = node_ran(index, r.node, r.order, resolve(r.grad_outputs, stats), resolve(r.grad_inputs, stats))
            seen.append(event)
            emit(event)
        values = owner.breakpoints.values
        if not owner.watching():
            return None
        hit = None
        # Nothing non-finite read back and only `nan` watched: no node can match (statistics
        # reused from an earlier read were tested as what their sender sent on).
        if window.nonfinite or not all(Nan.of(bp.spec) for bp in values):
            hit, state.nan_seen = scan(seen, owner.breakpoints, state.nan_seen)
        if hit is not None and pause:
            self._pause_late(hit, ran, tensors, after)
        if node is None:
            return None
        found, state.nan_seen = current(state.grad_outputs[node], owner.breakpoints, state.nan_seen)
        return found

    def _pause_late(
        self, hit: Hit, ran: list[Ran], tensors: list[Any], after: tuple[int, tuple[Any, ...]] | None
    ) -> None:
        """Pause for a value breakpoint that matched a node that has run: shown after it (what it
        sent on) if it made a non-finite gradient, else before it (what it received); no edits."""
        owner, state = self._owner, self._state
        item = ran[hit.index]
        if after is not None and after[0] == item.node and hit.phase == "after":
            grads = after[1]
        else:
            grads = handles_tensors(item.grad_inputs if hit.phase == "after" else item.grad_outputs, tensors)
        state.capture.describe()  # a lazy capture's names, read now that the pause shows them
        title = info_title(state.capture.infos[item.node], item.node)
        reason = f"{owner.hit(hit.breakpoint, state, item.node)}: {hit_text(hit, len(ran), title)}"
        owner.pause_at(state, item.node, hit.phase, reason, grads, late=after is None or after[0] != item.node)
