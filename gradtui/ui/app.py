"""The gradtui Textual app: a client of a DebugTarget. It renders the target's events and
turns keys and the command bar into command lines.

The script runs elsewhere: in a child agent process the app starts (`gradtui script.py`), in
an agent it attached to (`gradtui attach`), or nowhere (a recording). The app never reads a
session: the events say what happened (pauses, breakpoints, the script's end), `submit`
sends commands, and `quit` stops the target. The event loop never blocks.

The app owns its parts: `link` (gradtui.ui.client) reads the target on a worker and posts each
batch of events as a message, which the app folds into `state` (gradtui.ui.state, every piece of
UI state); `flush` publishes what the state changed in the `changes` reactive, which the widgets
watch (the node list, the header; the app's own watcher writes the output pane's notes). `nav`
moves the view, `sizer` sizes the panes, `transcript` says gradtui's own lines. `run_app` is in
gradtui.ui.run.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
from collections.abc import Iterable

from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.reactive import var
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from gradtui.clients.feeder import CommandFeeder
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Detach, Flow, Interact, Quit, Typed
from gradtui.protocol.dist_events import RanksChanged
from gradtui.protocol.options import RunOptions
from gradtui.protocol.report import Report
from gradtui.ui import keys
from gradtui.ui.breakin import BreakIn
from gradtui.ui.changes import Changes
from gradtui.ui.client import TargetLink
from gradtui.ui.leaving import Leaving
from gradtui.ui.navigation import Navigator
from gradtui.ui.screens.console import ConsoleScreen
from gradtui.ui.screens.debugger import DebuggerScreen
from gradtui.ui.screens.source import SourceScreen
from gradtui.ui.search import NodeProvider
from gradtui.ui.sizing import PaneSizer
from gradtui.ui.state import UIState
from gradtui.ui.theme import DEFAULT_THEME, GRADTUI_THEME
from gradtui.ui.transcript import Transcript
from gradtui.ui.tty import size_from_the_terminal
from gradtui.ui.widgets.column import LeftColumn
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.detail import DetailPane
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import ERROR_STYLE, NOTE_STYLE, STREAM_STYLE, OutputLog
from gradtui.ui.widgets.ranks import RankStrip
from gradtui.ui.widgets.variables import VariablesPane
from gradtui.wire.child import ChildTarget
from gradtui.wire.target import DebugTarget

__all__ = ["GradtuiApp"]

WIDE = 160
"""From this terminal width on, the detail and graph panes sit side by side."""

NARROW = 100
"""Below this terminal width the footer is compact, so every key fits."""

SHORT = 32
"""Below this terminal height (or width NARROW) the layout is the 80x24 one: the detail pane
puts the node's source line beside its labels, the graph pane keeps to its neighbours."""

RUNNING_DRAW = 0.1
"""Seconds a batch that only says the engine runs (Resumed, Progress, NodeRan) waits to be drawn:
a step's pause comes a millisecond later and is drawn in the same frame (a frame between cost
~30 ms, and a layout ~70 ms when the node just run, taller with its outgoing gradients, was
drawn before the next one)."""

WORKERS_GRACE = 2.0
"""Seconds the app, ending, waits for its cancelled workers to finish (`_end_workers`)."""

RUNNING = (ev.Resumed, ev.Progress, ev.NodeRan)
"""Events that say only that the engine runs: a batch of nothing else is drawn a little later
(`flush_soon`), with the pause that usually follows; a long `continue` is drawn ten times a second."""


def _binds_q(screen: Screen) -> bool:
    """Whether `screen`'s own bindings take the `q` key."""
    return any(isinstance(b, Binding) and "q" in b.key.split(",") for b in screen.BINDINGS)


class GradtuiApp(App[int]):
    """Debug the backward passes of one script (see module doc)."""

    CSS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gradtui.tcss")
    COMMANDS = App.COMMANDS | {NodeProvider}
    """The palette finds nodes (op, label, module, source line) as well as actions and themes."""
    TITLE = "gradtui"
    BINDINGS = keys.bindings(of_app=True)
    ALLOW_IN_MAXIMIZED_VIEW = "GradHeader, CommandBar, Footer"
    """A zoomed pane keeps the header, the command bar and the keys around it."""

    changes: var[Changes | None] = var(None, always_update=True, init=False)
    """What the UI state changed at the last draw (`flush`): the widgets watch it and redraw their part."""

    def __init__(
        self,
        script: str | None = None,
        args: Iterable[str] = (),
        commands: Iterable[str] = (),
        report: Report | None = None,
        record_all: bool = False,
        *,
        target: DebugTarget | None = None,
        theme: str | None = None,
        passes_first: bool = False,
    ) -> None:
        """Debug `script` in a child agent, or the given `target`.

        `record_all`: hook every pass, even one nothing can stop in (as a report does), so
        every pass has per-node statistics to browse; else such passes run at plain speed.
        `report`: a Report fed with every event this client sees (full statistics are then
        recorded, as a report wants them). `theme`: a Textual theme name (default gradtui's
        own, made for 256 colours). `passes_first`: open on the passes view once the target has
        told its passes (a replay's landing: which pass is the question a recording is opened
        for), the debugger under it.
        """
        super().__init__()
        self.register_theme(GRADTUI_THEME)
        self.theme_problem = (
            None
            if theme is None or theme in self.available_themes
            else (f"no theme {theme!r}: using {DEFAULT_THEME} (themes: {', '.join(sorted(self.available_themes))})")
        )
        self.theme = theme if theme is not None and self.theme_problem is None else DEFAULT_THEME
        if target is None:
            assert script is not None, "a script or a target"
            target = ChildTarget(
                RunOptions(os.path.abspath(script), list(args), record_all=record_all, every_stat=report is not None)
            )
        self.target = target
        self.script_path = os.path.abspath(script or target.info.script or ".")
        self.state = UIState(os.path.basename(self.script_path))
        self.report = report
        self.feeder = CommandFeeder(list(commands))
        self.link = TargetLink(target, self, paced=report is None)  # a report here reads every pass whole
        self.nav = Navigator(
            self, self.state, self.link, send=self.send, draw=self.flush, home=os.path.dirname(self.script_path)
        )
        self.sizer = PaneSizer(self, self.state.sizes)
        self.transcript = Transcript(self)
        self.leaving = Leaving(self, self.link)
        self._footer_shows_pause = True
        """Was the footer last drawn while the script ran (with Ctrl-C's `pause`)? True at start."""
        self.break_in = BreakIn(self.state, self.leaving, lambda: self.query_one(CommandBar), self.send)
        """Ctrl-C while the script runs: pause at the next backward node (gradtui.ui.breakin)."""
        self.debugger = DebuggerScreen(
            self.nav, self.sizer, echo=self.transcript.echo, detach=self.leaving.detach, id="_default"
        )
        """The first screen, which the panes of `compose` are on."""
        self.passes_first = passes_first
        """Open on the passes view when the target's passes are in (cleared once it is open)."""
        self._flush_timer: Timer | None = None

    @property
    def exit_status(self) -> int:
        """What `run_app` returns: the script's exit status, QUIT_STATUS if the user quit."""
        return self.link.exit_status

    def get_default_screen(self) -> Screen:
        """The debugger's screen: its keys and its panes."""
        return self.debugger

    def run(self, *args, **kwargs) -> int | None:
        """Run in the terminal, sized by it, not by COLUMNS / LINES (gradtui.ui.tty)."""
        size_from_the_terminal()
        return super().run(*args, **kwargs)

    # ---- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Header, node list + output on the left, detail + graph on the right, command bar, footer."""
        yield GradHeader(self.state, id="header")
        with Horizontal(id="main"):
            with LeftColumn(id="left"):
                yield NodeList(self.state, id="nodes", classes="pane")
                yield OutputLog(id="output", classes="pane")
            with Vertical(id="right"):
                yield DetailPane(self.state, os.path.dirname(self.script_path), id="detail", classes="pane")
                yield VariablesPane(id="variables-pane")  # shown when docked (L)
                yield GraphPane(self.state, id="graph", classes="pane")
        yield CommandBar(id="bar")
        yield Footer()

    def on_mount(self) -> None:
        """Title the panes, start reading the target; `gc.freeze` the ~250,000 objects (torch,
        Textual, the app) that live as long as the process: each full collection walked them
        (0.5 s of a step; decoding a 10,000-node pass took twice as long). `on_unmount` thaws."""
        gc.freeze()
        self.query_one("#nodes").border_title = "nodes"
        self.query_one("#output").border_title = "output"
        self.query_one(DetailPane).show(None)
        self.query_one(GraphPane).show(None)
        self.query_one(NodeList).focus()
        self.watch(self.screen, "maximized", self.nav.zoom_changed, init=False)
        self.watch(self.screen, "maximized", lambda _: self.sizer.size(), init=False)
        if self.theme_problem:
            self.transcript.write(self.theme_problem, ERROR_STYLE)
        # Not when opening on the passes view: the debugger is then laid out when first shown,
        # and its panes redraw at their widths (on_resize).
        self.run_worker(
            self.link.read(first_after_layout=not self.passes_first),
            name="gradtui-target",
            group="target",
            exit_on_error=False,
        )

    async def on_unmount(self) -> None:
        """Thaw what `on_mount` froze, for the next app a test process runs; however the app
        ends, the target must not be left running (a child agent is stopped)."""
        gc.unfreeze()
        if not self.link.finished.is_set() and not self.link.quitting:
            await self.link.stop()
        await self._end_workers()

    async def _end_workers(self) -> None:
        """Let every worker of the app finish being cancelled before the app returns.

        Textual cancels the workers as its message loop ends but does not wait for them, and the
        loop's owner stops running the loop once the app has returned: the target's reader, still
        waiting for events when `q` came at a pause, was left cancelled but never resumed, then
        destroyed pending when the loop closed, its context reset from another ("Task was
        destroyed but it is pending!", "ValueError: <Token ...> was created in a different
        Context" on the terminal after the UI had left). Bounded: a worker that ignores its
        cancellation does not keep the app from ending."""
        workers = list(self.workers)
        for worker in workers:
            worker.cancel()
        waits = asyncio.gather(*(worker.wait() for worker in workers), return_exceptions=True)
        try:
            await asyncio.wait_for(waits, WORKERS_GRACE)
        except TimeoutError:
            pass

    def on_resize(self, event: events.Resize) -> None:
        """Side by side detail and graph on wide terminals; a compact footer on narrow ones.

        `event.size`, not `self.size`: this handler runs before App's own, which updates that.
        """
        width = event.size.width
        short = event.size.height < SHORT or width < NARROW
        self.query_one("#main").set_class(width >= WIDE, "wide")
        self.query_one("#main").set_class(short, "short")
        self.query_one(DetailPane).compact = short
        footer = self.query_one(Footer)
        footer.compact = width < NARROW
        footer.show_command_palette = width >= NARROW
        self.sizer.size(width)

    # ---- the target's events -------------------------------------------------------------

    def on_source_screen_break_requested(self, message: SourceScreen.BreakRequested) -> None:
        """b in the source view (a screen of its own, whose messages come to the app): a breakpoint there."""
        self.nav.break_at(message.path, message.line)

    def on_target_link_started(self, message: TargetLink.Started) -> None:
        """The target is up: a recording's figures of every pass go to the plots."""
        if message.figures is not None:
            self.state.series.load(message.figures)

    def on_target_link_failed(self, message: TargetLink.Failed) -> None:
        """The target could not be started: say why."""
        self.transcript.failed(message.reason)

    def on_target_link_batch(self, message: TargetLink.Batch) -> None:
        """A batch of the target's events: fold it in. Once a replay's passes and its landing (the
        pause at its stop, or its end) are in, open on its passes: the cursor on the stop's pass."""
        try:
            self.apply_batch(message.events)
        except NoMatches:
            if self.return_value is None:
                raise
            return  # the app is leaving (a quit while the script ran): its panes are gone, nothing to draw
        finally:
            message.applied.set()
        landed = self.state.paused is not None or self.state.script_over
        if self.passes_first and self.state.summaries and landed:  # the story and its stop are in
            self.passes_first = False
            self.nav.passes()

    def apply_batch(self, batch: list[ev.Event]) -> None:
        """Apply a batch of events in order: runs of NodeRan and of Output at once each; the
        panes are drawn once, at the end (or before what must be drawn in order: output, answers)."""
        for kind, run in itertools.groupby(batch, type):
            events_ = list(run)
            try:
                if self.report is not None:
                    for event in events_:
                        self.report(event)
                if kind is ev.NodeRan:  # drawn with the rest of the batch (a step's Paused follows)
                    self.state.apply_ran(events_)  # type: ignore[arg-type]
                elif kind is ev.Output:
                    self.flush()
                    self.query_one(OutputLog).write_streams(
                        ("".join(e.text for e in lines), STREAM_STYLE[stream])  # type: ignore[attr-defined]  # Outputs
                        for stream, lines in itertools.groupby(events_, lambda e: e.stream)  # type: ignore[attr-defined]
                    )
                else:
                    for event in events_:
                        self._apply_event(event)
            except Exception as exc:  # noqa: BLE001 - a UI bug must not end the debugging session
                self.transcript.ui_error(exc)
        try:
            if all(isinstance(event, RUNNING) for event in batch):
                self.flush_soon()  # a step's pause follows at once: one frame for both
            else:
                self.flush()
        except Exception as exc:  # noqa: BLE001
            self.transcript.ui_error(exc)

    def _apply_event(self, event: ev.Event) -> None:
        """Fold one event into the state; it is drawn with the next ones (`flush`) unless
        something must be drawn in order: an answer, a command fed, the script's end."""
        due = self.feeder.due(event)
        match event:
            case ev.CommandResult():
                self.flush()
                self.transcript.result(event)
                self.break_in.answered(event)  # a refused `pause` (the script has ended): nothing to wait for
                if isinstance(self.screen, ConsoleScreen):
                    self.screen.answered(event)
            case ev.Notice():
                self.transcript.write(event.text, NOTE_STYLE)
            case RanksChanged():  # a torchrun job: the rank strip, under the header
                strips = self.query(RankStrip)
                strip = strips.first() if strips else RankStrip(id="ranks")
                if not strips:
                    self.mount(strip, after=self.query_one(GradHeader))
                strip.update_ranks(event)
            case ev.ScriptFinished():
                self.state.apply(event)
                self.flush()
                self.break_in.arrived()
                self._script_finished(event)
            case ev.Paused() | ev.Resumed():
                self.state.apply(event)
                if isinstance(event, ev.Paused):
                    self.break_in.arrived()
                elif isinstance(self.screen, ConsoleScreen):
                    self.screen.moved_on()
                self._footer_follows_the_run(isinstance(event, ev.Resumed))
            case _:
                self.state.apply(event)
        if due:
            self.flush()
            typed = self.feeder.pop()  # the next -c/-x command, one per pause or answer (as headless does)
            if typed is not None:
                self.transcript.echo(typed.text)
                self.feeder.sent(self.send_typed(typed))

    def flush_soon(self) -> None:
        """Draw what the state changed within RUNNING_DRAW (with whatever comes by then)."""
        if self._flush_timer is None:
            self._flush_timer = self.set_timer(RUNNING_DRAW, self.flush)

    def flush(self) -> None:
        """Draw what the state changed since the last draw: publish it in `changes`, which the
        widgets watch."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        changes = self.state.take_changes()
        if changes is not None:
            self.changes = changes

    def watch_changes(self, changes: Changes) -> None:
        """The state's lines for the output pane (a nested backward)."""
        if changes.log:
            self.transcript.write("\n".join(changes.log), NOTE_STYLE)

    def _script_finished(self, event: ev.ScriptFinished) -> None:
        self.link.script_finished(event)
        self.transcript.script_finished(event, os.path.dirname(self.script_path))
        view, nodes = self.state.view, self.query_one(NodeList)
        if view is not None and view.failed_node is not None:
            nodes.select_node(view.failed_node)
        self.debugger.show_selected(nodes.selected)
        self.refresh_bindings()  # the footer drops the keys that drove the script

    # ---- commands --------------------------------------------------------------------------

    def send(self, text: str) -> int | None:
        """Send a command line to the target (the answer comes back as an event); its request id.

        Every line the UI sends enters here (typed in the bar, a key's, a -c/-x command) and is
        parsed here, once: the target gets the command. A line the UI answers itself (one that
        does not parse, `pass N` of a live run) is answered with a CommandResult of no request id,
        as the target would, so the -c/-x feeder goes on after it."""
        return self.send_typed(Typed.of(text))

    def send_typed(self, typed: Typed) -> int | None:
        """Send a line parsed where it entered (`send`, the -c/-x feeder): see `send`."""
        self.query_one(CommandBar).clear_error()  # a new command: an older refusal is stale
        command, text = typed.command, typed.text
        answer = self.nav.pass_command(command) if command is not None else None
        if answer is not None:
            self._apply_event(answer)
            return None
        match command:
            case Quit():
                self.call_later(self.action_quit)  # run_action is a coroutine: called here it never ran
            case Detach():
                self.call_later(self.leaving.detach)
            case Interact():
                self.call_later(self.debugger.action_interact)
            case _ if self.link.finished.is_set() or self.state.script_over:
                self.query_one(CommandBar).answer("the script has ended: q to leave", ok=False)
            case None:
                self._apply_event(ev.CommandResult(text, typed.error or "", ok=False))
            case Flow():  # the flow shown as an answer: the agent measures every pass's from now on
                self.link.show_flow()
                return self.link.submit(command)
            case _:
                return self.link.submit(command)
        return None

    # ---- the app's own actions, and its end ------------------------------------------------

    def _footer_follows_the_run(self, resumed: bool) -> None:
        """The footer shows Ctrl-C's `pause` only while the script runs. A step resumes and pauses
        again within milliseconds: redrawing the footer (a layout of the screen) twice per step
        would cost every step, so it shows the key only once the run has gone on for a moment,
        and drops it at the pause that follows (it is shown at start, while the script runs)."""
        if resumed:
            self.set_timer(0.3, self._footer_running)
        elif self._footer_shows_pause:
            self._footer_shows_pause = False
            self.refresh_bindings()

    def _footer_running(self) -> None:
        if self.state.paused is None and not self.state.script_over and not self._footer_shows_pause:
            self._footer_shows_pause = True
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`q` under a screen that binds it itself is that screen's, not the app's quit: the
        leave question's (stop the script), the flow's, the passes view's and help's (close);
        so the footer there offers no `q quit` that q would not do."""
        if action == "break_in":  # only while the script runs: at a pause there is nothing to break into
            return not (self.state.paused is not None or self.state.script_over or self.link.finished.is_set())
        return not (action == "quit" and self.screen is not self.debugger and _binds_q(self.screen))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette: every gradtui action once, then Textual's own but those it replaces."""
        yield from keys.palette_commands(
            lambda action: self.run_action(action, self if action in keys.APP_ACTIONS else self.debugger)
        )
        for command in super().get_system_commands(screen):
            if command.title not in keys.REPLACED_COMMANDS:
                yield command

    def action_focus_next(self) -> None:
        """tab: the next pane; the command bar is left out (`:` enters it, keys there are text)."""
        self.nav.cycle(1)

    def action_focus_previous(self) -> None:
        """shift+tab: the previous pane."""
        self.nav.cycle(-1)

    def action_break_in(self) -> None:
        """Ctrl-C: break in to the running script (a second one while it waits offers to quit)."""
        self.break_in.press()

    async def action_quit(self) -> None:
        """Stop the script and leave; attached, first say so and offer to detach instead."""
        await self.leaving.quit()

    def on_signal(self, signum: int) -> None:
        """SIGINT, SIGTERM or SIGHUP to the UI (`run_app`): stop the target and leave."""
        self.leaving.signalled()
