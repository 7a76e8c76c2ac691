"""The stepping engine: intercept backward calls, hook every node, pause, obey commands.

A `Session` patches `Tensor.backward`, `torch.autograd.backward` and `torch.autograd.grad`
while it is active. Each intercepted call is one *pass*: the graph is captured, a prehook
and a posthook are installed on every node, the real backward runs, and every hook is
removed when it returns or raises. Hooks run on the thread that called backward (the
script's thread); to pause, a prehook emits `Paused` and blocks on the command queue.

Other threads (the UI, the headless driver) talk to the session only through `submit`
and `quit`, and hear from it only through events.
"""

from __future__ import annotations

import functools
import gc
import linecache
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import networkx as nx
import torch

from gradtui.core import edits
from gradtui.core import events as ev
from gradtui.core.breakpoints import Breakpoint, Breakpoints, matches_node
from gradtui.core.commands import (
    Break, Clip, Command, CommandError, Continue, Delete, Finish, Flow, Help, HELP, ListBreakpoints,
    Print, Quit, Scale, SetGrad, Step, Why, Zero, parse,
)
from gradtui.core.flow import LeafNames, format_flow, gradient_flow
from gradtui.core.graph import Capture, Names, capture, node_title
from gradtui.core import provenance
from gradtui.core.provenance import Provenance
from gradtui.core.summary import VALUES_LIMIT, Stats, any_nonfinite, describe, format_grads, format_stats, summarize, summarize_all

Listener = Callable[[ev.Event], None]

PROGRESS_INTERVAL = 0.05
"""Seconds between `Progress` events while the engine runs between pauses."""


_graph_task: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: 0)
"""The id of the autograd engine call running on this thread, -1 outside one (always 0 on a
torch without it: then every hook call counts as the pass's own)."""


_is_compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
_functorch = getattr(torch._C, "_functorch", None)
_functorch_level: Callable[[], int | None] = getattr(_functorch, "maybe_current_level", lambda: None)
_legacy_batched: Callable[[torch.Tensor], bool] = getattr(_functorch, "is_legacy_batchedtensor", lambda t: False)


def _vmapped(arguments: tuple[Any, ...]) -> bool:
    """Is this backward call part of a torch.func transform (grad, vmap), or fed batched
    gradients (jacobian(vectorize=True))? Its gradients are then wrappers that statistics
    (`.item()`) cannot read."""
    if _functorch_level() is not None:
        return True
    for value in arguments:
        items = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(t, torch.Tensor) and _legacy_batched(t) for t in items):
            return True
    return False


def _as_tuple(tensors: Any) -> tuple[Any, ...]:
    """A tensor, or any iterable of them (a list, a generator), as a tuple, as torch reads it."""
    return (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)


def _root_values(roots: tuple[Any, ...]) -> tuple[float | None, ...]:
    """Each root's value if it has one element (the loss, usually), else None."""
    out: list[float | None] = []
    for t in roots:
        value = None
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            try:
                value = float(t.detach().reshape(()).real if t.is_complex() else t.detach().reshape(()))
            except (RuntimeError, TypeError, ValueError):
                value = None
        out.append(value)
    return tuple(out)


def _dense(t: torch.Tensor) -> bool:
    """Do `t`'s elements fill its memory span, each once (any order of dims)? Two such tensors
    that start at the same address with as many elements hold the same elements."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _walk(nodes: list[Any]) -> tuple[int, list[Any]]:
    """(number of nodes, leaf accumulators) of the graph below `nodes`: the least a pass that
    runs unhooked needs to know (gradient flow)."""
    seen = set(nodes)
    todo = list(nodes)
    leaves = []
    while todo:
        node = todo.pop()
        if hasattr(node, "variable"):
            leaves.append(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)
    return len(seen), leaves


class GradtuiQuit(BaseException):
    """Raised in the script's thread to unwind it when the user quits.

    A BaseException, like KeyboardInterrupt, so a script's `except Exception` does not
    swallow it.
    """


@dataclass
class _Pass:
    """What the session knows of the pass in flight; dropped when the pass ends."""

    index: int
    capture: Capture
    frame: FrameType | None
    done: int = 0
    running: int | None = None
    nan_seen: bool = False
    task: int | None = None
    """Autograd's id of the pass's own engine call, so hooks ignore a backward nested in it (a
    user's hook calling torch.autograd.grad through nodes of this graph)."""
    incoming: dict[int, tuple[Stats | None, ...]] = field(default_factory=dict)
    handoff: dict[tuple[int, int], tuple[torch.Tensor, int, Stats]] = field(default_factory=dict)
    """Gradients a node just sent to a sole receiver, with their version counter and stats, so
    the receiver's prehook need not summarize the same, unmodified tensor again."""
    last_progress: float = 0.0
    pending: Breakpoint | None = None
    """A loss breakpoint that matched the roots: stop at the pass's first node."""
    pending_reason: str = ""
    arrived: dict[int, tuple[tuple[Any, ...], tuple[int, ...]]] = field(default_factory=dict)
    """Node id -> the gradients its prehook let through unedited, with their version counters."""
    fired: set[int] = field(default_factory=set)
    """Breakpoints that stopped in this pass (module and place specs stop once per pass)."""


@dataclass
class _Pause:
    """The state of a pause: the node, and the gradients the commands edit."""

    node: int
    phase: str
    grads: tuple[torch.Tensor | None, ...]
    edited: bool = False


class Session:
    """Debugs the backward passes of whatever runs while it is active (see module doc)."""

    def __init__(self, listener: Listener | None = None, *, provenance: bool = True,
                 full_stats: bool = True, hook_all_passes: bool = True, flow_unhooked: bool = True) -> None:
        """`full_stats=False` records only norms while the engine runs between pauses (see
        `summarize(light=True)`): a third of the cost, for the UI when no report is written.

        `hook_all_passes=False` lets a pass in which nothing can stop (running on, no
        breakpoint that could match it) run unhooked at plain speed: no per-node statistics
        for it, only its gradient flow. For headless runs that write no report.
        `flow_unhooked=False` skips even that flow (a walk of the graph and two norms of every
        parameter and gradient) when no one will ask for it.
        """
        self.breakpoints = Breakpoints()
        self._listeners: list[Listener] = [listener] if listener else []
        self._commands: queue.Queue[tuple[Command, _Pause | None]] = queue.Queue()
        """Commands for the paused hook, each with the pause it was typed at (None: any)."""
        self._mode = "step"  # pause at the first node of the first pass, as pdb does
        self._detached = False
        self._quitting = threading.Event()
        self._local = threading.local()
        self._passes = 0
        self._pause: _Pause | None = None
        self._originals: dict[str, Any] | None = None
        self._provenance = Provenance() if provenance else None
        self._full_stats = full_stats
        self._hook_all = hook_all_passes
        self._flow_unhooked = flow_unhooked
        self._pass_lock = threading.Lock()
        """Held by the one pass in flight; a backward from another thread meanwhile runs unhooked."""
        self._in_flight: _Pass | None = None
        self._outside: frozenset[int | None] = frozenset()
        self._collector = False
        """Was the garbage collector on when the pass in flight began (so on during its pauses)?"""
        self._flow: tuple[ev.ParamFlow, ...] = ()
        self._flow_pass = -1
        self._leaf_names = LeafNames()
        """Names of leaves seen in recorded passes, for the flow of passes that run unhooked."""

    # ---- wiring -------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Also send every event to `listener` (called on the emitting thread)."""
        self._listeners.append(listener)

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener."""
        for listener in self._listeners:
            listener(event)

    @property
    def passes(self) -> int:
        """How many backward passes have started."""
        return self._passes

    @property
    def paused(self) -> bool:
        """Is the engine blocked at a node, waiting for a command?"""
        return self._pause is not None

    def install(self) -> None:
        """Patch torch's backward entry points and start provenance recording.

        Call it on the thread that runs the script: provenance is per thread, and threads
        that already run elsewhere in the process are not the script's.
        """
        if self._originals is not None:
            return
        # Threads that exist now, other than this one, are not the script's (the UI, a test
        # runner): their backward calls run untouched. Threads the script starts later are.
        here = threading.current_thread()
        self._outside = frozenset(t.ident for t in threading.enumerate() if t is not here)
        self._originals = {
            "tensor_backward": torch.Tensor.backward,
            "backward": torch.autograd.backward,
            "grad": torch.autograd.grad,
        }
        originals = self._originals

        @functools.wraps(originals["tensor_backward"])
        def tensor_backward(tensor, gradient=None, retain_graph=None, create_graph=False, inputs=None):
            return self._run_pass(
                "backward", sys._getframe(1), (tensor,),
                lambda: originals["tensor_backward"](tensor, gradient, retain_graph, create_graph, inputs),
                (gradient,),
            )

        # `tensors` / `outputs` may be a generator: read it once, hand torch the tuple.
        @functools.wraps(originals["backward"])
        def backward(tensors, *args, **kwargs):
            roots = _as_tuple(tensors)
            return self._run_pass(
                "backward", sys._getframe(1), roots, lambda: originals["backward"](roots, *args, **kwargs),
                (*args, *kwargs.values()),
            )

        @functools.wraps(originals["grad"])
        def grad(outputs, *args, **kwargs):
            roots = _as_tuple(outputs)
            batched = bool(kwargs.get("is_grads_batched") or (len(args) > 6 and args[6]))  # torch vmaps inside
            return self._run_pass("grad", sys._getframe(1), roots, lambda: originals["grad"](roots, *args, **kwargs),
                                  (*args, *kwargs.values()), batched=batched)

        torch.Tensor.backward = tensor_backward
        torch.autograd.backward = backward
        torch.autograd.grad = grad
        if self._provenance:
            self._provenance.install()

    def uninstall(self) -> None:
        """Restore torch's own functions and stop provenance recording."""
        if self._originals is None:
            return
        torch.Tensor.backward = self._originals["tensor_backward"]
        torch.autograd.backward = self._originals["backward"]
        torch.autograd.grad = self._originals["grad"]
        self._originals = None
        if self._provenance:
            self._provenance.uninstall()

    def __enter__(self) -> "Session":
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # ---- commands from other threads -----------------------------------------------------

    def stop_debugging(self) -> None:
        """After a quit in a process gradtui does not own (`gradtui.listen()` in a notebook): the
        pass that was stopped raised GradtuiQuit; from now on backward calls run unhooked, as if
        gradtui were not there, until `uninstall`."""
        self.breakpoints.delete(None)
        self._mode = "continue"
        self._quitting.clear()

    def run_on(self) -> None:
        """Run on until a breakpoint hits (as `continue`), paused or not: for a run armed before
        its first pass, and an agent whose client detached."""
        self._mode = "continue"
        if self._pause is not None:
            self._commands.put((Continue("continue"), None))

    def submit(self, command: Command | str, request: int | None = None) -> None:
        """Give the session a command (thread-safe). Results arrive as events.

        While paused, commands queue up for the paused hook in order; one that acts on the paused
        node (an edit, print, why) is dropped if the engine has moved on by the time it is read
        (typed just after `continue`). While running, those are refused; breakpoint commands
        take effect at once.
        """
        if isinstance(command, str):
            try:
                command = parse(command)
            except CommandError as exc:
                self.emit(ev.CommandResult(command, str(exc), ok=False, request=request))
                return
        if isinstance(command, Quit):
            self.quit()
        elif (pause := self._pause) is not None:
            self._commands.put((command, pause))
        elif isinstance(command, (Break, Delete, ListBreakpoints, Help, Flow)):
            self._execute(command, None)
        else:
            running = "is running" if self._originals is not None else "is not running (it has ended or not started)"
            self.emit(ev.CommandResult(command.text, f"not paused: the script {running}", ok=False))

    def quit(self) -> None:
        """Stop at the next opportunity: a paused hook raises GradtuiQuit, as will the next one."""
        self._quitting.set()
        self._commands.put((Quit("quit"), None))

    @property
    def quitting(self) -> bool:
        """Has quit been asked for?"""
        return self._quitting.is_set()

    def detach(self) -> None:
        """Never pause again (headless mode once its commands run out); resume if paused."""
        self._detached = True
        if self._pause is not None:
            self._commands.put((Continue("continue"), None))

    # ---- one pass ------------------------------------------------------------------------

    def _run_pass(self, call: str, frame: FrameType, roots: tuple[Any, ...], run: Callable[[], Any],
                  arguments: tuple[Any, ...] = (), batched: bool = False) -> Any:
        """Capture the graph of `roots`, hook it, run the real backward, unhook.

        `arguments` are the call's other arguments: batched gradients among them (vmap), or
        `batched` (is_grads_batched=True), make the pass one gradtui leaves alone. A backward
        called while a pass is in flight (from its hooks, or another thread) runs unhooked.
        """
        if threading.get_ident() in self._outside or getattr(self._local, "untouched", False):
            return run()  # not the script's thread, or inside a call that runs untouched
        outer: _Pass | None = getattr(self._local, "state", None)
        if outer is not None:
            if _graph_task() == -1:
                return run()  # the outer call handing over to torch (Tensor.backward calls autograd.backward)
            if outer.task is None:
                outer.task = _graph_task()  # called from inside the outer pass's engine call
            self._nested(outer, call, frame, roots)
            return run()  # a backward inside a backward (checkpointing, a user's hook)
        if batched or _is_compiling() or self._provenance is None:
            return self._intercept(call, frame, roots, run, arguments, batched)
        # Provenance off the mode stack for the whole call: while it is on, every attribute
        # read of a tensor (`.grad`, `.dtype`) goes through its __torch_function__, and
        # gradtui's own work (checks, flow, leaf stats) makes no node worth a source. Inside the
        # engine, hooks see no mode anyway.
        with self._provenance.suspended():
            return self._intercept(call, frame, roots, run, arguments, batched)

    def _intercept(self, call: str, frame: FrameType, roots: tuple[Any, ...], run: Callable[[], Any],
                   arguments: tuple[Any, ...], batched: bool) -> Any:
        """`_run_pass` for a backward call that is not inside another: the session's own pass,
        or one it leaves alone (vmap, compile tracing, meta tensors, another thread's meanwhile)."""
        if (batched or _vmapped(arguments) or _is_compiling()
                or any(isinstance(t, torch.Tensor) and t.is_meta for t in roots)):
            return run()  # vmap, torch.func, torch.compile's tracing, meta: no values to read
        if self._quitting.is_set():
            raise GradtuiQuit()
        nodes = [torch.autograd.graph.get_gradient_edge(t).node for t in roots
                 if isinstance(t, torch.Tensor) and t.requires_grad]
        if not nodes:
            return run()  # torch raises its own clear error
        if not self._pass_lock.acquire(blocking=False):
            if (flight := self._in_flight) is not None:  # another thread's pass is in flight
                self._nested(flight, call, frame, roots)
            return self._untouched(run)  # Tensor.backward calls autograd.backward: announce it once
        collecting = gc.isenabled()
        try:
            frame = provenance.user_frame(frame) or frame  # jacobian() calls grad() from inside torch
            # A pass makes many small objects and no cyclic garbage; the collections they would
            # set off walk the whole heap (a model's worth of objects) and cost as much as the
            # hooks themselves. The collector is back on during a pause and after the pass.
            self._collector = collecting
            gc.disable()
            return self._run_own_pass(call, frame, roots, nodes, run)
        finally:
            if collecting:
                gc.enable()
            self._in_flight = None
            self._pass_lock.release()

    def _untouched(self, run: Callable[[], Any]) -> Any:
        """Run a backward call with every backward call it makes on this thread left alone
        (Tensor.backward calls autograd.backward, through our patch)."""
        self._local.untouched = True
        try:
            return run()
        finally:
            self._local.untouched = False

    def _nested(self, outer: _Pass, call: str, frame: FrameType, roots: tuple[Any, ...]) -> None:
        """Announce a backward that runs unhooked inside (or beside) pass `outer`."""
        nodes = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        frame = provenance.user_frame(frame) or frame
        self.emit(ev.NestedPass(outer.index, call, f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}",
                                _walk(nodes)[0] if nodes else 0, threading.current_thread().name))

    def _hooked(self, index: int, pending: Breakpoint | None) -> bool:
        """Must pass `index` be hooked? Only if something could stop in it or a listener wants
        per-node statistics."""
        if self._hook_all or pending is not None:
            return True
        if self._detached:
            return False
        return self._mode != "continue" or self.breakpoints.could_stop(index)

    def _run_own_pass(self, call: str, frame: FrameType, roots: tuple[Any, ...], nodes: list[Any],
                      run: Callable[[], Any]) -> Any:
        """One pass of the session's own: hooked (captured, hooks on every node) or unhooked."""
        index = self._passes
        self._passes += 1
        if self._mode == "finish":
            self._mode = "step"
        losses = _root_values(roots)
        pending = None
        if not self._detached and len(self.breakpoints):
            pending = self.breakpoints.find_loss(losses, self._nonfinite_roots(roots, losses))
        call_text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        call_site = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        if not self._hooked(index, pending):
            return self._run_unhooked(index, call, call_text, call_site, losses, nodes, run)
        cap = capture(nodes, Names.from_scopes(frame.f_locals, frame.f_globals))
        provenance.place_leaves(cap.graph)
        state = _Pass(index, cap, frame)
        if pending is not None:
            shown = ", ".join(f"{v:.6g}" for v in losses if v is not None)
            state.pending, state.pending_reason = pending, f"{pending.spec.text} (loss {shown or 'not a scalar'})"
        self._in_flight = state
        self.emit(ev.PassStarted(index, call, call_text, call_site, cap.graph, cap.roots, losses))  # type: ignore[arg-type]
        handles = []
        self._local.state = state
        error: BaseException | None = None
        try:
            # Hooked inside the try: an interruption half-way (Ctrl-C, a quit) still unhooks.
            for i, node in enumerate(cap.nodes):
                handles.append(node.register_prehook(functools.partial(self._prehook, state, i)))
                handles.append(node.register_hook(functools.partial(self._posthook, state, i)))
            return run()
        except BaseException as exc:
            error = exc
            raise
        finally:
            for handle in handles:
                handle.remove()
            self._local.state = None
            leaves = [(i, node.variable) for i, node in enumerate(cap.nodes)
                      if cap.graph.nodes[i]["kind"] == "accumulate"]
            leaf_grads = self._leaf_grads(leaves)
            flow = self._recorded_flow(cap.graph, leaves) if call != "grad" else ()
            del leaves
            total = len(cap.nodes)
            del cap, handles, nodes
            state.capture = None  # type: ignore[assignment]
            state.frame = None
            self._finish(ev.PassFinished(
                state.index, state.done, total, self._error_text(error),
                state.running if error is not None else None,
                state.incoming.get(state.running, ()) if error is not None else (),
                leaf_grads, flow,
            ))
            error = None  # this frame is on error's traceback: holding error would make a cycle

    def _nonfinite_roots(self, roots: tuple[Any, ...], losses: tuple[float | None, ...]) -> bool:
        """Does a root hold a non-finite value? Non-scalar roots are only read for `loss nan`."""
        if any(v is not None and not math.isfinite(v) for v in losses):
            return True
        if not any(bp.spec.kind == "lossnan" for bp in self.breakpoints):
            return False
        return any(v is None and isinstance(t, torch.Tensor) and not bool(torch.isfinite(t.detach()).all())
                   for t, v in zip(roots, losses))

    def _run_unhooked(self, index: int, call: str, call_text: str, call_site: str,
                      losses: tuple[float | None, ...], nodes: list[Any], run: Callable[[], Any]) -> Any:
        """A pass nothing can stop in: the real backward, then only the gradient flow."""
        self.emit(ev.PassStarted(index, call, call_text, call_site, nx.DiGraph(), (), losses,  # type: ignore[arg-type]
                                 recorded=False))
        total, leaves = _walk(nodes) if self._flow_unhooked else (0, [])
        variables = [leaf.variable for leaf in leaves] if call != "grad" else []
        del leaves, nodes
        error: BaseException | None = None
        try:
            return self._untouched(run)
        except BaseException as exc:
            error = exc
            raise
        finally:
            flow = gradient_flow([(self._leaf_names.get(v) or f"leaf {list(v.shape)}", None, v) for v in variables])
            del variables
            self._finish(ev.PassFinished(index, 0, total, self._error_text(error), flow=flow))
            error = None

    @staticmethod
    def _error_text(error: BaseException | None) -> str | None:
        if error is None:
            return None
        return "quit" if isinstance(error, GradtuiQuit) else f"{type(error).__name__}: {error}"

    def _finish(self, event: ev.PassFinished) -> None:
        """Keep the pass's flow for the `flow` command and announce its end."""
        if event.flow:
            self._flow, self._flow_pass = event.flow, event.index
        self.emit(event)

    def _recorded_flow(self, graph: nx.DiGraph, leaves: list[tuple[int, torch.Tensor]]) -> tuple[ev.ParamFlow, ...]:
        """Gradient flow of a captured pass's leaves (accumulator id, leaf), named as the graph
        names them."""
        named = []
        for i, leaf in leaves:
            data = graph.nodes[i]
            name = data["param"] or (data["labels"][0] if data["labels"] else None)
            if name is not None:
                self._leaf_names.remember(leaf, name)
            named.append((name or self._leaf_names.get(leaf) or f"#{i}", i, leaf))
        return gradient_flow(named)

    @property
    def _light(self) -> bool:
        """Record light stats now? Only when asked for and not stepping (a step pauses anyway)."""
        return not self._full_stats and self._mode != "step"

    def _leaf_grads(self, leaves: list[tuple[int, torch.Tensor]]) -> tuple[tuple[int, Stats | None], ...]:
        """(accumulator id, stats of the leaf's `.grad`) for each leaf of the pass."""
        light = self._light
        return tuple((i, None if leaf.grad is None else summarize(leaf.grad, light=light)) for i, leaf in leaves)

    # ---- hooks ---------------------------------------------------------------------------

    def _prehook(self, state: _Pass, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Before a node runs: decide whether to pause, record what flows in."""
        if self._quitting.is_set():
            raise GradtuiQuit()
        if not self._own_call(state):
            return None
        state.running = node
        stats = self._incoming_stats(state, node, grads)
        reason = None
        if state.pending is not None:
            reason = f"{self._hit(state.pending, state, node)}: {state.pending_reason}"
            state.pending = None
        elif not self._detached:
            attrs = state.capture.graph.nodes[node]
            bp = self.breakpoints.find(attrs, node, state.index, state.done == 0, stats, state.nan_seen, state.fired)
            if bp is not None:
                reason = f"{self._hit(bp, state, node)}: {bp.spec.text}"
            elif self._mode == "step":
                reason = "step"
        if any_nonfinite(stats):
            state.nan_seen = True
        new = None
        if reason is not None:
            pause = self._wait(state, node, "before", reason, grads)
            if pause.edited:
                new = pause.grads
                stats = summarize_all(new)
        state.incoming[node] = stats
        # What the node will read: its posthook may find its outputs are the same values. Not for
        # a leaf's accumulator (it sends nothing on): a reference kept here would make it copy the
        # gradient into .grad instead of taking it (a ZeroTensor would become real zeros).
        if new is None and state.capture.sole_inputs[node]:
            state.arrived[node] = (grads, tuple(-1 if g is None else g._version for g in grads))
        return new

    def _hit(self, bp: Breakpoint, state: _Pass, node: int) -> str:
        """Count and announce a breakpoint hit; returns how a pause reason names it."""
        bp.hits += 1
        state.fired.add(bp.number)
        self.emit(ev.BreakpointHit(bp.number, bp.spec.text, state.index, node))
        return f"breakpoint {bp.number}"

    @staticmethod
    def _own_call(state: _Pass) -> bool:
        """Does this hook call belong to the pass's own engine call (not a nested backward)?"""
        task = _graph_task()
        if state.task is None:
            state.task = task
        return task == state.task

    def _incoming_stats(self, state: _Pass, node: int, grads: tuple[Any, ...]) -> tuple[Stats | None, ...]:
        """Stats of what flows into `node`, reusing its sender's when the tensor is the same."""
        out = []
        light = self._light
        for nr, grad in enumerate(grads):
            sent = state.handoff.pop((node, nr), None)
            if grad is None:
                out.append(None)
            elif (sent is not None and sent[0] is grad and sent[1] == grad._version  # not changed in place
                  and (light or sent[2].mean is not None)):  # and not light stats while stepping
                out.append(sent[2])
            else:
                out.append(summarize(grad, light=light))
        return tuple(out)

    def _outgoing_stats(self, state: _Pass, node: int, grads: tuple[Any, ...],
                        incoming: tuple[Stats | None, ...]) -> tuple[Stats | None, ...]:
        """Stats of what `node` sent on. A view, transpose or pass-through (`ViewBackward0`,
        `TBackward0`, the two sides of `AddBackward0`...) sends the very elements it received,
        so their stats are the incoming ones in a new shape: half the reductions of a pass."""
        arrived, versions = state.arrived.pop(node, ((), ()))
        light = self._light
        out = []
        for grad in grads:
            if grad is None:
                out.append(None)
                continue
            same = None
            if grad.numel() > VALUES_LIMIT and _dense(grad):  # small ones list their values in order
                ptr, numel, dtype = grad.data_ptr(), grad.numel(), grad.dtype
                for source, version, stats in zip(arrived, versions, incoming):
                    if (source is not None and stats is not None and source._version == version
                            and source.data_ptr() == ptr and source.numel() == numel and source.dtype == dtype
                            and _dense(source) and (light or stats.mean is not None)):
                        same = stats.reshaped(tuple(grad.shape))
                        break
            out.append(same or summarize(grad, light=light))
        return tuple(out)

    def _posthook(self, state: _Pass, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        """After a node ran: record what it sent on; stop if it made the first non-finite value."""
        if not self._own_call(state):
            return
        state.done += 1
        state.running = None
        incoming = state.incoming.pop(node, ())
        outgoing = self._outgoing_stats(state, node, grad_inputs, incoming)
        for target, grad, stats in zip(state.capture.sole_inputs[node], grad_inputs, outgoing):
            if target is not None and grad is not None:
                state.handoff[target] = (grad, grad._version, stats)
        self.emit(ev.NodeRan(state.index, node, state.done, incoming, outgoing))
        made_nonfinite = any_nonfinite(outgoing) and not any_nonfinite(incoming)
        if made_nonfinite and not self._detached:
            state.nan_seen = True
            bp = next((b for b in self.breakpoints if b.spec.kind == "nan"), None)
            if bp is not None:
                title = node_title(state.capture.graph, node)
                self._wait(state, node, "after", f"{self._hit(bp, state, node)}: {title} made a non-finite gradient",
                           grad_inputs)
        now = time.monotonic()
        if now - state.last_progress >= PROGRESS_INTERVAL:
            state.last_progress = now
            self.emit(ev.Progress(state.index, state.done, len(state.capture.nodes)))

    def _wait(self, state: _Pass, node: int, phase: str, reason: str, grads: tuple[Any, ...]) -> _Pause:
        """Pause: emit Paused, then run commands until one resumes the engine."""
        pause = _Pause(node, phase, tuple(grads))
        self._pause = pause
        if self._collector:
            gc.enable()  # the user may stay here long while other threads (the UI) make garbage
        try:
            self.emit(ev.Paused(state.index, node, state.capture.graph.nodes[node]["name"], phase,  # type: ignore[arg-type]
                                reason, summarize_all(grads, histogram=True), state.done, len(state.capture.nodes)))
            while True:
                try:
                    command, meant_for = self._commands.get(timeout=0.25)
                except queue.Empty:
                    if self._quitting.is_set():
                        raise GradtuiQuit() from None
                    continue
                if command.needs_pause and meant_for is not None and meant_for is not pause:
                    self.emit(ev.CommandResult(command.text, f"not applied: typed while paused at #{meant_for.node}, "
                                                             "which has run since", ok=False))
                    continue
                if isinstance(command, Quit):
                    self._quitting.set()
                    raise GradtuiQuit()
                self._execute(command, state)
                if command.resumes:
                    self.emit(ev.Resumed(state.index, self._mode))
                    return pause
        finally:
            self._pause = None
            if self._collector:
                gc.disable()

    # ---- executing commands --------------------------------------------------------------

    def _breakpoints_changed(self) -> None:
        self.emit(ev.BreakpointsChanged(tuple(ev.BreakpointInfo(bp.number, bp.spec.text, bp.hits)
                                              for bp in self.breakpoints)))

    def _execute(self, command: Command, state: _Pass | None) -> None:
        """Run one command; its result (or refusal) is emitted as a CommandResult."""
        try:
            text = self._run_command(command, state)
        except (CommandError, edits.EditError) as exc:
            self.emit(ev.CommandResult(command.text, str(exc), ok=False))
        except Exception as exc:  # noqa: BLE001 - a command torch cannot do here must not end the script
            first = (str(exc).splitlines() or [""])[0][:300]  # torch's dispatch errors run to pages
            self.emit(ev.CommandResult(command.text, f"{command.text!r} failed: {type(exc).__name__}: {first}",
                                       ok=False))
        else:
            if text is not None:
                self.emit(ev.CommandResult(command.text, text))
            if isinstance(command, (Break, Delete)):
                self._breakpoints_changed()

    def _run_command(self, command: Command, state: _Pass | None) -> str | None:
        pause = self._pause
        if isinstance(command, Step):
            self._mode = "step"
            return None
        if isinstance(command, Continue):
            self._mode = "continue"
            return None
        if isinstance(command, Finish):
            self._mode = "finish"
            return None
        if isinstance(command, Break):
            bp = self.breakpoints.add(command.spec)
            text = f"breakpoint {bp.number} at {bp.spec.text}"
            if state is not None and bp.spec.kind in ("op", "label", "id") and not any(
                    matches_node(bp.spec, data, i, state.index, False) for i, data in state.capture.graph.nodes(data=True)):
                text += " (no node of this pass matches it)"
            return text
        if isinstance(command, Delete):
            gone = self.breakpoints.delete(command.number)
            return "deleted " + (", ".join(str(bp.number) for bp in gone) if gone else "nothing")
        if isinstance(command, ListBreakpoints):
            return "\n".join(str(bp) for bp in self.breakpoints) or "no breakpoints"
        if isinstance(command, Help):
            return HELP
        if isinstance(command, Flow):
            if not self._flow:
                return "no gradient flow yet: no backward pass has finished"
            return "\n".join([f"gradient flow after pass {self._flow_pass}:", *format_flow(self._flow)])
        if isinstance(command, Why):
            return self._why(command.name, state)
        assert pause is not None and state is not None, "needs_pause commands only run while paused"
        if isinstance(command, Print):
            if command.expr is None:
                return "\n".join(format_grads(summarize_all(pause.grads), pause.phase)) or "no gradients"
            return describe(edits.evaluate(command.expr, pause.grads, self._scope(state)))
        if pause.phase != "before":
            raise edits.EditError("this node has already run; step to where its gradient arrives to edit it")
        before = summarize_all(pause.grads)
        if isinstance(command, Scale):
            new = edits.scale(pause.grads, command.factor)
        elif isinstance(command, Zero):
            new = edits.zero(pause.grads)
        elif isinstance(command, Clip):
            new = edits.clip(pause.grads, command.max_norm)
        elif isinstance(command, SetGrad):
            new = edits.replace(pause.grads, command.expr, self._scope(state))
        else:  # pragma: no cover - every command class is handled above
            raise CommandError(f"cannot run {command.text!r} here")
        pause.grads, pause.edited = new, True
        after = summarize_all(new)
        self.emit(ev.GradEdited(state.index, pause.node, command.text, before, after))
        return "gradient now " + "; ".join(format_stats(s) for s in after if s is not None)

    @staticmethod
    def _scope(state: _Pass) -> dict[str, Any]:
        """Names an expression may use besides `g` and `torch`: the calling frame's variables."""
        if state.frame is None:
            return {}
        return {**state.frame.f_globals, **state.frame.f_locals}

    def _why(self, name: str, state: _Pass | None) -> str:
        if state is None or state.frame is None:
            raise CommandError("why works while paused in a pass")
        try:
            value = edits.safe_eval(name, self._scope(state))  # what it raises, BaseException too, is an answer
        except edits.ExpressionError as exc:
            if issubclass(exc.error, NameError):
                return f"{name} is not defined where backward was called ({state.frame.f_code.co_name})"
            return f"{name} failed: {exc.detail}"
        if not isinstance(value, torch.Tensor):
            kind = type(value).__name__
            return f"{name} is {'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}, not a tensor"
        graph, nodes = state.capture.graph, state.capture.nodes
        off = f"{name} is not on this pass's graph, so {name}.grad stays None"
        if value.grad_fn is None:
            if not value.requires_grad:
                made = ("it is an inference tensor, made under torch.inference_mode()" if value.is_inference() else
                        f"it was created without requires_grad=True (then use requires_grad=True or "
                        f"{name}.requires_grad_()), or cut from the graph: made by .detach() or .data, "
                        "or computed under torch.no_grad()")
                return f"{off}: it does not require grad, so autograd never tracked it; {made}"
            for i, node in enumerate(nodes):
                if graph.nodes[i]["kind"] == "accumulate" and node.variable is value:
                    return f"yes: {name} is a leaf on this graph, accumulated at {node_title(graph, i)}"
            return (f"{off}: it requires grad but this pass's output does not depend on it: "
                    "it was not used, or only through .detach(), .data, .item() or under no_grad")
        for i, node in enumerate(nodes):
            if node is value.grad_fn:
                made = f"yes: {name} is made by {node_title(graph, i)}; its gradient arrives at #{i}"
                if value.retains_grad:
                    return f"{made}, and {name}.retain_grad() was called, so {name}.grad will hold it"
                return (f"{made}; it is not a leaf, so {name}.grad stays None unless {name}.retain_grad() "
                        "is called (or break on it here and print it)")
        return (f"{off}: it was made by {value.grad_fn.name()}, "
                "but the output of this backward call does not depend on it")
