"""The session's per-node hooks: the prehook before each node (stop here? note what flows in),
the posthook after it (note what it sent on), and the pause itself (`_wait`: blocks the
engine's thread on the command queue). A mixin of `Session`, the hot path of every pass:
plain functions of the pass's `PassRecord`, one call each per node.
"""

from __future__ import annotations

import gc
import queue  # queue.Empty: no command yet
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradtui.model import events as ev
from gradtui.model.breakpoints import Breakpoint, Breakpoints
from gradtui.model.commands import Break, Delete, Flow, Help, ListBreakpoints, Quit
from gradtui.engine.compat import current_graph_task_id
from gradtui.engine.dispatch import CommandRunner
from gradtui.engine.stepper import Mode, Pause, Stepper
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.recorder import PassRecord, Ran, hand_off, incoming_stats, outgoing_stats
from gradtui.engine.summary import summarize_all
from gradtui.engine.window import HELD_ELEMENTS

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


class NodeHooks:
    """The hooks and the pause (see module doc); the attributes below are the session's."""

    breakpoints: Breakpoints
    follow: Callable[[PassRecord, int], str | None] | None
    _quitting: threading.Event
    _detached: bool
    _stepper: Stepper
    _dispatch: CommandRunner
    _collector: bool

    if TYPE_CHECKING:  # the session's and BulkReads' (stubs here would shadow them)
        _light: bool

        def emit(self, event: ev.Event) -> None: ...

        def _hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str: ...

        def _read(self, state: PassRecord, node: int | None, after: Any, pause: bool) -> Breakpoint | None: ...

        def _can_hand_over(self, state: PassRecord) -> bool: ...

        def _hand_over(self, state: PassRecord, node: int, grad_inputs: tuple[Any, ...]) -> None: ...

    # ---- hooks ---------------------------------------------------------------------------
    # The per-node hot path. `_prehook` is where a per-node decision to stop (a breakpoint by
    # place, stepping, a value breakpoint on the incoming gradient, or a caller's own check)
    # is made before the node runs: see `_stop_reason`.

    def _prehook(self, state: PassRecord, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Before a node runs: decide whether to pause, note what flows in (read back later, in bulk)."""
        if self._quitting.is_set():
            raise GradtuiQuit()
        if state.planned is not None:  # handed over: the plan's hooks run the rest of the pass
            return state.planned.prehook(node, grads)
        if not self._own_call(state):
            return None
        state.running = node
        light = self._light
        state.incoming[node] = incoming_stats(state, node, grads, light)
        place = self._stop_reason(state, node)
        watching = not self._detached and self.breakpoints.watching()
        value = None
        # With a watch, also read before the pass's last node: a small pass is then exact.
        if place is not None or state.window.held > HELD_ELEMENTS:
            value = self._read(state, node, None, pause=True)
        elif watching and (((ran := len(state.ran)) and ran % state.check_every == 0)
                           or state.done == len(state.capture.nodes) - 1):
            # Only `nan` watched: a check says whether anything since the last read is not
            # finite; only then are the statistics read back (and the culprit found from them).
            if not self.breakpoints.nan_only() or state.window.check():
                value = self._read(state, node, None, pause=True)
        reason = None
        if state.pending is not None:
            reason = f"{self._hit(state.pending, state, node)}: {state.pending_reason}"
            state.pending = None
        elif isinstance(place, Breakpoint):
            reason = f"{self._hit(place, state, node)}: {place.spec.text}"
        elif value is not None:
            reason = f"{self._hit(value, state, node)}: {value.spec.text}"
        elif place is not None:
            reason = place
        new = None
        if reason is not None:
            pause = self._wait(state, node, "before", reason, grads)
            if pause.edited:
                new = pause.grads
                state.incoming[node] = summarize_all(new)
        while self.follow is not None and (why := self.follow(state, node)) is not None:
            self._read(state, node, None, pause=True)  # the parked pause shows what has run (a hit in it pauses first)
            pause = self._wait(state, node, "before", why, grads if new is None else new)  # parked
            if pause.edited:
                new = pause.grads
                state.incoming[node] = summarize_all(new)
        if reason is not None and self._can_hand_over(state):
            state.hand_over_at = node  # continued from here: the plan's hooks take over after this node
        if node in state.capture.accumulators:
            # The gradient is about to become the leaf's .grad: holding it would make
            # AccumulateGrad copy it instead of taking it. Its stats are read from .grad.
            leaf = None
            for handle in state.incoming[node]:
                if type(handle) is int:
                    leaf = state.capture.nodes[node].variable if leaf is None else leaf
                    if leaf.grad is None:
                        state.window.to_leaf(handle, leaf)
        # What the node will read: its posthook may find its outputs are the same values. Not for
        # a leaf's accumulator (it sends nothing on): a reference kept here would make it copy the
        # gradient into .grad instead of taking it (a ZeroTensor would become real zeros).
        elif new is None and state.capture.sole_inputs[node]:
            state.arrived[node] = (grads, tuple(-1 if g is None else g._version for g in grads))
        return new

    def _stop_reason(self, state: PassRecord, node: int) -> Breakpoint | str | None:
        """Must the engine stop before `node`, whatever its gradients are? A breakpoint that
        matches it by place (op, label, #ID, module, FILE:LINE, pass N), "step", "loss" (a loss
        breakpoint matched the pass's roots), or None. The one place for a per-node check that
        needs no statistics (a caller's own "park here", say): it runs before the node does, and
        whatever it returns makes the hook read the window back and pause."""
        if state.pending is not None:
            return "loss"
        if self._detached:
            return None
        if self.breakpoints.places:
            bp = self.breakpoints.find_place(state.capture.attrs[node], node, state.index, state.done == 0,
                                             state.fired)
            if bp is not None:
                return bp
        return "step" if self._stepper.mode is Mode.STEP else None

    @staticmethod
    def _own_call(state: PassRecord) -> bool:
        """Does this hook call belong to the pass's own engine call (not a nested backward)?"""
        task = current_graph_task_id()
        if state.task is None:
            state.task = task
        return task == state.task

    def _posthook(self, state: PassRecord, node: int, grad_inputs: tuple[Any, ...],
                  grad_outputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """After a node ran: note what it sent on (read back later, in bulk)."""
        if state.planned is not None:
            return state.planned.posthook(node, grad_inputs, grad_outputs)
        if not self._own_call(state):
            return None
        state.done += 1
        state.running = None
        state.completed[node] = 1
        incoming = state.incoming.pop(node, ())
        outgoing = outgoing_stats(state, node, grad_inputs, incoming, self._light)
        hand_off(state, node, grad_inputs, outgoing)
        state.ran.append(Ran(node, state.done, incoming, outgoing))
        total = len(state.capture.nodes)
        if state.done == total and not self._detached and self.breakpoints.watching():
            self._read(state, None, (node, grad_inputs), pause=True)  # the last node: what it made, now
        elif len(state.ran) >= READ_EVERY or state.window.held > HELD_ELEMENTS:
            self._read(state, None, (node, grad_inputs), pause=True)
        now = time.monotonic()
        if now - state.last_progress >= PROGRESS_INTERVAL:
            state.last_progress = now
            self.emit(ev.Progress(state.index, state.done, total))
        if state.hand_over_at == node:
            state.hand_over_at = None
            self._hand_over(state, node, grad_inputs)

    def _wait(self, state: PassRecord, node: int, phase: str, reason: str, grads: tuple[Any, ...],
              late: bool = False, editable: bool = False) -> Pause:
        """Pause: emit Paused, then run commands until one resumes the engine. `late`: `node`
        has run already (a value breakpoint read back after it): nothing can be edited.
        `editable`: paused after the node in its posthook, whose result an edit replaces."""
        pause = Pause(node, phase, tuple(grads), late=late, editable_after=editable)
        state.capture.describe()  # a lazy capture's metadata, read now that someone looks
        self._stepper.pause = pause
        if self._collector:
            gc.enable()  # the user may stay here long while other threads (the UI) make garbage
        try:
            self.emit(ev.Paused(state.index, node, state.capture.attrs[node]["name"], phase,  # type: ignore[arg-type]
                                reason, summarize_all(grads, histogram=True), state.done, len(state.capture.nodes)))
            while True:
                try:
                    command, meant_for, request = self._stepper.take(timeout=0.25)
                except queue.Empty:
                    if self._quitting.is_set():
                        raise GradtuiQuit() from None
                    continue
                if command.needs_pause and meant_for is not None and meant_for is not pause:
                    self.emit(ev.CommandResult(command.text, f"not applied: typed while paused at #{meant_for.node}, "
                                                             "which has run since", ok=False, request=request))
                    continue
                if isinstance(command, Quit):
                    self._quitting.set()
                    raise GradtuiQuit()
                self._dispatch.execute(command, state, request)
                if command.resumes:
                    self.emit(ev.Resumed(state.index, self._stepper.mode.value))
                    return pause
        finally:
            self._stepper.pause = None
            if self._collector:
                gc.disable()
