"""The gradtui Textual app: a client of a DebugTarget. It renders the target's events and
turns keys and the command bar into command lines.

The script runs elsewhere: in a child agent process the app starts (`gradtui script.py`), in
an agent it attached to (`gradtui attach`), or nowhere (a recording). The app never reads a
session: the events say what happened (pauses, breakpoints, the script's end), `submit`
sends commands, and `quit` stops the target. The event loop never blocks: events arrive in
batches from an async worker that reads the target (`gradtui.ui.client`, which also sends
the commands and stops the target; `run_app` is there too, re-exported here).
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Iterable

from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from gradtui.model import events as ev
from gradtui.model.breakpoints import parse_spec
from gradtui.model.report import Report
from gradtui.model.dist_events import RanksChanged
from gradtui.clients.feeder import CommandFeeder
from gradtui.model.options import RunOptions
from gradtui.ui import keys
from gradtui.ui.layout import PaneSizes
from gradtui.ui.actions import NavigationActions
from gradtui.ui.client import ERROR_STYLE, NOTE_STYLE, TargetClient, run_app
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.screens.leave import LeaveScreen
from gradtui.ui.screens.prompt import PromptScreen
from gradtui.ui.search import NodeIndex, NodeProvider
from gradtui.ui.state import Change, UIState
from gradtui.ui.theme import DEFAULT_THEME, GRADTUI_THEME
from gradtui.ui.tty import size_from_the_terminal
from gradtui.ui.widgets.body import BodyPane
from gradtui.ui.widgets.column import LeftColumn
from gradtui.ui.widgets.command_bar import CommandBar, HistoryInput
from gradtui.ui.widgets.detail import DetailPane
from gradtui.ui.widgets.graph_view import WHOLE_LIMIT, GraphPane
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.ranks import RankStrip
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.node_rows import Marker
from gradtui.ui.widgets.output_log import OutputLog
from gradtui.wire.child import ChildTarget
from gradtui.wire.target import DebugTarget

__all__ = ["GradtuiApp", "run_app"]

WIDE = 160
"""From this terminal width on, the detail and graph panes sit side by side."""

NARROW = 100
"""Below this terminal width the footer is compact, so every key fits."""

SHORT = 32
"""Below this terminal height (or width NARROW) the layout is the 80x24 one: the detail pane
puts the node's source line beside its labels, the graph pane keeps to its neighbours."""

class GradtuiApp(TargetClient, NavigationActions, App[int]):
    """Debug the backward passes of one script (see module doc)."""

    CSS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gradtui.tcss")
    COMMANDS = App.COMMANDS | {NodeProvider}
    """The palette finds nodes (op, label, module, source line) as well as actions and themes."""
    TITLE = "gradtui"
    BINDINGS = keys.bindings()
    ALLOW_IN_MAXIMIZED_VIEW = "GradHeader, CommandBar, Footer"
    """A zoomed pane keeps the header, the command bar and the keys around it."""

    def __init__(self, script: str | None = None, args: Iterable[str] = (), commands: Iterable[str] = (),
                 report: Report | None = None, record_all: bool = False, *,
                 target: DebugTarget | None = None, theme: str | None = None, passes_first: bool = False) -> None:
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
        self.theme_problem = None if theme is None or theme in self.available_themes else (
            f"no theme {theme!r}: using {DEFAULT_THEME} (themes: {', '.join(sorted(self.available_themes))})")
        self.theme = theme if theme is not None and self.theme_problem is None else DEFAULT_THEME
        if target is None:
            assert script is not None, "a script or a target"
            target = ChildTarget(RunOptions(os.path.abspath(script), list(args), record_all=record_all,
                                            every_stat=report is not None))
        self.target = target
        self.script_path = os.path.abspath(script or target.info.script or ".")
        self.state = UIState(os.path.basename(self.script_path))
        self.report = report
        self.feeder = CommandFeeder(list(commands))
        self.breakpoints: tuple[ev.BreakpointInfo, ...] = ()
        """The target's breakpoints, as its last BreakpointsChanged said."""
        self.finished = asyncio.Event()
        """Set once the target has ended (the script's ScriptFinished, or the agent gone)."""
        self.quitting = False
        self.find_query = ""
        self.find_ranked: list[int] = []
        """The nodes the last find matched, best first (`N` steps through them)."""
        self._node_index: NodeIndex | None = None
        self._pending: Change | None = None
        """Changes folded and not drawn yet (see `flush`)."""
        self._echoed: str | None = None
        """The command line last echoed to the output pane whose answer has not come yet."""
        self.exit_status = 0
        """What `run_app` returns: the script's exit status, QUIT_STATUS if the user quit."""
        self.passes_first = passes_first
        """Open on the passes view when the target's passes are in (cleared once it is open)."""
        self.breakpoints_off: list[str] = []
        """Breakpoints turned off in the breakpoints pane: their specs (the target deleted them)."""
        self.sizes = PaneSizes()
        """The user's moves of the panes' edges (`<` `>` `-` `+`, a drag)."""
        self._bar_from: Widget | None = None
        """The pane `:` left for the command bar: enter or escape goes back to it."""

    def run(self, *args, **kwargs) -> int | None:  # type: ignore[override]
        """Run in the terminal, sized by it, not by COLUMNS / LINES (gradtui.ui.tty)."""
        size_from_the_terminal()
        return super().run(*args, **kwargs)

    # ---- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """Header, node list + output on the left, detail + graph on the right, command bar, footer."""
        yield GradHeader(id="header")
        with Horizontal(id="main"):
            with LeftColumn(id="left"):
                yield NodeList(self.state, id="nodes", classes="pane")
                yield OutputLog(id="output", classes="pane")
            with Vertical(id="right"):
                yield DetailPane(self.state, os.path.dirname(self.script_path), id="detail", classes="pane")
                yield GraphPane(self.state, id="graph", classes="pane")
        yield CommandBar(id="bar")
        yield Footer()

    def on_mount(self) -> None:
        """Title the panes, start reading the target; `gc.freeze` the ~250,000 objects (torch,
        Textual, the app) that live as long as the process: each full collection walked them
        (0.5 s of a step; decoding a 10,000-node pass took twice as long). `on_unmount` thaws."""
        gc.freeze()
        header = self.query_one(GradHeader)
        header.script = self.state.script_name
        self.query_one("#nodes").border_title = "nodes"
        self.query_one("#output").border_title = "output"
        self.query_one(DetailPane).show(None)
        self.query_one(GraphPane).show(None)
        self.query_one(NodeList).focus()
        self.watch(self.screen, "maximized", self.zoom_changed, init=False)
        if self.theme_problem:
            self._write_output(self.theme_problem, ERROR_STYLE)
        self.run_worker(self._pump(), name="gradtui-target", group="target", exit_on_error=False)

    def on_unmount(self) -> None:
        """Thaw what `on_mount` froze, for the next app a test process runs (TargetClient's stops the target)."""
        gc.unfreeze()

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
        self.size_panes(width)

    # ---- engine events -------------------------------------------------------------------

    def _on_engine_event(self, event: ev.Event) -> None:
        """Fold one event into the state; its redraw is merged with the next ones' (`flush`)
        until something must be drawn in order: an answer, a command fed, the script's end."""
        due = self.feeder.due(event)
        if isinstance(event, ev.CommandResult):
            self.flush()
            self._show_result(event)
        elif isinstance(event, RanksChanged):  # a torchrun job: the rank strip, under the header
            strips = self.query(RankStrip)
            strip = strips.first() if strips else RankStrip(id="ranks")
            if not strips:
                self.mount(strip, after=self.query_one(GradHeader))
            strip.update_ranks(event)
        elif isinstance(event, ev.BreakpointsChanged):
            self.breakpoints = event.breakpoints
            nodes = self.query_one(NodeList)
            nodes.breakpoints = tuple(Marker(b.number, parse_spec(b.spec)) for b in event.breakpoints)
            nodes.refresh_visible()
        else:
            self._fold(self.state.apply(event))
            if isinstance(event, ev.ScriptFinished):
                self.flush()
                self._script_finished(event)
        if due:
            self.flush()
            self._feed_command()

    def _redraw(self, change: Change) -> None:
        nodes = self.query_one(NodeList)
        if change.log:
            self._write_output("\n".join(change.log), NOTE_STYLE)
        if change.header:
            self._update_header()
        if change.new_pass:
            self._title_nodes()
            nodes.reset()
            self.size_panes()
            self.query_one(CommandBar).clear_error()
            self._show_selected(nodes.selected)  # every pane follows the pass shown, even an empty one
        elif change.rows:
            nodes.refresh_nodes(change.rows)
        if change.paused and self.state.current is not None:
            nodes.select_node(self.state.current)  # the Selected message redraws the panes
        elif change.rows or change.finished:
            selected = nodes.selected
            view = self.state.view
            if selected is None or view is None:
                self._show_selected(selected)
            elif change.finished or selected in change.rows or view.finished:
                self._show_selected(selected)
            elif view.total <= WHOLE_LIMIT or change.rows & {*view.graph.successors(selected),
                                                             *view.graph.predecessors(selected)}:
                self.query_one(GraphPane).show(selected)

    def _title_nodes(self) -> None:
        nodes, view = self.query_one(NodeList), self.state.view
        if view is None:
            return
        # short enough for the 34-column list at 80x24 (engine order is the default: unsaid)
        nodes.border_title = (f"by module · pass {view.index} · {view.total}" if nodes.by_module
                              else f"pass {view.index} · {view.total} nodes")
        if not view.recorded:
            nodes.border_title = f"nodes · pass {view.index} ran unhooked"
        nodes.border_subtitle = "nodes · grad leaving" if nodes.by_module and view.recorded else ""

    def _update_header(self) -> None:
        state, header = self.state, self.query_one(GradHeader)
        view = state.view
        if view is not None:
            header.pass_text = state.pass_text()
            header.pass_parts = state.pass_parts()
            done, total = state.progress if state.browsed is None else (view.done, view.total)
            header.progress = f"{done}/{total} ran" if view.recorded else ""
        header.status = state.status
        header.status_text = state.status_text()
        header.status_short = state.status_short()

    def _show_selected(self, node: int | None) -> None:
        try:
            nodes, detail, graph = self.query_one(NodeList), self.query_one(DetailPane), self.query_one(GraphPane)
        except NoMatches:  # a selection still queued when the app closed and removed its panes
            return
        tree, path = nodes.tree, nodes.selected_module
        if node is None and tree is not None and path is not None:
            detail.show_module(tree, path)
            graph.show_module(path)
            return
        detail.show(node)
        graph.show(node)

    def on_node_list_selected(self, message: NodeList.Selected) -> None:
        """The selection moved: show that node (a refusal shown before is stale now)."""
        self.query_one(CommandBar).clear_error()
        self._show_selected(message.node)

    def on_body_pane_node_clicked(self, message: BodyPane.NodeClicked) -> None:
        """A node reference clicked in the detail or graph pane: select that node."""
        self.query_one(NodeList).select_node(message.node)

    def on_node_list_module_selected(self, message: NodeList.ModuleSelected) -> None:
        """The selection moved to a module row: sum it up in the detail pane."""
        self._show_selected(None)

    def on_command_bar_submitted(self, message: CommandBar.Submitted) -> None:
        """A line typed in the command bar: run it and go back to the node list (like vim's `:`)."""
        self._echo(message.text)
        self._leave_bar()
        self.send(message.text)

    def on_history_input_leave(self, message: HistoryInput.Leave) -> None:
        """Escape in the command bar: back to the pane it was entered from."""
        self._leave_bar()

    def _leave_bar(self) -> None:
        back, self._bar_from = self._bar_from, None
        (back if back is not None and back.is_attached else self.query_one(NodeList)).focus()

    # ---- actions (keys, palette) ---------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Engine keys do nothing while a modal screen (help, prompt, flow, passes, the palette)
        is open: the key goes to that screen (a `:` typed in the palette is text).
        Once the script has ended, the keys that drive it are gone from the footer (and do nothing):
        the footer shows what can be done now."""
        if (action in keys.ENGINE_ACTIONS or action == "quit" and isinstance(self.screen, LeaveScreen)) \
                and self.screen is not self.screen_stack[0]:
            return False  # (q in the leave question is its own: stop the script)
        if action in keys.LIVE_ACTIONS and (self.state.script_over or self.finished.is_set()):
            return False
        return True

    def action_step(self) -> None:
        """Run the paused node; pause before the next one."""
        self.send("step")

    def action_cont(self) -> None:
        """Run until a breakpoint hits or the script ends."""
        self.send("continue")

    def action_finish(self) -> None:
        """Run to the end of this pass."""
        self.send("finish")

    def action_zero(self) -> None:
        """Zero the incoming gradient."""
        self.send("zero")

    def action_print(self) -> None:
        """Statistics of the incoming gradient."""
        self.send("print")

    def action_toggle_break(self) -> None:
        """Add, or delete, a breakpoint `#ID` on the selected node."""
        node = self.query_one(NodeList).selected
        if node is None:
            self.query_one(CommandBar).answer("no node selected", ok=False)
            return
        existing = next((b for b in self.breakpoints if b.spec == f"#{node}"), None)
        self.send(f"delete {existing.number}" if existing else f"break #{node}")

    def action_scale(self) -> None:
        """Ask for a factor; scale the incoming gradient by it."""
        self.push_screen(PromptScreen("scale the incoming gradient by", placeholder="0.5"),
                         lambda value: value and self.send(f"scale {value}"))

    def action_edit(self) -> None:
        """Ask for an expression of g; replace the incoming gradient by it."""
        self.push_screen(PromptScreen("replace the incoming gradient g by",
                                      placeholder="an expression of g: g.clamp(-1, 1), g * 0, torch.ones(3)",
                                      hint="g is the gradient, torch is torch · same shape, dtype, device"),
                         lambda value: value and self.send(f"set {value}"))

    def action_goto_current(self) -> None:
        """Select the node the engine is paused at."""
        if self.state.current is None:
            self.query_one(CommandBar).answer("not paused", ok=False)
            return
        self.query_one(NodeList).select_node(self.state.current)

    def action_modules(self) -> None:
        """Switch the node list between engine order and the module tree."""
        nodes = self.query_one(NodeList)
        nodes.toggle_modules()
        self._title_nodes()

    def action_flow(self) -> None:
        """Open the gradient flow table of the pass on screen, or of the last ended pass while it runs."""
        if self.state.view is None:
            self.query_one(CommandBar).answer("no pass yet", ok=False)
            return
        self.push_screen(FlowScreen(*self.state.flow_to_show()))

    def action_older_pass(self) -> None:
        """Show the previous pass kept."""
        self._browse(-1)

    def action_newer_pass(self) -> None:
        """Show the next pass kept (the live one last)."""
        self._browse(1)

    def _browse(self, delta: int) -> None:
        change = self.state.browse(delta)
        if change is None:
            views = self.state.views
            if not views:
                self.query_one(CommandBar).answer("no pass yet", ok=False)
                return
            edge = f"pass {views[0].index} is the oldest kept" if delta < 0 else f"pass {views[-1].index} is the live one"
            self.query_one(CommandBar).answer(f"no {'older' if delta < 0 else 'newer'} pass: {edge}", ok=False)
            return
        self._redraw(change)
        if self.state.current is not None:
            self.query_one(NodeList).select_node(self.state.current)

    def action_command(self) -> None:
        """Focus the command bar, at once: `Widget.focus` defers it, so in a real terminal the
        keys typed right after `:` (`:why x` pasted or typed fast) had gone to the node list's
        queue and were lost. `:` is a priority binding, so in the bar itself it is text."""
        bar = self.query_one(CommandBar).input
        if bar.has_focus:
            bar.insert_text_at_cursor(":")
            return
        self._bar_from = self.screen.focused
        self.screen.set_focus(bar)

    def action_help(self) -> None:
        """Show every key and command."""
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette: every gradtui action once, then Textual's own but those it replaces."""
        yield from keys.palette_commands(self.run_action)
        for command in super().get_system_commands(screen):
            if command.title not in keys.REPLACED_COMMANDS:
                yield command
