"""What each command does once the session runs it: dispatch by `match` on the command classes.

A part of `Session` (gradtui.engine.session): the session's pause loop calls `execute` for each
command it takes; a command that moves the engine sets the stepper's mode (gradtui.engine.stepper).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradtui.engine import edits
from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.provenance.modulecalls import forward_roots
from gradtui.engine.stats.passrecord import FlowRecorder, PassRecord
from gradtui.engine.stats.summary import describe, summarize_all
from gradtui.engine.stepper import Mode, Pause, Stepper
from gradtui.protocol import breakpoint_commands
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints, Module, Role, warning_for
from gradtui.protocol.commands import (
    Break,
    BreakIn,
    Clip,
    Command,
    CommandError,
    Continue,
    Delete,
    Exec,
    Finish,
    Flow,
    FlowOf,
    Help,
    Interact,
    ListBreakpoints,
    Print,
    Scale,
    SetGrad,
    ShowPass,
    Step,
    Why,
    Zero,
    help_text,
)
from gradtui.protocol.flowtext import flow_answer
from gradtui.protocol.stats import format_grads, format_stats


class CommandRunner:
    """Runs commands for the session (see module doc): owned by it, given what commands act on."""

    def __init__(
        self,
        breakpoints: Breakpoints,
        stepper: Stepper,
        recorder: FlowRecorder,
        emit: Callable[[ev.Event], None],
        has_reference: Callable[[], bool] = lambda: False,
    ) -> None:
        self.breakpoints = breakpoints
        self._has_reference = has_reference
        """Does the run compare with a reference recording (`--against`)? `break differs` needs one."""
        self._stepper = stepper
        self._recorder = recorder
        self.emit = emit

    def breakpoint_state(self) -> ev.BreakpointsChanged:
        """The breakpoints as they are now (numbers, specs, hits), as the event clients get after
        every change."""
        return ev.BreakpointsChanged(tuple(ev.BreakpointInfo(bp.number, bp.spec, bp.hits) for bp in self.breakpoints))

    def breakpoints_changed(self) -> None:
        """Tell clients the breakpoints as they are now."""
        self.emit(self.breakpoint_state())

    def hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str:
        """Count and announce a breakpoint hit; returns how a pause reason names it."""
        bp.hits += 1
        state.fired.add(bp.number)
        self.emit(ev.BreakpointHit(bp.number, bp.spec.text, state.index, node))
        self.breakpoints_changed()
        return f"breakpoint {bp.number}"

    def execute(self, command: Command, state: PassRecord | None, request: int | None = None) -> None:
        """Run one command; its result (or refusal) is emitted as a CommandResult for `request`."""
        try:
            text = self._run_command(command, state)
        except (CommandError, edits.EditError) as exc:
            self.emit(ev.CommandResult(command.text, str(exc), ok=False, request=request))
        except GradtuiQuit:
            raise  # the user quit while it ran
        except BaseException as exc:  # noqa: BLE001 - a command torch cannot do here (or an expression's
            # KeyboardInterrupt, GeneratorExit, SystemExit) must not end the script
            first = (str(exc).splitlines() or [""])[0][:300]  # torch's dispatch errors run to pages
            self.emit(
                ev.CommandResult(
                    command.text, f"{command.text!r} failed: {type(exc).__name__}: {first}", ok=False, request=request
                )
            )
        else:
            if text is not None:
                self.emit(ev.CommandResult(command.text, text, request=request))
            if isinstance(command, breakpoint_commands.CHANGES):
                self.breakpoints_changed()  # after the answer, as clients expect

    def _run_command(self, command: Command, state: PassRecord | None) -> str | None:
        """Do `command`; its answer's text (None: nothing to say), or raise to refuse it."""
        match command:
            case Step():
                self._stepper.mode = Mode.STEP
            case Continue():
                self._stepper.mode = Mode.CONTINUE
            case Finish():
                self._stepper.mode = Mode.FINISH
            case Break() | Delete() | ListBreakpoints():
                return breakpoint_commands.answer(self.breakpoints, command, notes=lambda bp: self._notes(bp, state))
            case Help():
                return help_text()
            case Flow():
                flow = self._recorder.flow
                if not flow:
                    return "no gradient flow yet: no backward pass has finished"
                return flow_answer(self._recorder.flow_pass, flow)
            case ShowPass(index=index):
                raise CommandError(self._not_kept(index, state))
            case FlowOf(index=index):
                raise CommandError(
                    f"flow {index}: a live run keeps the flow of its last pass only (flow); "
                    "a recording (--record) keeps every pass's"
                )
            case Why(name=name):
                from gradtui.engine.why import explain  # here: why.py imports networkx

                if state is None or state.frame is None:
                    raise CommandError("why works while paused in a pass")
                return explain(
                    name,
                    self._scope(state),
                    state.capture.graph,
                    state.capture.nodes,
                    state.frame.f_code.co_name,
                    forward_roots,
                )
            case Print(expr=expr):
                pause = self._paused_at(state)
                if expr is None:
                    lines = format_grads(summarize_all(pause.grads), pause.phase)
                    if state is not None and state.prints is not None:  # against a reference: both sides
                        lines = [*lines, *state.prints.both_sides(pause.node)]
                    return "\n".join(lines) or "no gradients"
                return describe(edits.evaluate(expr, pause.grads, self._scope(state)))  # type: ignore[arg-type]
            case Scale() | Zero() | Clip() | SetGrad():
                return self._edit(command, state)
            case Exec(source=source):
                return self._statement(command, source, state)
            case BreakIn():
                return "already paused"
            case Interact():
                raise CommandError("interact opens a Python console in the UI; here, run Python with !STATEMENT")
            case _:  # pragma: no cover - every command class is handled above
                raise CommandError(f"cannot run {command.text!r} here")
        return None

    def _notes(self, bp: Breakpoint, state: PassRecord | None) -> list[str]:
        """What to say of a breakpoint just added: where it cannot stop."""
        notes = []
        if state is not None and (warning := warning_for(bp.spec, state.capture.graph, state.index)):
            notes.append(warning)
        if bp.spec.role is Role.REFERENCE and not self._has_reference():
            notes.append("no reference recording: it stops only in a run --against REF.db")
        if Module.of(bp.spec) and (why := self._recorder.checkpointed(bp)):
            notes.append(f"but {why}")
        return notes

    @staticmethod
    def _not_kept(index: int, state: PassRecord | None) -> str:
        """Why a live run cannot show pass `index` (`pass N`: the UI browses its own kept passes)."""
        if state is not None and state.index == index:
            return f"pass {index} is the pass in flight: it is the one shown"
        return (
            f"pass {index} is not kept: a live run keeps only the pass in flight "
            "(the UI keeps recent passes; a recording, --record, keeps them all)"
        )

    def _paused_at(self, state: PassRecord | None) -> Pause:
        pause = self._stepper.pause
        assert pause is not None and state is not None, "needs_pause commands only run while paused"
        return pause

    def _edit(self, command: Command, state: PassRecord | None) -> str:
        """Apply an edit command to the paused node's incoming gradient."""
        pause = self._paused_at(state)
        assert state is not None
        if not pause.editable:
            raise edits.EditError("this node has already run; step to where its gradient arrives to edit it")
        before = summarize_all(pause.grads, histogram=True)
        match command:
            case Scale(factor=factor):
                new = edits.scale(pause.grads, factor)
            case Zero():
                new = edits.zero(pause.grads)
            case Clip(max_norm=max_norm):
                new = edits.clip(pause.grads, max_norm)
            case SetGrad(expr=expr):
                new = edits.replace(pause.grads, expr, self._scope(state))
            case _:  # pragma: no cover
                raise CommandError(f"cannot run {command.text!r} here")
        pause.grads, pause.edited = new, True
        after = summarize_all(new, histogram=True)  # the UI shows the edited gradient's own values
        self.emit(ev.GradEdited(state.index, pause.node, command.text, before, after))
        return "gradient now " + "; ".join(format_stats(s) for s in after if s is not None)

    def _statement(self, command: Command, source: str, state: PassRecord | None) -> str:
        """`!STATEMENT`: run it in the pause's shell (made at the first one); what it printed is
        the answer. A `g` it rebound or wrote into is an edit, as `set` makes: checked, sent on,
        announced (GradEdited: recordings keep it) and refused where the node has run."""
        pause = self._paused_at(state)
        assert state is not None
        if pause.shell is None:
            pause.shell = edits.Shell(pause.grads, self._shell_names(pause, state))
        shell = pause.shell
        printed = shell.run(source)
        try:
            new = shell.edited(pause.grads, source)
        except edits.EditError as exc:
            shell.took(pause.grads)  # g is the gradient again, as the refusal says
            raise edits.EditError(f"{printed}{exc}; g is the unedited gradient again") from None
        if new is None:
            return printed.rstrip("\n")
        if not pause.editable:
            shell.took(pause.grads)
            raise edits.EditError(
                f"{printed}this node has already run; step to where its gradient arrives to edit "
                "it (g is the unedited gradient again)"
            )
        before = summarize_all(pause.grads, histogram=True)
        pause.grads, pause.edited = new, True
        shell.took(new)
        after = summarize_all(new, histogram=True)
        self.emit(ev.GradEdited(state.index, pause.node, command.text, before, after))
        return printed + "gradient now " + "; ".join(format_stats(s) for s in after if s is not None)

    def _shell_names(self, pause: Pause, state: PassRecord) -> dict[str, Any]:
        """What `!` sees besides `g` and `torch`: the call-site variables (globals, then locals),
        `node` (the paused autograd node) and `module` (the nn.Module it was made in, or None)."""
        scope = self._scope(state)
        node = state.capture.nodes[pause.node]
        return {**scope, "node": node, "module": _module_of(state.capture.infos[pause.node].module, scope)}

    @staticmethod
    def _scope(state: PassRecord) -> dict[str, Any]:
        """Names an expression may use besides `g` and `torch`: the calling frame's variables."""
        if state.frame is None:
            return {}
        return {**state.frame.f_globals, **state.frame.f_locals}


def _module_of(path: str | None, scope: dict[str, Any]) -> Any:
    """The nn.Module a node's module path names (`model.layers.0`: its first part a variable of
    `scope`, the rest a submodule of it), or None where the path names none (a module named
    by its class)."""
    if not path:
        return None
    first, _, rest = path.partition(".")
    root = scope.get(first)
    get = getattr(root, "get_submodule", None)
    if get is None:
        return None
    try:
        return get(rest) if rest else root
    except AttributeError:
        return None
