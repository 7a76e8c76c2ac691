"""The app's link to its DebugTarget, an object the app owns (`GradtuiApp.link`).

It reads the target's events on a worker and posts each frame of them to the app as one
`TargetLink.Batch` message; the app's handler folds it into the UI state (memray's TUI works
so: a reader posts a Message, the app's handler updates what the widgets watch). The next frame
is read once the app has folded this one in, so events that arrive meanwhile come as one batch
and are drawn once. It also sends the app's command lines, and stops or leaves the target
however the app ends (`q`, a signal, the app torn down). It knows nothing of the screen.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from typing import Any

from textual.message import Message
from textual.message_pump import MessagePump

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Command
from gradtui.protocol.events import QUIT_STATUS
from gradtui.protocol.stats import Stats
from gradtui.wire.child import ChildTarget
from gradtui.wire.frames import DRAWN_EVERY
from gradtui.wire.target import DebugTarget, TargetError

STOP_TIMEOUT = 3.0
"""Seconds a target may take to quit before a child agent is killed."""

GONE = (
    "is lost to this UI: the agent's connection ended before it said how the script ended "
    "(the agent was killed, or could not reach this UI in time, as when its terminal froze)"
)
"""How the script ended, as far as an attached UI knows, when the connection ends untold
(shown after "the script ")."""

QUIT_GRACE = STOP_TIMEOUT + 2.0
"""Seconds the app has, after a signal asked it to quit, before QuitWatchdog ends the process:
the target's STOP_TIMEOUT, then the terminal given back."""


class TargetLink:
    """Reads `target` for `owner` (the app: its worker runs `read`), sends it commands, stops it."""

    @dataclass
    class Started(Message):
        """The target is up; a recording brings every pass's figures for the plots (else None)."""

        figures: list[Any] | None
        """`reader.PassFigures` of a recording's passes (PassSeries.load), None for a live target."""

    @dataclass
    class Failed(Message):
        """The target could not be started: why."""

        reason: str

    @dataclass
    class Batch(Message):
        """One frame of the target's events, in the order they happened. The handler sets
        `applied` once they are folded in (the link reads the next frame then)."""

        events: list[ev.Event]
        applied: asyncio.Event = field(default_factory=asyncio.Event)

    def __init__(self, target: DebugTarget, owner: MessagePump, paced: bool = True) -> None:
        """`paced=False`: never tell the agent what was drawn, so it describes every pass (a
        report fed with this client's events reads each whole)."""
        self.target = target
        self._paced = paced
        self.owner = owner
        """Where the messages go (the app)."""
        self.finished = asyncio.Event()
        """Set once the target has ended (the script's ScriptFinished, or the agent gone)."""
        self.quitting = False
        """The app is stopping or leaving the target: its end must not stop it again."""
        self.exit_status = 0
        """What `run_app` returns: the script's exit status, QUIT_STATUS if the user quit."""
        self.script_ended = False
        """The script's end (ScriptFinished) has come: `exit_status` is its own. Its process may
        not have gone yet (`finished` waits for that): a quit then must not make it QUIT_STATUS."""
        self.flow_shown = False
        """The flow table or the passes view has been opened: the agent was told (`show_flow`)."""
        self._described: int | None = None
        """The last pass the target sent described (its graph), until its end has been drawn."""
        self._next_drawn = 0.0
        """When (time.monotonic) the next `drawn` may be told at the soonest (DRAWN_EVERY)."""

    async def read(self, first_after_layout: bool) -> None:
        """Start the target and post its events until it ends. `first_after_layout`: post the
        first events once the panes are laid out: text cut or wrapped to a pane's width, made before
        it has one, was laid out at that width's height and redrawn a frame later, a layout that a
        modal screen opened in between (P at once) put off until it closed."""
        try:
            await self.target.start()
        except TargetError as exc:
            self.finished.set()
            self.owner.post_message(self.Failed(str(exc)))
            return
        figures = getattr(self.target, "figures", None)  # a recording has every pass's, for the plots
        self.owner.post_message(self.Started(figures() if figures is not None else None))
        if first_after_layout:
            laid_out = asyncio.Event()
            self.owner.call_after_refresh(laid_out.set)
            await laid_out.wait()
        async for events in self.target.batches():
            batch = self.Batch(events)
            self.owner.post_message(batch)
            await batch.applied.wait()
            self._drawn(events)
        if not self.script_ended and not self.quitting:
            # The connection ended with no word of the script's end (an agent killed, or whose
            # goodbye to a client that read nothing passed its deadline): the UI must not go on
            # showing the script running, nor leave with 0 as if it had succeeded.
            untold = self.Batch([ev.ScriptFinished(None, how=GONE)])
            self.owner.post_message(untold)
            await untold.applied.wait()
        self.finished.set()

    def _drawn(self, events: list[ev.Event]) -> None:
        """Once the end of a pass the agent described has been applied, tell a live agent (`drawn`)
        after the screen's next refresh, and DRAWN_EVERY after the last time at the soonest: the
        agent describes the next pass that starts then, not the passes that run while this UI
        draws (gradtui.agent.server)."""
        ended = None
        for event in events:
            match event:
                case ev.PassStarted(recorded=True, described=True):
                    self._described = event.pass_index
                case ev.PassFinished() if event.pass_index == self._described:
                    ended, self._described = event.pass_index, None
        tell = getattr(self.target, "drawn", None)  # a live agent's; a recording has nothing to pace
        if ended is None or tell is None or not self._paced:
            return
        now = time.monotonic()
        wait = self._next_drawn - now
        self._next_drawn = max(now, self._next_drawn) + DRAWN_EVERY
        if wait > 0:
            self.owner.set_timer(wait, functools.partial(self.owner.call_after_refresh, tell, ended))
        else:
            self.owner.call_after_refresh(tell, ended)

    def script_finished(self, event: ev.ScriptFinished) -> None:
        """The script has ended: its exit status is final (QUIT_STATUS if the user stopped it).
        The first end is kept: one taken in by `ended` is not turned into a quit when its event,
        held by the target, is applied after the quit it preceded."""
        if self.script_ended:
            return
        status = 1 if event.exit_status is None else event.exit_status  # not known: not a success either
        self.exit_status = QUIT_STATUS if event.quit or self.quitting else status
        self.script_ended = True

    def ended(self) -> bool:
        """Has the script's end reached this UI, applied or not? A child agent's end is held until
        the script's last output is read (ChildTarget.told_end): a `q` in between stops nothing, the
        script having ended by itself, so its end is taken in here and the exit status is its own,
        not QUIT_STATUS."""
        told = getattr(self.target, "told_end", None)  # a target that holds the end it was told
        if told is not None:
            self.script_finished(told)
        return self.script_ended

    def submit(self, command: Command) -> int:
        """Send a command (the app parsed its line); its request id (the answer comes back as a
        CommandResult)."""
        return self.target.submit(command)

    def show_flow(self) -> None:
        """The UI shows the gradient flow from now on (its flow table or passes view opened, or a
        `flow` typed: the passes view plots every later pass's): a live agent computes each hooked
        pass's flow from now on, not only a paused pass's. A target that has every pass's flow (a recording) is told nothing."""
        if not self.flow_shown and (tell := getattr(self.target, "show_flow", None)) is not None:
            tell(True)
        self.flow_shown = True

    def param_stats(self, name: str, passes: list[int]) -> dict[int, Stats]:
        """A recording's gradient statistics of parameter `name` in `passes` (the gradients
        view's distributions, read when it looks at one); {} from a target that has none (a live
        run's come with its passes)."""
        read = getattr(self.target, "param_stats", None)
        return read(name, passes) if read is not None else {}

    @property
    def is_recording(self) -> bool:
        """Is the target a recording (`gradtui replay`)?"""
        return self.target.info.kind == "recording"

    @property
    def attached(self) -> bool:
        """Is the target a live script this UI did not start (`gradtui attach`, a browser tab)?
        Then leaving may detach from it; a child agent lives only with its UI, a recording nowhere."""
        return not isinstance(self.target, ChildTarget) and not self.is_recording

    def refuse_detach(self) -> str | None:
        """Why this UI cannot detach from its target (None: it can)."""
        if self.attached:
            return None
        if self.is_recording:
            return "a recording runs nowhere: q leaves"
        return (
            "this UI started the script (gradtui SCRIPT): it lives only with it; q stops it, "
            "gradtui --listen runs one to attach to and detach from"
        )

    async def stop(self) -> None:
        """Quit the target; a child agent that will not end is killed (ChildTarget.quit)."""
        self.quitting = True
        try:
            await asyncio.wait_for(self.target.quit(), STOP_TIMEOUT)
        except (TimeoutError, OSError):
            pass
        self.kill_now()

    async def detach(self) -> None:
        """Leave the script running without this UI, its breakpoints armed."""
        self.quitting = True  # the app's end (on_unmount) must not stop the target now
        try:
            await asyncio.wait_for(self.target.detach(), STOP_TIMEOUT)
        except (TimeoutError, OSError):
            pass

    def kill_now(self) -> None:
        """End a child agent at once (a target of another kind has nothing to kill)."""
        kill = getattr(self.target, "kill_now", None)
        if kill is not None:
            kill()
