"""The app's side of its DebugTarget, as a mixin of `GradtuiApp`: reading the target's events
(`_pump`, `on_batch`) and folding their changes until they are drawn (`flush`), sending it
command lines (`send`, the -c/-x feeder), the script's end, and stopping the target however the
app ends (`q`, a signal, the app torn down); and `run_app`, which runs the app on a target with
the signal handlers installed (and gradtui.ui.watchdog's last resort).

app.py lays out and redraws the screen; this module is all it does with the target.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gradtui.model import events as ev
from gradtui.model.commands import CommandError, Detach, Quit, parse
from gradtui.model.events import QUIT_STATUS
from gradtui.model.options import RunOptions
from gradtui.ui import fmt
from gradtui.ui.tracebacks import render_error
from gradtui.ui.watchdog import QuitWatchdog, die_of
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import STREAM_STYLE, OutputLog
from gradtui.wire.target import DebugTarget, TargetError

if TYPE_CHECKING:
    from textual.app import App
    from textual.timer import Timer

    from gradtui.model.report import Report
    from gradtui.clients.feeder import CommandFeeder
    from gradtui.ui.state import Change, UIState

    _Base = App[int]
else:
    _Base = object

ECHO_STYLE, ANSWER_STYLE, ERROR_STYLE, NOTE_STYLE = "bold cyan", "cyan", "red", "dim"
"""How gradtui's own lines stand apart from the script's in the output pane."""

STOP_TIMEOUT = 3.0
"""Seconds a target may take to quit before a child agent is killed."""

QUIT_GRACE = STOP_TIMEOUT + 2.0
"""Seconds the app has, after a signal asked it to quit, before QuitWatchdog ends the process:
the target's STOP_TIMEOUT, then the terminal given back."""

RUNNING_DRAW = 0.1
"""Seconds a batch that only says the engine runs (Resumed, Progress, NodeRan) waits to be drawn:
a step's pause comes a millisecond later and is drawn in the same frame (a frame between cost
~30 ms, and a layout ~70 ms when the node just run, taller with its outgoing gradients, was
drawn before the next one)."""

RUNNING = (ev.Resumed, ev.Progress, ev.NodeRan)
"""Events that say only that the engine runs: a batch of nothing else is drawn a little later
(`flush_soon`), with the pause that usually follows; a long `continue` is drawn ten times a
second."""

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that quit the UI (and the script with it)."""


class TargetClient(_Base):
    """Reads the target, sends it commands, stops it (see module doc); the app provides the
    screen (`_redraw`, `_on_engine_event`, `_show_selected`) and the state, NavigationActions
    `local_command` (the lines the UI answers itself)."""

    target: DebugTarget
    state: UIState
    report: Report | None
    feeder: CommandFeeder
    finished: asyncio.Event
    quitting: bool
    exit_status: int
    script_path: str
    _pending: Change | None
    _flush_timer: Timer | None = None
    _echoed: str | None
    _echo_mark: int | None = None
    """The output pane's line of the command echoed last (its answer is shown from there)."""
    passes_first: bool
    local_command: Callable[[str], ev.CommandResult | None]
    action_passes: Callable[[], None]

    def _redraw(self, change: Change) -> None:  # pragma: no cover - the app's
        raise NotImplementedError

    def _on_engine_event(self, event: ev.Event) -> None:  # pragma: no cover - the app's
        raise NotImplementedError

    def _show_selected(self, node: int | None) -> None:  # pragma: no cover - the app's
        raise NotImplementedError

    async def on_unmount(self) -> None:
        """However the app ends, the target must not be left running (a child agent is stopped)."""
        if not self.finished.is_set() and not self.quitting:
            await self._stop_target()

    # ---- events in -------------------------------------------------------------------------

    async def _pump(self) -> None:
        """Read the target's events until it ends."""
        try:
            await self.target.start()
        except TargetError as exc:
            self._write_output(f"gradtui: {exc}", "red")
            self.query_one(CommandBar).answer(str(exc), ok=False)
            self.finished.set()
            return
        figures = getattr(self.target, "figures", None)  # a recording has every pass's, for the plots
        if figures is not None:
            self.state.series.load(figures())
        # The first events are drawn once the panes are laid out: text cut or wrapped to a pane's
        # width, made before it has one, was laid out at that width's height and redrawn a frame
        # later, a layout that a modal screen opened in between (P at once) put off until it closed.
        # Not when opening on the passes view: the debugger is then laid out when first shown, and
        # its panes redraw at their widths (on_resize).
        if not self.passes_first:
            laid_out = asyncio.Event()
            self.call_after_refresh(laid_out.set)
            await laid_out.wait()
        async for batch in self.target.batches():
            self.on_batch(batch)
            if self.passes_first and self.state.summaries:  # the story is in: open on its passes
                self.passes_first = False
                self.action_passes()
        self.finished.set()

    def on_batch(self, batch: list[ev.Event]) -> None:
        """Apply a batch of events in order: runs of NodeRan and of Output at once each; the
        panes are drawn once, at the end (or before what must be drawn in order: output, answers)."""
        for kind, run in itertools.groupby(batch, type):
            events_ = list(run)
            try:
                if self.report is not None:
                    for event in events_:
                        self.report(event)
                if kind is ev.NodeRan:  # drawn with the rest of the batch (a step's Paused follows)
                    self._fold(self.state.apply_ran(events_))  # type: ignore[arg-type]
                elif kind is ev.Output:
                    self.flush()
                    self.query_one(OutputLog).write_streams(
                        ("".join(e.text for e in lines), STREAM_STYLE[stream])
                        for stream, lines in itertools.groupby(events_, lambda e: e.stream))
                else:
                    for event in events_:
                        self._on_engine_event(event)
            except Exception as exc:  # noqa: BLE001 - a UI bug must not end the debugging session
                self._ui_error(exc)
        try:
            if all(isinstance(event, RUNNING) for event in batch):
                self.flush_soon()  # a step's pause follows at once: one frame for both
            else:
                self.flush()
        except Exception as exc:  # noqa: BLE001
            self._ui_error(exc)

    def _fold(self, change: Change) -> None:
        """Merge a change into the ones not drawn yet (`flush` draws them)."""
        self._pending = change if self._pending is None else self._pending.merge(change)

    def flush_soon(self) -> None:
        """Draw the changes folded so far within RUNNING_DRAW (with whatever comes by then)."""
        if self._flush_timer is None and self._pending is not None:
            self._flush_timer = self.set_timer(RUNNING_DRAW, self._flush_timed)

    def _flush_timed(self) -> None:
        self._flush_timer = None
        self.flush()

    def flush(self) -> None:
        """Draw what the events folded since the last flush changed (a recording's story of a
        thousand passes is drawn once, not once a pass)."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        change, self._pending = self._pending, None
        if change is not None:
            self._redraw(change)

    def _ui_error(self, exc: Exception) -> None:
        """Show a bug of the UI itself in the output pane instead of crashing."""
        text = "".join(traceback.format_exception(exc)).rstrip()
        self._write_output(f"gradtui UI error (please report it):\n{text}", ERROR_STYLE)
        self.query_one(CommandBar).answer(f"gradtui UI error: {exc!r} (details in the output pane)", ok=False)

    def _script_finished(self, event: ev.ScriptFinished) -> None:
        self.exit_status = QUIT_STATUS if event.quit or self.quitting else event.exit_status
        home = os.path.dirname(self.script_path)
        if event.error is not None and event.error.frames:
            log = self.query_one(OutputLog)
            log.write_lines("")  # the traceback starts a line of its own
            drawn, note = render_error(event.error, home, log.scrollable_content_region.width - 1)
            log.write_stream(drawn)
            if note:
                log.write_lines(note, NOTE_STYLE)
        elif event.traceback:  # a SyntaxError has no frames: its file and line are in the text
            self._write_output(fmt.user_traceback(event.traceback, home), ERROR_STYLE)
        word = "stopped" if event.quit else f"exited with status {event.exit_status}"
        if event.how:
            word = f"ended: its process {event.how}"  # os._exit, a signal: the agent could not say
        self._write_output(f"── the script {word} · q to leave", NOTE_STYLE)
        # Whatever the bar said (`gradient now …`) was about a pass that is over.
        self.query_one(CommandBar).answer(f"the script {word} · [ ] or P browse its passes · q to leave",
                                          ok=event.quit or event.exit_status == 0, keep=True)
        view = self.state.view
        if view is not None and view.failed_node is not None:
            self.query_one(NodeList).select_node(view.failed_node)
        self._show_selected(self.query_one(NodeList).selected)
        self.refresh_bindings()  # the footer drops the keys that drove the script

    def _write_output(self, text: str, style: str = "") -> None:
        """Add whole lines of gradtui's own to the output pane (the script's go through
        `OutputLog.write_stream`, which keeps its progress bars on one line)."""
        self.query_one(OutputLog).write_lines(text, style)

    def _echo(self, text: str) -> None:
        """Write a command line to the output pane, once: its answer follows it there."""
        self._echo_mark = self.query_one(OutputLog).mark()
        self._write_output(f"(gradtui) {text}", ECHO_STYLE)
        self._echoed = text

    # ---- commands out ----------------------------------------------------------------------

    def send(self, text: str) -> int | None:
        """Send a command line to the target (the answer comes back as an event); its request id.

        A line the UI answers itself (`local_command`) is answered with a CommandResult of no
        request id, as the target would, so the -c/-x feeder goes on after it."""
        self.query_one(CommandBar).clear_error()  # a new command: an older refusal is stale
        answer = self.local_command(text)
        if answer is not None:
            self._on_engine_event(answer)
            return None
        try:
            command = parse(text)
        except CommandError:
            command = None  # the agent answers with the parse error
        if isinstance(command, Quit):
            self.call_later(self.action_quit)  # run_action is a coroutine: called here it never ran
            return None
        if isinstance(command, Detach):
            self.call_later(self.action_detach)
            return None
        if self.finished.is_set() or self.state.script_over:
            self.query_one(CommandBar).answer("the script has ended: q to leave", ok=False)
            return None
        return self.target.submit(text)

    def _show_result(self, event: ev.CommandResult) -> None:
        # The whole answer goes to the output pane, under its command (echoed once: a typed
        # line is echoed when sent, a key's command here); the bar shows its first line.
        self.query_one(CommandBar).answer(event.text, event.ok)
        if event.text.strip():
            log = self.query_one(OutputLog)
            if self._echoed != event.command:
                self._echo(event.command)
            start = self._echo_mark if self._echo_mark is not None else log.mark()
            self._write_output(event.text, ANSWER_STYLE if event.ok else ERROR_STYLE)
            log.reveal(start)  # a long answer is read from its command line down, not from its tail
        self._echoed = None
        self._echo_mark = None

    def _feed_command(self) -> None:
        """Submit the next -c/-x command, one per pause or answer (as headless mode does)."""
        text = self.feeder.pop()
        if text is not None:
            self._echo(text)
            self.feeder.sent(self.send(text))

    # ---- the end ---------------------------------------------------------------------------

    @property
    def attached(self) -> bool:
        """Is the target a live script this UI did not start (`gradtui attach`, a browser tab)?
        Then leaving may detach from it; a child agent lives only with its UI, a recording nowhere."""
        from gradtui.wire.child import ChildTarget

        return not isinstance(self.target, ChildTarget) and self.target.info.kind != "recording"

    async def action_quit(self) -> None:
        """Stop the script and leave; attached, first say so and offer to detach instead."""
        if self.attached and not self.finished.is_set() and not self.quitting:
            from gradtui.ui.screens.leave import LeaveScreen

            if not isinstance(self.screen, LeaveScreen):
                self.push_screen(LeaveScreen(os.path.basename(self.target.info.script)), self._left)
            return
        await self._quit_now()

    async def _left(self, choice: str | None) -> None:
        if choice == "quit":
            await self._quit_now()
        elif choice == "detach":
            await self.action_detach()

    async def _quit_now(self) -> None:
        if not self.finished.is_set():
            self.exit_status = QUIT_STATUS
            await self._stop_target()
        self.exit(self.exit_status)

    async def action_detach(self) -> None:
        """Leave the script running without this UI (attached only), its breakpoints armed."""
        if not self.attached:
            why = ("a recording runs nowhere: q leaves" if self.target.info.kind == "recording" else
                   "this UI started the script (gradtui SCRIPT): it lives only with it; q stops it, "
                   "gradtui --listen runs one to attach to and detach from")
            self.query_one(CommandBar).answer(f"detach: {why}", ok=False)
            return
        if self.finished.is_set():
            self.exit(self.exit_status)
            return
        self.quitting = True  # the app's end (on_unmount) must not stop the target now
        try:
            await asyncio.wait_for(self.target.detach(), STOP_TIMEOUT)
        except (asyncio.TimeoutError, OSError):
            pass
        self.exit(0, message="gradtui: detached: the script runs on; its breakpoints stay armed for the next client")

    async def _stop_target(self) -> None:
        """Quit the target; a child agent that will not end is killed (ChildTarget.quit)."""
        self.quitting = True
        try:
            await asyncio.wait_for(self.target.quit(), STOP_TIMEOUT)
        except (asyncio.TimeoutError, OSError):
            pass
        kill = getattr(self.target, "kill_now", None)
        if kill is not None:
            kill()

    def on_signal(self, signum: int) -> None:
        """SIGINT, SIGTERM or SIGHUP to the UI: stop the target and leave (a second one: at once).

        `run_action` is a coroutine: called from this (synchronous) handler it never ran, so
        every signal was ignored. The quit is scheduled instead, and `quitting` is set here so a
        second signal before it has run kills the agent and exits at once."""
        if self.quitting:
            kill = getattr(self.target, "kill_now", None)
            if kill is not None:
                kill()
            self.exit(QUIT_STATUS)
            return
        self.quitting = True
        self.call_later(self._quit_now)


def run_app(options: RunOptions | None, *, target: DebugTarget | None = None, commands: Iterable[str] = (),
            theme: str | None = None, passes_first: bool = False, die_by_signal: bool = True) -> int:
    """Run the UI on `options`' script in a child agent (or on `target`) until the user quits;
    return the script's exit status (QUIT_STATUS if the user quit before it ended).

    SIGINT, SIGTERM and SIGHUP quit (`on_signal`) and arm a QuitWatchdog; once the app has
    ended, the process dies of the signal, as python would (`die_by_signal`; 130, 143, 129). The handlers are
    Python's own (`signal.signal`), not the loop's: they run even while the loop is blocked
    in a write to a dead terminal, which the loop's handlers (run by the loop) never would."""
    from gradtui.ui.app import GradtuiApp
    from gradtui.wire.child import ChildTarget

    if target is None:
        assert options is not None
        target = ChildTarget(options)
        commands = options.commands
    app = GradtuiApp(target=target, commands=commands, theme=theme, passes_first=passes_first)
    loop = asyncio.new_event_loop()
    watchdog = QuitWatchdog(target, lambda: app._driver, QUIT_GRACE)
    watchdog.start()

    signalled: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signalled.append(signum)
        watchdog.arm(signum)
        try:
            loop.call_soon_threadsafe(app.on_signal, signum)
        except RuntimeError:  # the loop is closed: the app has ended, the watchdog sees to the rest
            pass

    previous = {signum: signal.signal(signum, on_signal) for signum in SIGNALS}
    try:
        app.run(loop=loop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        watchdog.disarm()
        kill = getattr(target, "kill_now", None)
        if kill is not None:
            kill()  # however the app ended, no agent of ours is left running
        loop.close()
    if signalled and die_by_signal:
        die_of(signalled[0])  # as python, killed by it (the terminal is restored, the agent gone)
    return app.return_code or app.exit_status  # a crash of the UI itself is 1
