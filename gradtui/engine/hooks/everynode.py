"""The every-node hooks of one pass: a prehook before each node (stop here? note what flows in)
and a posthook after it (note what it sent on), read back in bulk (gradtui.engine.stats.bulk).

A pass that steps, stops by place, watches `norm>X`, runs on an accelerator or in distributed
follow mode hooks every node this way (a CPU pass in `continue` runs on the hook plan instead,
gradtui.engine.hooks.planned). `EveryNodeHooks` is made per pass and owns that pass's record
(`PassRecord`) and reads; what it needs of the session (breakpoints, pauses, events, the mode) it
asks through the session's public methods (`Owner`). The hot path of a stepping pass: one call
each per node. A node's hooks are put on when it may run next (by the posthook of the first node
that sends to it: the engine runs a node only once its senders have), so a pass handed over to the
plan after a pause puts none on the nodes after it: a 500,000-node chain paused at its first node
and continued keeps no Python hook (a dict, a handle and a bound hook, ~800 bytes) per node.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from gradtui.engine.compat import current_graph_task_id
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.stats.bulk import PassReads
from gradtui.engine.stats.passrecord import PassRecord, Ran, grad_inputs_handles, grad_outputs_handles, hand_off
from gradtui.engine.stats.summary import summarize_all
from gradtui.engine.stats.window import HELD_ELEMENTS
from gradtui.engine.stepper import Owner
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint
from gradtui.protocol.commands import Break, Delete, Flow, Help, ListBreakpoints

PROGRESS_INTERVAL = 0.05
"""Seconds between `Progress` events while the engine runs between pauses."""

CHECK_EVERY = 8
"""With a `nan` / `norm>X` breakpoint armed on a pass whose loss is on an accelerator,
statistics are read back (and tested) every this many nodes: one host read (a device sync)
per CHECK_EVERY nodes, a hit at most CHECK_EVERY - 1 nodes late. On the CPU a read costs no
sync, so a CPU pass reads at every node and stops exactly at the culprit, editable."""

READ_EVERY = 64
"""Without one, every this many nodes (NodeRan events arrive in batches of this many)."""

REGION_COMMANDS = (Break, Delete, ListBreakpoints, Help, Flow)
"""Commands that take effect while the engine runs, too."""


class EveryNodeHooks:
    """A prehook and a posthook on every node of one pass (both put on as the node's turn comes),
    its record and its reads (see module doc)."""

    def __init__(self, owner: Owner, state: PassRecord) -> None:
        self._owner = owner
        self.state = state
        """The pass's record (gradtui.engine.stats.passrecord)."""
        self._reads = PassReads(owner, state)
        self._handles: list[Any] = []
        self._prehooked = bytearray()
        """Per node, 1 once its prehook is on."""
        self._posthooked = bytearray()
        """Per node, 1 once its posthook is on."""
        self._nexts: list[tuple[int | None, ...]] = []

    def register(self) -> None:
        """Put the hooks on the pass's roots. Every other node gets its hooks from the posthook of
        its first sender to run (`_posthook`), before it can run (the engine runs a node once its
        senders have): a pass handed over to the plan puts none on the nodes after it (torch
        calls into Python at a node whose hooks were removed all the same, and keeps their dict),
        and its first pause registers the roots' hooks only."""
        nodes = self.state.capture.nodes
        self._prehooked = bytearray(len(nodes))
        self._posthooked = bytearray(len(nodes))
        self._nexts = self.state.capture.walk.nexts
        for root in self.state.capture.roots:
            self.put_prehook(root)

    def put_prehook(self, node: int) -> None:
        """Put node `node`'s prehook and posthook on, unless they are on already (a handed-over
        pass: the plan asks for them where it needs them, gradtui.engine.hooks.planned)."""
        if not self._prehooked[node]:
            self._prehooked[node] = 1
            prehook = functools.partial(self._prehook, node)
            self._handles.append(self.state.capture.nodes[node].register_prehook(prehook))
        self.put_posthook(node)

    def put_posthook(self, node: int) -> None:
        """Put node `node`'s posthook on, unless it is on already (a handed-over pass's plan asks
        for one on a node it hooks after it, and no prehook)."""
        if not self._posthooked[node]:
            self._posthooked[node] = 1
            posthook = functools.partial(self._posthook, node)
            self._handles.append(self.state.capture.nodes[node].register_hook(posthook))

    def close(self) -> None:
        """Remove every hook (the graph may outlive the pass: a retained graph, a held loss)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def read(self, node: int | None, after: tuple[int, tuple[Any, ...]] | None, pause: bool) -> Breakpoint | None:
        """Read the window back in bulk (see gradtui.engine.stats.bulk.PassReads.read)."""
        return self._reads.read(node, after, pause)

    # ---- hooks ---------------------------------------------------------------------------
    # The per-node hot path. `_prehook` is where a per-node decision to stop (a breakpoint by
    # place, stepping, a value breakpoint on the incoming gradient, or a caller's own check)
    # is made before the node runs: see the session's `stop_reason`.

    def _prehook(self, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Before a node runs: decide whether to pause, note what flows in (read back later, in bulk)."""
        state = self.state
        if state.planned is not None:  # handed over: the plan's hooks run the rest of the pass (and check quit)
            return state.planned.prehook(node, grads)
        owner = self._owner
        if owner.quitting_now():
            raise GradtuiQuit()
        if not self._own_call():
            return None
        state.running = node
        state.grad_outputs[node] = grad_outputs_handles(state, node, grads, owner.light)
        place = owner.stop_reason(state, node)
        value = None
        # With a watch, also read before the pass's last node: a small pass is then exact.
        if place is not None or state.window.held > HELD_ELEMENTS:
            value = self.read(node, None, pause=True)
        elif owner.watching() and (
            ((ran := len(state.ran)) and ran % state.check_every == 0) or state.done == len(state.capture.nodes) - 1
        ):
            # Only `nan` watched: a check says whether anything since the last read is not
            # finite; only then are the statistics read back (and the culprit found from them).
            if not owner.breakpoints.nan_only() or state.window.check():
                value = self.read(node, None, pause=True)
        reason = None
        if state.pending is not None:
            reason = f"{owner.hit(state.pending, state, node)}: {state.pending_reason}"
            state.pending = None
        elif isinstance(place, Breakpoint):
            reason = f"{owner.hit(place, state, node)}: {place.spec.text}"
        elif value is not None:
            reason = f"{owner.hit(value, state, node)}: {value.spec.text}"
        elif place is not None:
            reason = place
        new = None
        if reason is not None:
            pause = owner.pause_at(state, node, "before", reason, grads)
            if pause.edited:
                new = pause.grads
                state.grad_outputs[node] = summarize_all(new)
        while owner.follow is not None and (why := owner.follow(state, node)) is not None:
            self.read(node, None, pause=True)  # the parked pause shows what has run (a hit in it pauses first)
            pause = owner.pause_at(state, node, "before", why, grads if new is None else new)  # parked
            if pause.edited:
                new = pause.grads
                state.grad_outputs[node] = summarize_all(new)
        if reason is not None and owner.can_hand_over(state):
            state.hand_over_at = node  # continued from here: the plan's hooks take over after this node
        self._note_arrival(node, grads, new)
        return new

    def _note_arrival(self, node: int, grads: tuple[Any, ...], new: tuple[Any, ...] | None) -> None:
        """What the posthook will want of what arrived (`new`: an edit replaced it): a leaf's stats
        are read from its .grad; a sole sender's tensors are remembered for reuse."""
        state = self.state
        if node in state.capture.accumulators:
            # The gradient is about to become the leaf's .grad: holding it would make
            # AccumulateGrad copy it instead of taking it. Its stats are read from .grad.
            leaf = None
            for handle in state.grad_outputs[node]:
                if type(handle) is int:
                    leaf = state.capture.nodes[node].variable if leaf is None else leaf
                    if leaf.grad is None:
                        state.window.to_leaf(handle, leaf)
        # What the node will read: its posthook may find its outputs are the same values. Not for
        # a leaf's accumulator (it sends nothing on): a reference kept here would make it copy the
        # gradient into .grad instead of taking it (a ZeroTensor would become real zeros). Not
        # where the pass hands over after this node: the note only saves a measurement, and
        # `sole_inputs` is the whole graph's (a 100,000-node chain: ~0.1 s) for one node's use.
        elif new is None and state.hand_over_at != node and state.capture.sole_inputs[node]:
            state.arrived[node] = (grads, tuple(-1 if g is None else g._version for g in grads))

    def _own_call(self) -> bool:
        """Does this hook call belong to the pass's own engine call (not a nested backward)?"""
        state = self.state
        task = current_graph_task_id()
        if state.task is None:
            state.task = task
        return task == state.task

    def _posthook(
        self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        """After a node ran: note what it sent on (read back later, in bulk)."""
        state = self.state
        if state.planned is not None:
            return state.planned.posthook(node, grad_inputs, grad_outputs)
        if not self._own_call():
            return None
        owner = self._owner
        prehooked = self._prehooked  # first, as the node's receivers may run next: this hook may pause, or hand over
        for receiver in self._nexts[node]:
            if receiver is not None and not prehooked[receiver]:
                self.put_prehook(receiver)
        state.done += 1
        state.running = None
        state.completed[node] = 1
        arrived = state.grad_outputs.pop(node, ())
        sent = grad_inputs_handles(state, node, grad_inputs, arrived, owner.light)
        if state.hand_over_at != node:  # a hand-over clears what is handed off (`_hand_over`)
            hand_off(state, node, grad_inputs, sent)
        state.ran.append(Ran(node, state.done, arrived, sent))
        if state.prints is not None:  # the one call site of fingerprints (`gradtui diff`, `--against`)
            parted = state.prints.node(
                node,
                state.capture.nodes[node],
                grad_outputs,
                grad_inputs,
                () if owner.detached else owner.breakpoints.differs(state.fired),
            )
            if parted is not None:  # `differs>R`: the node has run; shown after it, no edits
                owner.pause_at(
                    state, node, "after", f"{owner.hit(parted[0], state, node)}: {parted[1]}", grad_inputs, late=True
                )
        total = len(state.capture.nodes)
        if state.done == total and owner.watching():
            self.read(None, (node, grad_inputs), pause=True)  # the last node: what it made, now
        elif len(state.ran) >= READ_EVERY or state.window.held > HELD_ELEMENTS:
            self.read(None, (node, grad_inputs), pause=True)
        now = time.monotonic()
        if now - state.last_progress >= PROGRESS_INTERVAL:
            state.last_progress = now
            owner.emit(ev.Progress(state.index, state.done, total))
        if state.hand_over_at == node:
            state.hand_over_at = None
            self._hand_over(node, grad_inputs)
        return None

    def _hand_over(self, node: int, grad_inputs: tuple[Any, ...]) -> None:
        """After `node`'s posthook: read back what the window holds (a `nan` there still stops,
        late), then run the rest of the pass on the hook plan: these hooks call the plan's from
        now on (no hook is registered or removed for it)."""
        state = self.state
        self.read(None, (node, grad_inputs), pause=True)
        if self._owner.can_hand_over(state):  # a pause in that read may have changed the mode
            # What these hooks keep for a receiver's prehook would hold the very gradient it is sent:
            # an AccumulateGrad would then copy it instead of taking it (a ZeroTensor made dense).
            state.handoff.clear()
            state.arrived.clear()
            state.planned = self._owner.plan_rest(state)
            state.planned.delegate_prehooks(self.put_prehook, self.put_posthook)
