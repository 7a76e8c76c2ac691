"""The hooks of a planned pass: a CPU pass in `continue` (or `finish`) that only records
statistics or watches for `nan` (gradtui.engine.hooks.plan says which nodes get which hook).

A posthook takes the norm of what its node sent on, there and then (an `isfinite` count
confirms a non-finite norm: a float32 norm overflows on finite values), keeps the Stats and
lets go of the tensors, so nothing is held past the hook (AccumulateGrad still steals its
buffer). The first node whose output is not finite while what it received was stops the pass
in its posthook, right after it ran, and an edit there replaces what it sends on. A node with
a prehook (a user hook on its input, a custom Function) is checked before it runs too. Where
gradtui's compiled posthooks are built (gradtui.engine.hooks.compiled), they take the plain posthooks
on C++ nodes and call the Python one only where it must decide (a non-finite gradient, a quit).
The nodes that ran are emitted as NodesRan batches (at a pause, at the end, and in a pass long
enough to report its progress, every PROGRESS_INTERVAL once READ_EVERY hooked nodes ran;
gradtui.engine.hooks.batches), each hooked node followed by a marker for the nodes derived from it,
whose statistics are made from their producer's only when a listener reads the batch; they are
marked run in the pass's record only where someone looks (`_settle`: before the plan changes at
a pause, when the pass fails, at a hand-over).

On the CPU a read costs no device sync, so reading at every planned node is exact and cheap; an
accelerator pass keeps the deferred, batched reads of the every-node hooks (gradtui.engine.hooks.everynode:
one sync per CHECK_EVERY nodes). If the user steps (or adds a breakpoint by place) at a pause,
the rest of the pass is *upgraded*: every node that has not run gets a prehook and a posthook.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from itertools import compress
from typing import Any, Protocol

from gradtui.engine.compat import current_graph_task_id
from gradtui.engine.hooks.batches import PassBatches, ran_steps
from gradtui.engine.hooks.compiled import CompiledHooks
from gradtui.engine.hooks.derived import DerivedSteps, mark_fed, ready_node
from gradtui.engine.hooks.plan import BOTH, NONE, POST, HookPlan, fed_counts, hook_chains
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.process.quitting import RunQuit
from gradtui.engine.stats.immediate import Listed, Normed, measured, now_stats, quick_stats, resolved
from gradtui.engine.stats.passrecord import PassRecord
from gradtui.engine.stats.watch import Hit, hit_text
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints, Nan
from gradtui.protocol.nodes import info_title
from gradtui.protocol.stats import Stats, any_nonfinite

READ_EVERY = 64
PROGRESS_INTERVAL = 0.05


class Stepping(Protocol):
    """What a planned pass asks of the session: its breakpoints, events, pauses and mode."""

    breakpoints: Breakpoints

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener."""

    def pause_at(
        self,
        state: PassRecord,
        node: int,
        phase: str,
        reason: str,
        grads: tuple[Any, ...],
        late: bool = False,
        editable: bool | None = None,
    ) -> Any:
        """Pause (blocks until a command resumes); returns the Pause."""

    def hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str:
        """Count and announce a breakpoint hit."""

    def stop_reason(self, state: PassRecord, node: int) -> Breakpoint | str | None:
        """Must the engine stop before `node` whatever its gradients are (stepping, a place)?"""

    run_quit: RunQuit
    """The run's quit: its `asked` is read in each hook."""

    def stepping(self) -> bool:
        """Must every node be hooked from now on (stepping, a breakpoint by place)?"""

    def watching(self) -> bool:
        """Can a value breakpoint stop the pass (one is armed and the session may still pause)?"""

    def returned(self, index: int) -> None:
        """Pass `index`'s engine call has returned, its last batch emitted, and no pause can come in
        it: a listener lets go of batches it held only in case the pass paused (before they are
        settled, which would make them)."""


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
        self._grad_outputs: dict[int, tuple[Stats | None, ...]] = {}
        self._grad_inputs: dict[int, tuple[Stats | None, ...]] = {}
        self._ran: list[int] = []
        self._held: list[int] = []
        self._emitted = state.done
        self._batches = PassBatches(state.index, full, DerivedSteps(plan, state.capture), plan.producer)
        self._counts = plan.fed
        """Producer id -> how many nodes the plan derives from it (a batch counts them)."""
        self._producer = plan.producer
        """Per node, its one producer, or None (several: what arrives is measured in its hook)."""
        self._fed: list[int] = []
        """Hooked nodes emitted with their derived nodes, which are not marked run yet (`_settle`)."""
        self._handles: list[Any] = []
        self._upgraded = False
        self._nan = next((bp for bp in owner.breakpoints if Nan.of(bp.spec)), None)
        self._quit = owner.run_quit
        self._put_prehook: Callable[[int], None] | None = None
        self._compiled: CompiledHooks | None = None
        """The pass's compiled posthooks, where built (gradtui.engine.hooks.compiled): its plain POST nodes'."""
        self._compiled_ids = bytearray(len(state.capture.nodes))
        """`delegated`: per node, 1 if its compiled posthook runs (the every-node posthooks pass it by);
        a byte a node, not a set of ids (a 500,000-node chain's took ~40 bytes a node)."""

    # ---- hooks ---------------------------------------------------------------------------

    def register(self) -> None:
        """Put the plan's hooks on the pass's nodes."""
        if self._state.prints is not None:
            hook_chains(self._plan, self._state.capture.walk.names, self._completed)
            self._counts = self._plan.fed = fed_counts(self._plan.derived)
            hooks = self._plan.hooks
            self._state.prints.unhooked = lambda i: hooks[i] == NONE  # sketched where it is sent
        if self._delegated:
            return
        nodes, hooks = self._state.capture.nodes, self._plan.hooks
        pre, post, handles = self._prehook, self._posthook, self._handles
        hooked = list(compress(range(len(hooks)), hooks))  # the hooked nodes (NONE is 0): a fifth of them
        compiled = self._compile(nodes, [i for i in hooked if hooks[i] == POST])
        for i in hooked:
            if compiled[i]:
                continue
            node = nodes[i]
            if hooks[i] == BOTH:
                handles.append(node.register_prehook(_bound(pre, i)))
            handles.append(node.register_hook(_bound(post, i)))

    def _compile(self, nodes: list[Any], ids: list[int]) -> bytearray:
        """Put compiled posthooks on nodes `ids` where they are built: the ids they hook (a custom
        Function's node keeps its Python posthook), as a byte per node of `nodes` (1: hooked). In a
        pass that takes fingerprints they hand each node they measure to its PassPrints (`_visit`),
        once per node."""
        compiled = bytearray(len(nodes))
        if not ids or (module := CompiledHooks.available()) is None:
            return compiled
        self._compiled = CompiledHooks(
            module,
            self._completed,
            self._quit.flag,
            self._producer,
            self._full,
            PROGRESS_INTERVAL,
            self._posthook,
            self._tick,
        )
        if self._state.prints is not None:
            self._compiled.visit(self._visit)
        for i in ids:
            compiled[i] = 1
        for i in self._compiled.register(nodes, ids):  # the ones left to Python
            compiled[i] = 0
        return compiled

    def _visit(self, node: int, sent: tuple[Any, ...], arrived: tuple[Any, ...]) -> None:
        """A node the compiled posthooks measured, in a pass that takes fingerprints: noted as
        the Python posthook notes it."""
        prints = self._state.prints
        if prints is not None:
            prints.node(node, self._state.capture.nodes[node], arrived, sent)

    def close(self) -> None:
        """The pass is over: the hooks do nothing from now on, and are removed."""
        self._live = False
        if self._compiled is not None:
            self._drain()
            self._compiled.close(self._state.capture.nodes)
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def delegate_prehooks(self, put: Callable[[int], None], put_post: Callable[[int], None]) -> None:
        """`delegated`: the every-node hooks put their hooks on a node only once it may run next;
        `put(i)` puts both on node `i` (where it has none), which call `prehook` and `posthook`,
        `put_post(i)` the posthook alone. Asked now for each node that has not run and needs them on
        the plan (a posthook only where no compiled one takes it), and for every such node if the
        user steps again."""
        self._put_prehook = put
        hooks, completed = self._plan.hooks, self._completed
        for i in range(len(hooks)):
            if hooks[i] == BOTH and not completed[i]:
                put(i)
        # the rest's plain posthooks compiled, where built: an every-node one passes them by
        posts = [i for i in range(len(hooks)) if hooks[i] == POST and not completed[i]]
        self._compiled_ids = self._compile(self._state.capture.nodes, posts)
        for i in posts:
            if not self._compiled_ids[i]:
                put_post(i)

    def prehook(self, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Node `node`'s prehook, called by a hook already on it (`delegated`): the plan's, if any."""
        return self._prehook(node, grads) if self._plan.hooks[node] == BOTH else None

    def _own_call(self) -> bool:
        state = self._state
        task = current_graph_task_id()
        if state.task is None:
            state.task = task
        return self._live and task == state.task

    def _prehook(self, node: int, grads: tuple[Any, ...]) -> tuple[Any, ...] | None:
        owner, state = self._owner, self._state
        attend = self._quit.attend  # a quit, or a break-in waiting for the next node
        if attend and self._quit.asked:
            raise GradtuiQuit()
        if not self._own_call():
            return None
        state.running = node
        arrived_stats = self._grad_outputs[node] = tuple(now_stats(g, self._full) for g in grads)
        reason = None
        if self._upgraded or attend:
            place = owner.stop_reason(state, node)
            if isinstance(place, Breakpoint):
                reason = f"{owner.hit(place, state, node)}: {place.spec.text}"
            elif place is not None:
                reason = place
        if (
            reason is None
            and self._owner.watching()
            and (bp := owner.breakpoints.find_value(arrived_stats, state.nan_seen))
        ):
            reason = f"{owner.hit(bp, state, node)}: {bp.spec.text}"
        if any_nonfinite(arrived_stats):
            state.nan_seen = True
        if reason is None:
            return None
        self.flush()
        pause = owner.pause_at(state, node, "before", reason, grads)
        new = None
        if pause.edited:
            new = pause.grads
            self._grad_outputs[node] = tuple(now_stats(g, self._full) for g in new)
        self._after_pause()
        return new

    def posthook(
        self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        """Node `node`'s posthook, called by an every-node hook already on the node (`delegated`:
        `register` puts `_posthook` itself on the nodes otherwise): the plan's, if the plan hooks it."""
        if self._plan.hooks[node] == NONE or self._compiled_ids[node]:
            return None
        return self._posthook(node, grad_inputs, grad_outputs)

    def _posthook(
        self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        """The posthook itself, on the nodes the plan hooks only."""
        # Once per hooked node: kept lean (no generator, no call that an inline test can spare).
        attend = self._quit.attend  # a quit, or a break-in waiting for the next node (`_break_in`)
        if attend and self._quit.asked:
            raise GradtuiQuit()
        if self._compiled is not None:
            self._drain()  # the compiled hooks' nodes that ran before this one go first
        state = self._state
        task = current_graph_task_id()  # `_own_call`, inline
        if state.task is None:
            state.task = task
        if not self._live or task != state.task:
            return None
        full = self._full
        count = len(grad_inputs)
        sent_stats: tuple[Stats | Listed | Normed | None, ...]
        if count == 1 or count == 2 and grad_inputs[1] is None:  # most nodes: one gradient sent (`x * 2.0`'s too)
            first = quick_stats(grad_inputs[0], full) if grad_inputs[0] is not None else None
            sent_stats = (first,) if count == 1 else (first, None)
            bad = first is not None and first.nonfinite
        else:  # each measured (a tensor sent twice, `x + x`'s, is measured twice: rare, and equal)
            sent: list[Stats | Listed | Normed | None] = []
            bad = False
            for g in grad_inputs:
                if g is None:
                    sent.append(None)
                else:
                    one = quick_stats(g, full)
                    if one.nonfinite:  # type: ignore[union-attr]
                        bad = True
                    sent.append(one)
            sent_stats = tuple(sent)
        self._grad_inputs[node] = sent_stats  # type: ignore[assignment]  # Listed and Normed become Stats as a batch is made
        arrived_stats = self._grad_outputs.get(node)
        late_before = False
        if arrived_stats is None and (len(grad_outputs) != 1 or self._producer[node] is None):
            arrived_stats = self._grad_outputs[node] = _arrived(grad_outputs, grad_inputs, sent_stats, full)
            late_before = not state.nan_seen and any_nonfinite(arrived_stats)
        self._completed[node] = 1
        state.running = None
        ran = self._ran
        ran.append(node)
        result = None
        prints = state.prints
        if prints is not None:  # fingerprints (`gradtui diff`): the derived nodes' follow at the pass's end
            prints.node(node, state.capture.nodes[node], grad_outputs, grad_inputs)
        if late_before or bad and not state.nan_seen:
            state.nan_seen = True
            if self._nan is not None and self._owner.watching():
                result = self._stop_after(node, grad_inputs, grad_outputs, late_before)
        if attend and result is None:
            result = self._break_in(node, grad_inputs)
        if time.monotonic() - state.last_progress >= PROGRESS_INTERVAL:
            self._tick()
        return result

    def _tick(self) -> None:
        """A long pass's progress, every PROGRESS_INTERVAL (the compiled posthooks call it too)."""
        self._drain()
        state = self._state
        state.last_progress = time.monotonic()
        if len(self._ran) >= READ_EVERY:  # the rows that ran go out with its progress
            self.flush()
        self._owner.emit(ev.Progress(state.index, self._emitted + len(self._ran), len(state.capture.nodes)))

    def _drain(self) -> None:
        if self._compiled is not None:
            self._compiled.drain(self._ran, self._grad_inputs, self._grad_outputs)

    def _stop_after(
        self, node: int, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...], arrived: bool
    ) -> tuple[Any, ...] | None:
        """The `nan` watch's hit at `node`, which just ran: it made the first non-finite gradient
        (pause after it, editable), or one arrived non-finite (pause before it, late)."""
        owner, state = self._owner, self._state
        self.flush(hold=node)
        state.capture.describe()  # the pause shows names and sources: a lazy capture reads them now
        title = info_title(state.capture.infos[node], node)
        phase = "before" if arrived else "after"
        hit = Hit(self._nan, node, phase, 0)  # type: ignore[arg-type]
        reason = f"{owner.hit(self._nan, state, node)}: {hit_text(hit, 1, title)}"  # type: ignore[arg-type]
        if arrived:
            owner.pause_at(state, node, "before", reason, grad_outputs, late=True)
            self._after_pause()
            return None
        return self._pause_after(node, grad_inputs, reason)

    def _pause_after(self, node: int, grad_inputs: tuple[Any, ...], reason: str) -> tuple[Any, ...] | None:
        """Pause in `node`'s posthook, right after it ran: an edit there replaces what it sends on."""
        pause = self._owner.pause_at(self._state, node, "after", reason, grad_inputs, editable=True)
        self._after_pause()
        if not pause.edited:
            return None
        self._grad_inputs[node] = tuple(now_stats(g, self._full) for g in pause.grads)
        return tuple(pause.grads)

    def _break_in(self, node: int, grad_inputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """A break-in (`pause`, Ctrl-C) was asked for while this pass ran on its plan: stop after
        `node`, the first hooked node since, if the session still says to stop (it steps now)."""
        owner, state = self._owner, self._state
        place = owner.stop_reason(state, node)
        if place is None:
            return None
        reason = f"{owner.hit(place, state, node)}: {place.spec.text}" if isinstance(place, Breakpoint) else place
        self.flush(hold=node)
        state.capture.describe()  # the pause shows names and sources: a lazy capture reads them now
        return self._pause_after(node, grad_inputs, reason)

    # ---- stepping from a pause ------------------------------------------------------------

    def _after_pause(self) -> None:
        """After a pause: if the user now steps (or set a breakpoint by place), hook every node
        that has not run, before and after."""
        if self._upgraded or not self._owner.stepping():
            return
        self._upgraded = True
        self._settle()  # what ran so far is not hooked again
        if self._compiled is not None:
            self._compiled.python_only()
        plan, nodes, completed = self._plan, self._state.capture.nodes, self._completed
        pre, post = self._prehook, self._posthook
        for i, node in enumerate(nodes):
            if completed[i] or plan.hooks[i] == BOTH:
                continue
            if not self._delegated:
                self._handles.append(node.register_prehook(_bound(pre, i)))
            elif self._put_prehook is not None:
                self._put_prehook(i)  # the every-node prehook, which calls `prehook`
            if plan.hooks[i] == NONE:
                if not self._delegated:
                    self._handles.append(node.register_hook(_bound(post, i)))
                for fed in plan.derived.values():
                    if i in fed:
                        fed.remove(i)
                plan.producer[i] = None
            plan.hooks[i] = BOTH
        self._counts = plan.fed = fed_counts(plan.derived)

    # ---- statistics out -------------------------------------------------------------------

    def flush(self, hold: int | None = None) -> None:
        """Emit the hooked nodes that ran since the last flush as one NodesRan batch, each followed
        by the derived nodes it feeds (gradtui.engine.hooks.batches: their statistics are made when the
        batch is read); those `hold` feeds wait for the next flush (it is paused in its posthook:
        they have not run, and stepping on hooks them instead)."""
        self._drain()
        held, self._held = self._held, []
        ran, self._ran = self._ran, []
        if not held and not ran:
            return
        steps, count, self._held = ran_steps(
            held, ran, hold, self._counts, self._plan.producer, self._grad_outputs, self._grad_inputs, self._fed
        )
        state = self._state
        first = self._emitted + 1
        self._emitted = state.done = self._emitted + count
        self._owner.emit(self._batches.batch(steps, first, count))

    def _settle(self) -> None:
        """Mark run, in the pass's record, the nodes derived from the hooked nodes emitted so far."""
        fed, self._fed = self._fed, []
        mark_fed(self._plan.derived, self._completed, fed)

    def finish(self, error: BaseException | None = None) -> None:
        """The pass's engine call returned (or raised `error`): emit what is left, and make what a
        batch still held needs of the live nodes; if it failed, name the node that was running
        (in a hook of its own or the script's)."""
        self.flush()
        if not self._delegated:  # (a pass handed over after a pause may pause again as it settles)
            self._owner.returned(self._state.index)
        self._batches.settle()
        if error is None:
            return
        self._settle()
        state = self._state
        if state.running is None:
            state.running = ready_node(state.capture.infos, self._completed)
        if state.running is not None:
            state.grad_outputs[state.running] = resolved(self._grad_outputs.get(state.running, ()))


def _arrived(
    grad_outputs: tuple[Any, ...], grad_inputs: tuple[Any, ...], sent_stats: tuple[Any, ...], full: bool
) -> tuple[Any, ...]:
    """What arrived at a node no single producer's statistics give (several producers, or several
    gradients in): measured now, a tensor it sent on as it was (a pass-through) not again."""
    if len(grad_outputs) != 1:
        return measured(grad_outputs, full, grad_inputs, sent_stats, quick_stats)
    arrived = grad_outputs[0]
    if arrived is None:
        return (None,)
    for j, sent in enumerate(grad_inputs):  # `measured`'s rule for one gradient, without its loops
        if arrived is sent:
            return (sent_stats[j],)
    return (quick_stats(arrived, full),)


def _bound(hook: Callable[..., Any], node: int) -> Callable[..., Any]:
    """`hook` with the node id bound first."""
    return functools.partial(hook, node)


__all__ = ["PlannedPass", "POST"]
