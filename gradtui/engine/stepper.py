"""How the engine moves between pauses: the mode, the command queue and the pause itself.

The session owns one `Stepper`. Other threads put commands on its queue (`put`); a paused hook
blocks in `wait`, which runs the queued commands (through the session's command runner) until one
resumes the engine; commands that move the engine set the mode. The state every part of the
session agrees on, kept in one place instead of a bare string written from several files.
"""

from __future__ import annotations

import gc
import queue
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import msgspec
import torch

from gradtui.engine.intercept import GradtuiQuit
from gradtui.engine.stats.summary import summarize_all
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints
from gradtui.protocol.commands import Command, Continue

if TYPE_CHECKING:
    from gradtui.engine.edits import Shell
    from gradtui.engine.process.quitting import RunQuit
    from gradtui.engine.stats.passrecord import PassRecord


class Mode(Enum):
    """What the engine does after a pause: pause at the next node, run on until a breakpoint,
    or run to the end of the pass and pause at the first node of the next one."""

    STEP = "step"
    CONTINUE = "continue"
    FINISH = "finish"


class Pause(msgspec.Struct):
    """The state of a pause: the node, and the gradients the commands edit."""

    node: int
    phase: str
    grads: tuple[torch.Tensor | None, ...]
    edited: bool = False
    late: bool = False
    """The node has already run (a value breakpoint read back after it): nothing to edit."""
    editable_after: bool = False
    """Paused in the node's posthook, which sends on what an edit makes (a planned pass's `nan`,
    a break-in)."""
    shell: Shell | None = None
    """The names `!STATEMENT` runs in (made at the first one, kept for the rest of the pause)."""

    @property
    def editable(self) -> bool:
        """Can an edit still change what flows on from here?"""
        return not self.late and (self.phase == "before" or self.editable_after)


class Queued(NamedTuple):
    """A command waiting for the paused hook."""

    command: Command
    meant_for: Pause | None
    """The pause it was typed at (None: any)."""
    request: int | None = None
    """The client's id for it, carried by every CommandResult that answers it."""


BREAK_IN = "break in"
"""How a pause that `pause` (Ctrl-C in the UI) asked for gives its reason."""


class Stepper:
    """The mode, the command queue and the pause (see module doc)."""

    def __init__(self, emit: Callable[[ev.Event], None], quitting: RunQuit) -> None:
        self.mode = Mode.STEP
        """Pause at the first node of the first pass, as pdb does."""
        self.pause: Pause | None = None
        """The pause the engine is blocked in, or None while it runs."""
        self.execute: Callable[[Command, PassRecord | None, int | None], None] | None = None
        """Runs one command at a pause (the session's CommandRunner.execute)."""
        self.break_in: str | None = None
        """A break-in waits for the next node (`request_break_in`): the reason that pause gives."""
        self.collector = False
        """Was the garbage collector on when the pass in flight began (so on during its pauses)?"""
        self._emit = emit
        self._quitting = quitting
        self._queue: queue.Queue[Queued | None] = queue.Queue()
        """Commands for the paused hook; None wakes it to see a quit."""

    @property
    def stepping(self) -> bool:
        """Does the engine pause at every node?"""
        return self.mode is Mode.STEP

    def put(self, command: Command, meant_for: Pause | None, request: int | None = None) -> None:
        """Queue a command for the paused hook (thread-safe)."""
        self._queue.put(Queued(command, meant_for, request))

    def request_break_in(self) -> None:
        """Pause at the next node the engine runs (thread-safe): the mode steps, so the next pass
        is hooked and a hooked pass in flight stops at its next prehook; the hooks of a planned
        pass are told to look (`RunQuit.attend_to`), so its next hooked node stops it. Nothing is
        checked per node until this is asked for."""
        self.break_in = BREAK_IN
        self.mode = Mode.STEP
        self._quitting.attend_to(True)

    def cancel_break_in(self) -> None:
        """No break-in waits any more (a pause came, or the session never pauses again): the
        planned hooks stop looking."""
        if self.break_in is not None:
            self.break_in = None
            self._quitting.attend_to(False)

    def wake(self) -> None:
        """Unblock the paused hook (thread-safe), to see that the session was told to stop."""
        self._queue.put(None)

    def take(self, timeout: float) -> Queued | None:
        """The next queued command (None: a wake-up); raises queue.Empty after `timeout` seconds without one."""
        return self._queue.get(timeout=timeout)

    def run_on(self) -> None:
        """Run on until a breakpoint hits; resume the pause in progress, if any."""
        self.mode = Mode.CONTINUE
        self.resume()

    def resume(self) -> None:
        """Let the pause in progress (if any) go on, in the present mode's way."""
        if self.pause is not None:
            self.put(Continue("continue"), None)

    def next_pass(self) -> None:
        """A pass starts: after `finish`, its first node pauses."""
        if self.mode is Mode.FINISH:
            self.mode = Mode.STEP

    def wait(
        self,
        state: PassRecord,
        node: int,
        phase: str,
        reason: str,
        grads: tuple[Any, ...],
        late: bool = False,
        editable: bool = False,
    ) -> Pause:
        """Pause: emit Paused, then run commands until one resumes the engine. `late`: `node`
        has run already (a value breakpoint read back after it): nothing can be edited.
        `editable`: paused after the node in its posthook, whose result an edit replaces."""
        pause = Pause(node, phase, tuple(grads), late=late, editable_after=editable)
        self.cancel_break_in()  # paused: a break-in waits no more
        state.capture.describe()  # a lazy capture's metadata, read now that someone looks
        self.pause = pause
        if self.collector:
            gc.enable()  # the user may stay here long while other threads (the UI) make garbage
        try:
            self._emit(
                ev.Paused(
                    state.index,
                    node,
                    state.capture.infos[node].name,
                    phase,  # type: ignore[arg-type]
                    reason,
                    summarize_all(grads, histogram=True),
                    state.done,
                    len(state.capture.nodes),
                )
            )
            while True:
                try:
                    queued = self.take(timeout=0.25)
                except queue.Empty:
                    queued = None
                if self._quitting.asked:
                    raise GradtuiQuit()
                if queued is None:
                    continue
                command, meant_for, request = queued
                if command.needs_pause and meant_for is not None and meant_for is not pause:
                    self._emit(
                        ev.CommandResult(
                            command.text,
                            f"not applied: typed while paused at #{meant_for.node}, which has run since",
                            ok=False,
                            request=request,
                        )
                    )
                    continue
                assert self.execute is not None, "the session binds its command runner"
                self.execute(command, state, request)
                if command.resumes:
                    self.pause = None  # not paused from here: a `pause` the Resumed prompts asks anew
                    self._emit(ev.Resumed(state.index, self.mode.value))
                    return pause
        finally:
            self.pause = None
            if self.collector:
                gc.disable()


# ---- what the hooks of a pass ask of the session: the every-node hooks
# (gradtui.engine.hooks.everynode), their bulk reads (gradtui.engine.stats.bulk) and the pass runner
# (gradtui.engine.hooks.passes) are handed the session as an `Owner`, and none of them imports the
# session or the others for it.


class Owner(Protocol):
    """What the hooks of a pass ask of the session."""

    breakpoints: Breakpoints
    follow: Callable[[PassRecord, int], str | None] | None
    run_quit: RunQuit
    """The run's quit (the planned hooks read its `asked`)."""

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener."""

    def hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str:
        """Count and announce a breakpoint hit; how a pause reason names it."""

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
        """Pause until a command resumes."""

    def stop_reason(self, state: PassRecord, node: int) -> Breakpoint | str | None:
        """Must the engine stop before `node` whatever its gradients are?"""

    def quitting_now(self) -> bool:
        """Has quit been asked for?"""

    def wants_flow(self) -> bool:
        """Does a listener read the gradient flow of the hooked pass ending now?"""

    def wants_leaves(self) -> bool:
        """Does a listener read the leaves' gradient statistics of a hooked pass?"""

    def returned(self, index: int) -> None:
        """Planned pass `index` has returned and can pause no more (its held batches may go)."""

    def watching(self) -> bool:
        """Can a value breakpoint stop the pass in flight?"""

    def stepping(self) -> bool:
        """Must every node be hooked from now on (stepping, a breakpoint by place)?"""

    @property
    def detached(self) -> bool:
        """Has the session detached (it never pauses again)?"""

    @property
    def light(self) -> bool:
        """Record light statistics (norms only) now?"""

    def can_hand_over(self, state: PassRecord) -> bool:
        """May the rest of this pass run on the hook plan now?"""

    def plan_rest(self, state: PassRecord) -> Any:
        """The planned hooks (gradtui.engine.hooks.planned) that run the rest of the pass."""
