"""The stepping controller: passes, breakpoints, pauses, over parts it owns.

A `Session` intercepts the backward calls of whatever runs while it is installed (through an
`Interceptor`, gradtui.engine.intercept). Each call of its own is one *pass*: the graph is
captured, hooks are installed (on every node while stepping; by the hook plan in `continue`,
gradtui.engine.hooks.plan and .planned), the real backward runs, and the hooks go when it returns or
raises. Hooks run on the thread that called backward (the script's thread); to pause, a hook
emits `Paused` and blocks on the command queue. The parts: the mode, the command queue and the
pause are the `Stepper`'s (gradtui.engine.stepper); commands run in the `CommandRunner`
(gradtui.engine.dispatch); a pass's engine call runs in the `PassRunner` (gradtui.engine.hooks.passes)
under per-pass hooks (gradtui.engine.hooks.everynode, with its reads, or gradtui.engine.hooks.planned); what a
pass records is gradtui.engine.stats.passrecord's. What the hooks ask of the session goes through its
public methods (gradtui.engine.stepper.Owner).

Other threads (the UI, the headless driver, the agent's server) talk to the session only
through `submit` and `quit`, and hear from it only through events.
"""

from __future__ import annotations

import gc
import linecache
import os
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from gradtui.engine.capture import callsite
from gradtui.engine.capture.graph import Names, capture
from gradtui.engine.capture.names import LaterNames
from gradtui.engine.dispatch import CommandRunner
from gradtui.engine.hooks.choice import HookChoice
from gradtui.engine.hooks.everynode import CHECK_EVERY, PROGRESS_INTERVAL, READ_EVERY, REGION_COMMANDS
from gradtui.engine.hooks.passes import PassRunner, unhooked_start
from gradtui.engine.hooks.plan import make_plan, resume
from gradtui.engine.hooks.planned import PlannedPass
from gradtui.engine.intercept import GradtuiQuit, InFlight, Interceptor
from gradtui.engine.listeners import Listener, Listeners
from gradtui.engine.process.quitting import RunQuit
from gradtui.engine.provenance.forward import Provenance, UnsavedSources, forward_roots
from gradtui.engine.stats.passrecord import FlowRecorder, PassRecord, nonfinite_roots, root_values
from gradtui.engine.stepper import Mode, Pause, Stepper
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints
from gradtui.protocol.commands import BreakIn, Command, Quit

if TYPE_CHECKING:
    from gradtui.engine.fingerprints.values import PassPrints

__all__ = ["CHECK_EVERY", "GradtuiQuit", "Listener", "PROGRESS_INTERVAL", "READ_EVERY", "Session"]


class Session:
    """Debugs the backward passes of whatever runs while it is active (see module doc)."""

    def __init__(
        self,
        listener: Listener | None = None,
        *,
        provenance: bool = True,
        full_stats: bool = True,
        hook_all_passes: bool = True,
        flow_unhooked: bool = True,
        check_every: int | None = None,
        fingerprints: bool = False,
    ) -> None:
        """`full_stats=False` records only norms while the engine runs between pauses (see
        `summarize(light=True)`): a third of the cost, for the UI when no report is written.

        `hook_all_passes=False` lets a pass in which nothing can stop (running on, no
        breakpoint that could match it) run unhooked at plain speed: no per-node statistics
        for it, only its gradient flow. For headless runs that write no report.
        `flow_unhooked=False` skips even that flow (a walk of the graph and two norms of every
        parameter and gradient) when no one will ask for it.
        `check_every`: with a value breakpoint armed, read statistics back every this many
        nodes (1: at every node, so a hit is never late; see gradtui.engine.stats.watch). None: 1 for
        a pass whose roots are on the CPU, CHECK_EVERY for one on an accelerator.
        `fingerprints`: sketch every hooked pass's values for comparing runs (a recording;
        gradtui.engine.fingerprints.values), sent as a PassPrints event before each PassFinished.
        """
        self.fingerprints = fingerprints
        self.against: Any = None
        """A reference recording to compare each hooked pass with (`--against`; with fingerprints):
        given by whoever builds the session (gradtui.agent.build: a gradtui.record.against.Reference),
        so the engine does not open recordings itself."""
        self.breakpoints = Breakpoints()
        self._listeners = Listeners()
        if listener is not None:
            self._listeners.add(listener)
        self._detached = False
        self._stepper: Stepper
        self.run_quit = RunQuit(lambda: self._stepper.wake())
        """The run's one quit path (gradtui.engine.process.quitting): the agent that builds the session
        gives it the mode's way out."""
        self._stepper = Stepper(self.emit, self.run_quit)
        self._passes = 0
        self._provenance = Provenance() if provenance else None
        self._intercept = Interceptor(self, self.run_quit, self._provenance)
        self._recorder = FlowRecorder()
        self._sources = UnsavedSources()
        self._unhooked_in_flight = False
        """A pass runs unhooked now (a break-in then waits for the next pass)."""
        self._ended = False
        """Uninstalled after running: no backward call will come (a break-in is refused)."""
        self._variables_told = -1
        """The last pass whose call-site variables were sent (at its first pause)."""
        self._dispatch = CommandRunner(
            self.breakpoints, self._stepper, self._recorder, self.emit, lambda: self.against is not None
        )
        self._stepper.execute = self._dispatch.execute
        self._runner = PassRunner(self, self._intercept, self._recorder)
        self._full_stats = full_stats
        self._hook_all = hook_all_passes
        self._flow_unhooked = flow_unhooked
        self._check_every = None if check_every is None else max(1, check_every)
        self._choice = HookChoice(
            self, self._stepper, self.breakpoints, hook_all=hook_all_passes, check_every=self._check_every
        )
        self.can_hand_over = self._choice.can_hand_over
        """May a stepping pass resumed at a node run the rest on a hook plan? (gradtui.engine.hooks.choice)"""
        self.follow: Callable[[PassRecord, int], str | None] | None = None
        """Distributed follow mode's per-node "park here?" check (gradtui.distributed.rank), or None.
        Called before a node runs, after any pause of its own; it may block (the ranks' gate) and
        returns a reason to pause here (another rank is paused) or None to let the node run."""

    # ---- wiring -------------------------------------------------------------------------

    def add_listener(
        self,
        listener: Listener,
        graph: bool | Callable[[], bool] = True,
        batches: bool = False,
        flow: bool | Callable[[], bool] = True,
        holds: bool = False,
        leaves: bool | Callable[[], bool] = True,
        returned: Callable[[int], None] | None = None,
    ) -> None:
        """Also send every event to `listener` (called on the emitting thread); what it wants of
        a pass (`graph`, `batches`, `flow`, `leaves`), whether it may hold the script (`holds`),
        and what to call as a planned pass returns (`returned`): see
        gradtui.engine.listeners.Listeners.add."""
        self._listeners.add(listener, graph, batches, flow, holds, leaves, returned)

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener (gradtui.engine.listeners)."""
        self._listeners.emit(event)

    @property
    def passes(self) -> int:
        """How many backward passes have started."""
        return self._passes

    @property
    def paused(self) -> bool:
        """Is the engine blocked at a node, waiting for a command? (For in-process drivers; clients
        follow `Paused` / `Resumed` / `PassFinished` instead.)"""
        return self._stepper.pause is not None

    def install(self) -> None:
        """Patch torch's backward entry points and start provenance recording.

        Call it on the thread that runs the script: provenance is per thread, and threads
        that already run elsewhere in the process are not the script's.
        """
        if self._intercept.installed:
            return
        self._intercept.install()
        if self._provenance:
            self._provenance.install()

    def uninstall(self) -> None:
        """Restore torch's own functions and stop provenance recording."""
        if not self._intercept.installed:
            return
        self._ended = True
        self._intercept.uninstall()
        if self._provenance:
            self._provenance.uninstall()

    def __enter__(self) -> Session:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # ---- commands from other threads -----------------------------------------------------

    def submit(self, command: Command, request: int | None = None) -> None:
        """Give the session a command (thread-safe), parsed where its line was typed: the
        session parses nothing. Results arrive as events; every `CommandResult` answering this
        command carries `request`.

        While paused, commands queue up for the paused hook in order; one that acts on the paused
        node (an edit, print, why) is dropped if the engine has moved on by the time it is read
        (typed just after `continue`). While running, those are refused; breakpoint commands
        take effect at once.
        """
        if isinstance(command, Quit):
            self.run_quit.quit()
        elif isinstance(command, BreakIn):
            text, ok = self._break_in()
            self.emit(ev.CommandResult(command.text, text, ok=ok, request=request))
        elif (pause := self._stepper.pause) is not None:
            self._stepper.put(command, pause, request)
        elif isinstance(command, REGION_COMMANDS):
            self._dispatch.execute(command, None, request)
        else:
            running = "is running" if self._intercept.installed else "is not running (it has ended or not started)"
            self.emit(ev.CommandResult(command.text, f"not paused: the script {running}", ok=False, request=request))

    def _break_in(self) -> tuple[str, bool]:
        """`pause`: ask the engine to pause at the next backward node; the answer (what it waits
        for now) and whether it was taken."""
        if self._stepper.pause is not None:
            return "already paused", True
        if self._ended:
            return "not running: the script has ended", False
        if self._detached:
            return "cannot pause: this run pauses no more (its commands ran out)", False
        self._stepper.request_break_in()
        if self._unhooked_in_flight:
            return "a backward pass runs unhooked at plain speed: pausing at the first node of the next", True
        if self._intercept.in_flight is not None:
            return "pausing at the next node of the backward pass in flight", True
        return "running forward; pausing at the next backward", True

    def quit(self) -> None:
        """Stop at the next opportunity: a paused hook raises GradtuiQuit, as will the next one
        (the end of every way out of `run_quit`)."""
        self.run_quit.stop()

    @property
    def quitting(self) -> bool:
        """Has quit been asked for?"""
        return self.run_quit.asked

    def stop_debugging(self) -> None:
        """After a quit in a process gradtui does not own (`gradtui.listen()` in a notebook): the
        pass that was stopped raised GradtuiQuit; from now on backward calls run unhooked, as if
        gradtui were not there, until `uninstall`."""
        self.breakpoints.delete(None)
        self._stepper.mode = Mode.CONTINUE
        self.run_quit.clear()

    def forked(self) -> None:
        """This process is a fork of the debugged one (called in the child, at the fork): its
        backward calls run as if gradtui were not there, and it sends no event (the listeners, a
        server's sockets and a recording's writer, are the parent's)."""
        self._listeners = Listeners()
        self._detached = True
        self.stop_debugging()
        self.uninstall()

    def run_on(self) -> None:
        """Run on until a breakpoint hits (as `continue`), paused or not: for a run armed before
        its first pass, and an agent whose client detached."""
        self._stepper.run_on()

    def step_next_pass(self) -> None:
        """Pause at the first node of the next pass (as `step` does when no node of this pass is
        left): for a hold between passes (gradtui.distributed.checks) that resumes by stepping."""
        self._stepper.mode = Mode.STEP

    def wants_provenance(self) -> bool:
        """Can a later pass still be captured? Not once detached with no pass hooked for a
        report or recording: the interceptor then stops recording the forward's provenance."""
        return not self._detached or self._hook_all

    def detach(self) -> None:
        """Never pause again (headless mode once its commands run out); resume if paused. With
        nothing hooked for a report or recording, provenance stops after the pass in flight."""
        self._detached = True
        self._stepper.cancel_break_in()  # it would never come: the hooks need not look for it
        self._stepper.resume()

    # ---- passes (called by the interceptor) ---------------------------------------------

    def nested(self, outer: InFlight, call: str, frame: FrameType, roots: tuple[Any, ...], inside: bool = True) -> None:
        """Announce a backward that runs unhooked inside (or beside) pass `outer`."""
        self.emit(self._recorder.nested_pass(outer, call, frame, roots, inside, self.breakpoints))

    def own_pass(
        self, call: str, frame: FrameType, roots: tuple[Any, ...], nodes: list[Any], run: Callable[[], Any]
    ) -> Any:
        """One pass of the session's own: hooked (captured, hooks on every node) or unhooked."""
        collecting = gc.isenabled()
        # A pass makes many small objects and no cyclic garbage, and a collection walks the whole heap (a
        # model's worth) at the hooks' cost: the collector is off but during a pause and after the pass.
        self._stepper.collector = collecting
        gc.disable()
        try:
            return self._own_pass(call, frame, roots, nodes, run)
        finally:
            if collecting:
                gc.enable()

    def _own_pass(
        self, call: str, frame: FrameType, roots: tuple[Any, ...], nodes: list[Any], run: Callable[[], Any]
    ) -> Any:
        index = self._passes
        self._passes += 1
        self._stepper.next_pass()
        losses = root_values(roots)
        pending = None
        if not self._detached and len(self.breakpoints):
            pending = self.breakpoints.find_loss(losses, nonfinite_roots(roots, losses, self.breakpoints))
        call_text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        call_site = _call_site(frame)
        if not self._choice.hooked(index, pending):
            self._unhooked_in_flight = True
            try:
                return self._runner.unhooked(
                    unhooked_start(index, call, call_text, call_site, losses), nodes, run, self._flow_unhooked
                )
            finally:
                self._unhooked_in_flight = False
        on_cpu = _on_cpu(roots)
        planned = ev.accumulates(call) and self._choice.planned(pending, on_cpu)  # grad(): no AccumulateGrad to derive
        lazy = planned and not self._listeners.graph_needed()
        names = (LaterNames if lazy and not self._listeners.names_leaves() else Names.from_scopes)(
            frame.f_locals, frame.f_globals, ran=forward_roots
        )
        cap = capture(nodes, names, lazy=lazy)
        state = PassRecord(index, cap, frame, names, call=call, on_cpu=on_cpu)
        state.check_every = self._check_every or (1 if on_cpu else CHECK_EVERY)
        if self.fingerprints:
            state.prints = _pass_prints(self.against, index, cap)
            if self.against is not None and (line := self.against.notice()) is not None:
                self.emit(ev.Notice(line))  # a reference this pass cannot be compared with: said at once
        if pending is not None:
            state.pending, state.pending_reason = pending, _loss_reason(pending, losses)
        state.completed = bytearray(len(cap.nodes))
        self._intercept.in_flight = state
        if cap.described:  # a notebook cell's text, for a client in another process
            for text in self._sources.new(info.path for info in cap.infos):
                self.emit(text)
        self.emit(ev.PassStarted(index, call, call_text, call_site, cap.graph, cap.roots, losses))  # type: ignore[arg-type]
        del cap, nodes, names
        return self._runner.planned(state, run) if planned else self._runner.every_node(state, run)

    def plan_rest(self, state: PassRecord) -> PlannedPass:
        """The planned hooks for the rest of every-node pass `state` (handed over after a pause):
        called by its every-node hooks, which stay on (gradtui.engine.hooks.everynode)."""
        cap = state.capture
        plan = resume(make_plan(cap.walk, cap.nodes, cap.roots, self._intercept.hooks_seen), state.completed)
        return PlannedPass(self, state, plan, full=not self.light, delegated=True)

    # ---- what a pass's hooks ask of the session (gradtui.engine.stepper.Owner, .planned.Stepping)

    def pause_at(
        self,
        state: PassRecord,
        node: int,
        phase: str,
        reason: str,
        grads: tuple[Any, ...],
        late: bool = False,
        editable: bool | None = None,
    ) -> Pause:
        """Pause at `node` until a command resumes (gradtui.engine.stepper.Stepper.wait); `editable`:
        paused in its posthook, whose result an edit replaces."""
        if state.index != self._variables_told and state.frame is not None:  # the pass's first pause
            self._variables_told = state.index
            self.emit(callsite.variables(state.index, _call_site(state.frame), state.frame.f_locals, state.capture))
        return self._stepper.wait(state, node, phase, reason, grads, late=late, editable=bool(editable))

    def stop_reason(self, state: PassRecord, node: int) -> Breakpoint | str | None:
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
            bp = self.breakpoints.find_place(state.capture.infos[node], node, state.index, state.done == 0, state.fired)
            if bp is not None:
                return bp
        if self._stepper.stepping:
            return self._stepper.break_in or "step"
        return None

    def quitting_now(self) -> bool:
        """Has quit been asked for?"""
        return self.run_quit.asked

    def wants_flow(self) -> bool:
        """Does a listener read the gradient flow of the hooked pass ending now (see `add_listener`)?"""
        return self._listeners.wants_flow()

    def wants_leaves(self) -> bool:
        """Does a listener read the leaves' gradient statistics of a hooked pass (see `add_listener`)?"""
        return self._listeners.wants_leaves()

    def returned(self, index: int) -> None:
        """Planned pass `index` has returned and can pause no more (see `add_listener`'s `returned`)."""
        self._listeners.returned(index)

    def stepping(self) -> bool:
        """Must every node of the pass in flight be hooked from now on?"""
        return not self._detached and (self._stepper.stepping or bool(self.breakpoints.places))

    @property
    def detached(self) -> bool:
        """Has the session detached (its client left for good: it never pauses again)?"""
        return self._detached

    def watching(self) -> bool:
        """Can a value breakpoint stop the pass in flight? Not once detached: never pause again."""
        return not self._detached and self.breakpoints.watching()

    @property
    def light(self) -> bool:
        """Record light stats now? Only when asked for and not stepping (a step pauses anyway)."""
        return not self._full_stats and not self._stepper.stepping

    def hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str:
        """Count and announce a breakpoint hit; returns how a pause reason names it."""
        return self._dispatch.hit(bp, state, node)

    def breakpoint_state(self) -> ev.BreakpointsChanged:
        """The breakpoints as they are now, as the event clients get after every change: for a
        client that attaches late."""
        return self._dispatch.breakpoint_state()


def _pass_prints(against: Any, index: int, cap: Any) -> PassPrints:
    """A hooked pass's fingerprints, compared with the reference's same pass if there is one."""
    from gradtui.engine.fingerprints import sketch  # here: imported only by a run that takes fingerprints
    from gradtui.engine.fingerprints.values import PassPrints
    from gradtui.engine.hooks.compiled import CompiledHooks

    module = CompiledHooks.available()  # the sketch in C++ where the compiled posthooks are built
    sketch.use_compiled(getattr(module, "sketch", None) if module is not None else None)
    reference = against.pass_reference(index, cap.infos) if against is not None else None
    return PassPrints(cap.nodes, reference, against.name if against is not None else "", cap.slots)


def _loss_reason(pending: Breakpoint, losses: tuple[float | None, ...]) -> str:
    """How a pause names the loss breakpoint the pass's roots matched."""
    shown = ", ".join(f"{v:.6g}" for v in losses if v is not None)
    return f"{pending.spec.text} (loss {shown or 'not a scalar'})"


def _call_site(frame: FrameType) -> str:
    """`file.py:LINE` of the backward call in `frame`, as a pass and its variables name it."""
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _on_cpu(roots: tuple[Any, ...]) -> bool:
    """Are a pass's roots (its losses) CPU tensors? Reading statistics back then syncs nothing."""
    return all(getattr(getattr(root, "device", None), "type", "cpu") == "cpu" for root in roots)
