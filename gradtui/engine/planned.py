"""The hooks of a planned pass: a CPU pass in `continue` (or `finish`) that only records
statistics or watches for `nan` (gradtui.engine.plan says which nodes get which hook).

A posthook takes the norm of what its node sent on, there and then (an `isfinite` count
confirms a non-finite norm: a float32 norm overflows on finite values), keeps the Stats and
lets go of the tensors, so nothing is held past the hook (AccumulateGrad still steals its
buffer). The first node whose output is not finite while what it received was stops the pass
in its posthook, right after it ran, and an edit there replaces what it sends on. A node with
a prehook (a user hook on its input, a custom Function) is checked before it runs too.
Derived nodes' statistics are filled in from their producer's when the NodeRan events are
emitted (every READ_EVERY hooked nodes, at a pause, at the end).

On the CPU a read costs a Python call, no device sync, so reading at every planned node is
exact and cheap; an accelerator pass keeps the deferred, batched reads of the every-node hooks
(gradtui.engine.hooks: one sync per CHECK_EVERY nodes).

If the user steps (or adds a breakpoint by place) at a pause, the rest of the pass is
*upgraded*: every node that has not run gets a prehook and a posthook, and stops as the
stepping hooks would.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import torch

from gradtui.engine.compat import current_graph_task_id
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.plan import BOTH, NONE, POST, HookPlan, derive_outgoing
from gradtui.engine.recorder import PassRecord
from gradtui.engine.summary import CHUNK, dtype_name, summarize, summarize_all
from gradtui.engine.watch import Hit, hit_text
from gradtui.engine.window import small_stats
from gradtui.model import events as ev
from gradtui.model.breakpoints import Breakpoint, Breakpoints
from gradtui.model.nodes import node_title
from gradtui.model.stats import VALUES_LIMIT, Stats, any_nonfinite

READ_EVERY = 64
PROGRESS_INTERVAL = 0.05

_BULK = frozenset({torch.float32, torch.float64})


class Stepping(Protocol):
    """What a planned pass asks of the session: its breakpoints, events, pauses and mode."""

    breakpoints: Breakpoints

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener."""

    def pause_at(self, state: PassRecord, node: int, phase: str, reason: str, grads: tuple[Any, ...],
                 late: bool = False, editable: bool | None = None) -> Any:
        """Pause (blocks until a command resumes); returns the Pause."""

    def hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str:
        """Count and announce a breakpoint hit."""

    def stop_reason(self, state: PassRecord, node: int) -> Breakpoint | str | None:
        """Must the engine stop before `node` whatever its gradients are (stepping, a place)?"""

    def quitting_now(self) -> bool:
        """Has quit been asked for?"""

    def stepping(self) -> bool:
        """Must every node be hooked from now on (stepping, a breakpoint by place)?"""

    def watching(self) -> bool:
        """Can a value breakpoint stop the pass (one is armed and the session may still pause)?"""


def now_stats(grad: Any, full: bool) -> Stats | None:
    """A gradient's statistics, read now (CPU): as the window's bulk read makes them."""
    if grad is None:
        return None
    if (type(grad) is torch.Tensor and grad.dtype in _BULK and grad.layout is torch.strided
            and 0 < (numel := grad.numel()) <= CHUNK and not grad.is_meta and not grad._is_zerotensor()):
        if grad.requires_grad:
            grad = grad.detach()  # create_graph: gradtui's reductions record nothing
        shape, dtype = tuple(grad.shape), dtype_name(grad.dtype)
        if numel <= VALUES_LIMIT:  # a 1-d gradient lists itself; others are flattened first (a view: no copy)
            return small_stats(shape, dtype, "cpu", tuple(grad.tolist() if grad.dim() == 1 else grad.reshape(-1).tolist()))
        if full:
            lo, hi = torch.aminmax(grad)
            lo_v, hi_v, total, norm = torch.stack((lo, hi, grad.sum(), torch.linalg.vector_norm(grad))).tolist()
            if math.isfinite(norm) and math.isfinite(total) and math.isfinite(lo_v) and math.isfinite(hi_v):
                return Stats(shape, dtype, "cpu", norm, lo_v, hi_v, total / numel, 0)
        else:
            norm = torch.linalg.vector_norm(grad).item()
            if math.isfinite(norm):
                return Stats(shape, dtype, "cpu", norm, None, None, None, 0)
    return summarize(grad, light=not full)  # also confirms a non-finite norm with isfinite


class PlannedPass:
    """The posthooks (and few prehooks) of one planned pass, its statistics and its NodeRan
    events (see module doc). Inert once `close`d: a retained graph's later passes skip them."""

    def __init__(self, owner: Stepping, state: PassRecord, plan: HookPlan, full: bool, delegated: bool = False) -> None:
        """`delegated`: the pass's every-node hooks are on its nodes already and call `prehook` /
        `posthook` (a pass handed over after a pause): nothing is registered."""
        self._owner = owner
        self._delegated = delegated
        self._state = state
        self._plan = plan
        self._full = full
        self._live = True
        self._completed = state.completed
        """Per node, 1 once it ran (the pass's own record: a pass handed over from the every-node
        hooks has some done already)."""
        self._incoming: dict[int, tuple[Stats | None, ...]] = {}
        self._outgoing: dict[int, tuple[Stats | None, ...]] = {}
        self._ran: list[int] = []
        self._held: list[int] = []
        self._emitted = state.done
        self._handles: list[Any] = []
        self._upgraded = False
        self._nan = next((bp for bp in owner.breakpoints if bp.spec.kind == "nan"), None)

    # ---- hooks ---------------------------------------------------------------------------

    def register(self) -> None:
        """Put the plan's hooks on the pass's nodes."""
        if self._delegated:
            return
        nodes, hooks = self._state.capture.nodes, self._plan.hooks
        pre, post = self._prehook, self._posthook
        for i, node in enumerate(nodes):
            kind = hooks[i]
            if kind == BOTH:
                self._handles.append(node.register_prehook(_bound(pre, i)))
            if kind != NONE:
                self._handles.append(node.register_hook(_bound(post, i)))

    def close(self) -> None:
        """The pass is over: the hooks do nothing from now on, and are removed."""
        self._live = False
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def prehook(self, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Node `node`'s prehook, called by a hook already on it (`delegated`): the plan's, if any."""
        return self._prehook(node, grads) if self._plan.hooks[node] == BOTH else None

    def posthook(self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Node `node`'s posthook, called by a hook already on it (`delegated`): the plan's, if any."""
        return self._posthook(node, grad_inputs, grad_outputs) if self._plan.hooks[node] != NONE else None

    def _own_call(self) -> bool:
        state = self._state
        task = current_graph_task_id()
        if state.task is None:
            state.task = task
        return self._live and task == state.task

    def _prehook(self, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        owner, state = self._owner, self._state
        if owner.quitting_now():
            raise GradtuiQuit()
        if not self._own_call():
            return None
        state.running = node
        incoming = self._incoming[node] = tuple(now_stats(g, self._full) for g in grads)
        reason = None
        if self._upgraded:
            place = owner.stop_reason(state, node)
            if isinstance(place, Breakpoint):
                reason = f"{owner.hit(place, state, node)}: {place.spec.text}"
            elif place is not None:
                reason = place
        if reason is None and self._watching() and (bp := owner.breakpoints.find_value(incoming, state.nan_seen)):
            reason = f"{owner.hit(bp, state, node)}: {bp.spec.text}"
        if any_nonfinite(incoming):
            state.nan_seen = True
        if reason is None:
            return None
        self.flush()
        pause = owner.pause_at(state, node, "before", reason, grads)
        new = None
        if pause.edited:
            new = pause.grads
            self._incoming[node] = tuple(now_stats(g, self._full) for g in new)
        self._after_pause()
        return new

    def _posthook(self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        owner, state = self._owner, self._state
        if owner.quitting_now():
            raise GradtuiQuit()
        task = current_graph_task_id()  # `_own_call`, inline: this runs once per hooked node
        if state.task is None:
            state.task = task
        if not self._live or task != state.task:
            return None
        full = self._full
        incoming = self._incoming.get(node)
        late_before = False
        if incoming is None and (self._plan.producer[node] is None or len(grad_outputs) != 1):
            incoming = self._incoming[node] = tuple([now_stats(g, full) for g in grad_outputs])
            late_before = any_nonfinite(incoming) and not state.nan_seen
        outgoing = self._outgoing[node] = tuple([now_stats(g, full) for g in grad_inputs])
        self._completed[node] = 1
        state.running = None
        self._ran.append(node)
        result = None
        if late_before or (not state.nan_seen and any(s is not None and s.nonfinite for s in outgoing)):
            state.nan_seen = True
            if self._nan is not None and self._watching():
                result = self._stop_after(node, grad_inputs, grad_outputs, late_before)
        if len(self._ran) >= READ_EVERY:
            self.flush()
        now = time.monotonic()
        if now - state.last_progress >= PROGRESS_INTERVAL:
            state.last_progress = now
            owner.emit(ev.Progress(state.index, self._emitted + len(self._ran), len(state.capture.nodes)))
        return result

    def _stop_after(self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...],
                    arrived: bool) -> tuple[Any, ...] | None:
        """The `nan` watch's hit at `node`, which just ran: it made the first non-finite gradient
        (pause after it, editable), or one arrived non-finite (pause before it, late)."""
        owner, state = self._owner, self._state
        self.flush(hold=node)
        state.capture.describe()  # the pause shows names and sources: a lazy capture reads them now
        title = node_title(state.capture.graph if state.capture.graph.built else _Titles(state.capture.attrs), node)
        phase = "before" if arrived else "after"
        hit = Hit(self._nan, node, phase, 0)  # type: ignore[arg-type]
        reason = f"{owner.hit(self._nan, state, node)}: {hit_text(hit, 1, title)}"  # type: ignore[arg-type]
        if arrived:
            owner.pause_at(state, node, "before", reason, grad_outputs, late=True)
            self._after_pause()
            return None
        pause = owner.pause_at(state, node, "after", reason, grad_inputs, editable=True)
        self._after_pause()
        if not pause.edited:
            return None
        self._outgoing[node] = tuple(now_stats(g, self._full) for g in pause.grads)
        return tuple(pause.grads)

    def _watching(self) -> bool:
        return self._owner.watching()

    # ---- stepping from a pause ------------------------------------------------------------

    def _after_pause(self) -> None:
        """After a pause: if the user now steps (or set a breakpoint by place), hook every node
        that has not run, before and after."""
        if self._upgraded or not self._owner.stepping():
            return
        self._upgraded = True
        plan, nodes, completed = self._plan, self._state.capture.nodes, self._completed
        pre, post = self._prehook, self._posthook
        for i, node in enumerate(nodes):
            if completed[i] or plan.hooks[i] == BOTH:
                continue
            if not self._delegated:
                self._handles.append(node.register_prehook(_bound(pre, i)))
            if plan.hooks[i] == NONE:
                if not self._delegated:
                    self._handles.append(node.register_hook(_bound(post, i)))
                plan.hooks[i] = BOTH
                for fed in plan.derived.values():
                    if i in fed:
                        fed.remove(i)
                plan.producer[i] = None
            plan.hooks[i] = BOTH

    # ---- statistics out -------------------------------------------------------------------

    def flush(self, hold: int | None = None) -> None:
        """Emit the NodeRan events of the hooked nodes that ran since the last flush, each followed
        by those of the derived nodes it feeds; those `hold` feeds wait for the next flush (it is
        paused in its posthook: they have not run, and stepping on hooks them instead)."""
        held, self._held = self._held, []
        for node in held:
            self._derive(node)
        ran, self._ran = self._ran, []
        incoming_of, outgoing_of, producer_of, derived = self._incoming, self._outgoing, self._plan.producer, self._plan.derived
        state, emit, node_ran = self._state, self._owner.emit, ev.NodeRan
        index = state.index
        for node in ran:  # `_emit` inline: this runs once per hooked node
            incoming = incoming_of.pop(node, None)
            if incoming is None:
                producer, slot = producer_of[node]  # type: ignore[misc]
                incoming = (outgoing_of[producer][slot],)
            order = self._emitted = state.done = self._emitted + 1
            emit(node_ran(index, node, order, incoming, outgoing_of[node]))
            if node == hold:
                self._held.append(node)
            elif node in derived:
                self._derive(node)

    def _derive(self, node: int) -> None:
        plan, attrs, nodes = self._plan, self._state.capture.attrs, self._state.capture.nodes
        derived, producer_of, outgoing_of, completed = plan.derived, plan.producer, self._outgoing, self._completed
        todo = deque(derived.get(node, ()))
        while todo:
            child = todo.popleft()
            producer, slot = producer_of[child]  # type: ignore[misc]
            sent = outgoing_of[producer]
            incoming = (sent[slot] if slot < len(sent) else None,)
            name = attrs[child]["name"]
            if name == "AccumulateGrad":
                out: tuple[Stats | None, ...] = ()  # it sends nothing on
            else:
                try:
                    out = derive_outgoing(nodes[child], name, incoming[0], self._full)
                except Exception as exc:  # noqa: BLE001 - statistics must never fail the script's pass
                    out = (Stats((), "", "", math.nan, None, None, None, 0,
                                 unreadable=f"not derived ({type(exc).__name__}: {exc})"),)
            outgoing_of[child] = out
            completed[child] = 1
            self._emit(child, incoming, out)
            more = derived.get(child)
            if more:
                todo.extend(more)

    def _emit(self, node: int, incoming: tuple[Stats | None, ...], outgoing: tuple[Stats | None, ...]) -> None:
        self._emitted += 1
        self._state.done = self._emitted
        self._owner.emit(ev.NodeRan(self._state.index, node, self._emitted, incoming, outgoing))

    def finish(self) -> None:
        """The pass's engine call returned (or raised): emit what is left; name the node that
        was running if it failed in a hook of its own or the script's."""
        self.flush()
        state = self._state
        if state.running is None:
            state.running = ready_node(state.capture.attrs, self._completed)
        if state.running is not None:
            state.grad_outputs[state.running] = self._incoming.get(state.running, ())


def ready_node(attrs: list[dict[str, Any]], completed: bytearray) -> int | None:
    """The node the engine would have run next (all its producers done, itself not): the one a
    failure that no node's own hook saw (a user's tensor hook raising) happened at. Of several,
    the engine runs the highest sequence number first."""
    waiting = [0] * len(attrs)
    for here, data in enumerate(attrs):
        if not completed[here]:
            for there in data["next"]:
                if there is not None:
                    waiting[there] += 1
    best = None
    for i, data in enumerate(attrs):
        if not completed[i] and not waiting[i] and (best is None or data["seq"] > attrs[best]["seq"]):
            best = i
    return best


def _bound(hook: Callable[..., Any], node: int) -> Callable[..., Any]:
    """`hook` with the node id bound first."""
    return functools.partial(hook, node)


class _Titles:
    """Just enough of a graph for `node_title` (`.nodes[i]`), over a capture's attribute dicts."""

    def __init__(self, attrs: list[dict[str, Any]]) -> None:
        self.nodes = attrs


__all__ = ["PlannedPass", "now_stats", "ready_node", "POST"]
