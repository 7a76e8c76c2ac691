"""The debugger's screen, the app's first (its panes are the app's `compose`): the keys that
drive the script and move the view, and the coordination of its panes (a selection shown in
the detail and graph panes, a new pass sized and shown). Its keys are its own bindings: a
modal screen on top (help, a prompt, the palette) gets the keys, none of these act under it.

Its actions are plain methods: those that send a command say it to `send`; the others ask
the app's navigator (`nav`) and pane sizer (`sizer`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget

from gradtui.ui import keys
from gradtui.ui.navigation import Navigator
from gradtui.ui.screens.console import ConsoleScreen
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.help import HelpScreen
from gradtui.ui.screens.prompt import PromptScreen
from gradtui.ui.sizing import PaneSizer
from gradtui.ui.state import UIState
from gradtui.ui.widgets.body import BodyPane
from gradtui.ui.widgets.column import LeftColumn
from gradtui.ui.widgets.command_bar import CommandBar, HistoryInput
from gradtui.ui.widgets.detail import DetailPane
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.variables import VariablesPane


class DebuggerScreen(Screen):
    """The node list, output, detail and graph panes and the keys over them (see module doc)."""

    BINDINGS = keys.bindings(of_app=False)

    def __init__(
        self,
        nav: Navigator,
        sizer: PaneSizer,
        *,
        echo: Callable[[str], None],
        detach: Callable[[], Awaitable[None]],
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.nav = nav
        """The app's navigator, and through it the UI state, the target link and `send`."""
        self.sizer = sizer
        self.echo = echo
        """Echo a typed command line to the output pane (its answer follows it there)."""
        self.detach = detach
        """Leave the script running and end the app (the app's)."""
        self._statements: list[str] = []
        """What the Python consoles (`interact`) ran, for the next one's history."""
        self._bar_from: Widget | None = None
        """The pane `:` left for the command bar: enter or escape goes back to it."""

    @property
    def state(self) -> UIState:
        """The UI state the panes show."""
        return self.nav.state

    def send(self, text: str) -> object:
        """Send a command line (the app's `send`)."""
        return self.nav.send(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Under a modal screen (help, prompt, flow, passes, the palette) these keys are off, and
        gone from the footer, which shows that screen's. Once the script has ended, the keys that
        drive it are gone too (and do nothing): the footer shows what can be done now."""
        if self.app.screen is not self:
            return False
        return not (action in keys.LIVE_ACTIONS and (self.state.script_over or self.nav.link.finished.is_set()))

    # ---- the panes -----------------------------------------------------------------------

    def show_selected(self, node: int | None) -> None:
        """Show `node` in the detail and graph panes (None: the module row selected, if any)."""
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
        self.show_variables()

    def show_variables(self) -> None:
        """The docked variables pane (L), when docked: the pass on screen's."""
        pane = self.query_one(VariablesPane)
        if pane.has_class("-docked"):
            pane.show(self.state.view, self.nav.link.is_recording)

    def on_variables_pane_chosen(self, message: VariablesPane.Chosen) -> None:
        """enter on a docked variable: its node, or why it has none."""
        self.nav.variable_chosen(message.row)

    def on_node_list_selected(self, message: NodeList.Selected) -> None:
        """The selection moved: show that node (a refusal shown before is stale now)."""
        self.query_one(CommandBar).clear_error()
        self.show_selected(message.node)

    def on_node_list_module_selected(self, message: NodeList.ModuleSelected) -> None:
        """The selection moved to a module row: sum it up in the detail pane."""
        self.show_selected(None)

    def on_node_list_pass_shown(self, message: NodeList.PassShown) -> None:
        """Another pass on screen: size the panes for it, show its selection (an empty pass's too)."""
        self.sizer.size()
        self.query_one(CommandBar).clear_error()
        self.show_selected(message.control.selected)

    def on_node_list_refreshed(self, message: NodeList.Refreshed) -> None:
        """Rows changed under the selection: redraw the panes that show what changed."""
        node, view = message.node, self.state.view
        if node is None or view is None or message.finished or node in message.rows or view.finished:
            self.show_selected(node)
        elif self.query_one(GraphPane).touched(node, message.rows):
            self.query_one(GraphPane).show(node)

    def on_body_pane_node_clicked(self, message: BodyPane.NodeClicked) -> None:
        """A node reference clicked in the detail or graph pane: select that node."""
        self.query_one(NodeList).select_node(message.node)

    def on_left_column_dragged(self, message: LeftColumn.Dragged) -> None:
        """The node list's right border was dragged: it follows the pointer."""
        self.sizer.dragged(message.x)

    def on_command_bar_submitted(self, message: CommandBar.Submitted) -> None:
        """A line typed in the command bar: run it and go back to the node list (like vim's `:`)."""
        self.echo(message.text)
        self._leave_bar()
        self.send(message.text)

    def on_history_input_leave(self, message: HistoryInput.Leave) -> None:
        """Escape in the command bar: back to the pane it was entered from."""
        self._leave_bar()

    def _leave_bar(self) -> None:
        back, self._bar_from = self._bar_from, None
        (back if back is not None and back.is_attached else self.query_one(NodeList)).focus()

    # ---- the keys: commands to the script ------------------------------------------------

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
        self.nav.toggle_break()

    def _edits_refused(self) -> bool:
        """A target that refuses every edit (a replay) says so at once, in its own words, rather
        than after a value was asked for and typed."""
        refused = self.nav.link.target.info.extra.get("edits_refused")
        if refused:
            self.query_one(CommandBar).answer(refused, ok=False)
        return bool(refused)

    def action_scale(self) -> None:
        """Ask for a factor; scale the incoming gradient by it."""
        if self._edits_refused():
            return
        self.app.push_screen(
            PromptScreen("scale the incoming gradient by", placeholder="0.5"),
            lambda value: value and self.send(f"scale {value}"),  # type: ignore[arg-type]  # Textual drops the callback's value
        )

    def action_edit(self) -> None:
        """Ask for an expression of g; replace the incoming gradient by it."""
        if self._edits_refused():
            return
        self.app.push_screen(
            PromptScreen(
                "replace the incoming gradient g by",
                placeholder="an expression of g: g.clamp(-1, 1), g * 0, torch.ones(3)",
                hint="g is the gradient, torch is torch · same shape, dtype, device",
            ),
            lambda value: value and self.send(f"set {value}"),  # type: ignore[arg-type]  # Textual drops the callback's value
        )

    def action_interact(self) -> None:
        """`!` or `interact`: a Python console at the pause (gradtui.ui.screens.console)."""
        if self._edits_refused():
            return
        paused = self.state.paused
        if paused is None:
            self.query_one(CommandBar).answer("interact works at a pause: Ctrl-C breaks in", ok=False)
            return
        self.app.push_screen(
            ConsoleScreen(
                self.nav.send, f"pass {paused.pass_index} · paused at #{paused.node} {paused.name}", self._statements
            )
        )

    async def action_detach(self) -> None:
        """Leave the script running without this UI (attached only), its breakpoints armed."""
        await self.detach()

    # ---- the keys: the view --------------------------------------------------------------

    def action_goto_current(self) -> None:
        """Select the node the engine is paused at."""
        self.nav.goto_current()

    def action_modules(self) -> None:
        """Switch the node list between engine order and the module tree."""
        self.query_one(NodeList).toggle_modules()

    def action_by_difference(self) -> None:
        """Sort the node list by the difference from the reference, or back to engine order."""
        if self.state.reference is None:
            self.query_one(CommandBar).answer("no reference: run with --against REF.db", ok=False)
            return
        self.query_one(NodeList).toggle_difference()

    def action_flow(self) -> None:
        """Open the gradient flow table of the pass on screen, or of the last ended pass while it runs."""
        if self.state.view is None:
            self.query_one(CommandBar).answer("no pass yet", ok=False)
            return
        self.nav.link.show_flow()
        self.app.push_screen(FlowScreen(*self.state.flow_to_show()))

    def action_older_pass(self) -> None:
        """Show the previous pass kept."""
        self.nav.browse(-1)

    def action_newer_pass(self) -> None:
        """Show the next pass kept (the live one last)."""
        self.nav.browse(1)

    def action_passes(self) -> None:
        """List every pass kept, with the plots over passes; enter (or a click) shows one."""
        self.nav.passes()

    def action_find(self) -> None:
        """Find a node by op, label, module or source line."""
        self.nav.find()

    def action_find_next(self) -> None:
        """The next match of the last find."""
        self.nav.find_next()

    def action_up(self) -> None:
        """Select a consumer of the selected node: where its gradient came from (pdb's `u`)."""
        self.nav.walk(up=True)

    def action_down(self) -> None:
        """Select the first input of the selected node: where its gradient goes (pdb's `d`)."""
        self.nav.walk(up=False)

    def action_breakpoints(self) -> None:
        """B: every breakpoint with its hits; jump to its last hit, turn it off or on, delete it."""
        self.nav.breakpoints()

    def action_variables(self) -> None:
        """V: the tensors and modules where backward was called; enter selects one's node."""
        self.nav.variables()

    def action_dock_variables(self) -> None:
        """L: the variables docked beside the detail pane, or undocked (remembered for the session)."""
        pane = self.query_one(VariablesPane)
        docked = not pane.has_class("-docked")
        pane.set_class(docked, "-docked")
        self.sizer.size()  # wide: the graph pane gives the docked pane its room
        if docked:
            self.show_variables()
        elif pane.has_focus_within:
            self.query_one(NodeList).focus()

    def action_source(self) -> None:
        """v: the selected node's whole file, its line and the lines that made this pass's nodes marked."""
        self.nav.source()

    def action_zoom(self) -> None:
        """The focused pane full screen, or back."""
        self.nav.zoom()

    def action_zoom_output(self) -> None:
        """The output pane full screen (focused), or back."""
        self.nav.zoom_output()

    def action_narrower(self) -> None:
        """`<`: move the node list's right edge left."""
        self.sizer.move_left(-1)

    def action_wider(self) -> None:
        """`>`: move the node list's right edge right."""
        self.sizer.move_left(1)

    def action_graph_narrower(self) -> None:
        """`-`: a narrower graph pane, a wider detail pane (the wide layout)."""
        self.sizer.move_graph(-1)

    def action_graph_wider(self) -> None:
        """`+`: a wider graph pane (the wide layout)."""
        self.sizer.move_graph(1)

    def action_command(self) -> None:
        """Focus the command bar, at once: `Widget.focus` defers it, so in a real terminal the
        keys typed right after `:` (`:why x` pasted or typed fast) had gone to the node list's
        queue and were lost. `:` is a priority binding, so in the bar itself it is text."""
        bar = self.query_one(CommandBar).input
        if bar.has_focus:
            bar.insert_text_at_cursor(":")
            return
        self._bar_from = self.focused
        self.set_focus(bar)

    def action_help(self) -> None:
        """Show every key and command."""
        self.app.push_screen(HelpScreen())
