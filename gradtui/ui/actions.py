"""The app's ways around a run, as a mixin of `GradtuiApp`: finding nodes (`/`, `N`), walking
the graph (`u`, `d`), the passes screen (`P`) and `pass N`, and zooming a pane (`Z`, `o`). Kept
apart from app.py, which wires the app to the script; these only read the UI state and move the
view (a recording's passes not kept in the UI are asked of the target with `pass N`).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

from textual.command import CommandPalette

from gradtui.model import events as ev
from gradtui.model.breakpoints import matches_node, parse_spec
from gradtui.model.commands import CommandError, ShowPass, parse
from gradtui.ui import fmt
from gradtui.ui.layout import STEP, PaneSizes
from gradtui.ui.screens.breakpoints import BreakpointChoice, BreakpointRow, BreakpointsScreen
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.screens.source import MadeNode, SourceFile, SourceScreen
from gradtui.ui.search import NodeIndex, NodeProvider
from gradtui.ui.state import Change, UIState, neighbour
from gradtui.ui.widgets.column import LeftColumn
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import OutputLog
from gradtui.ui.widgets.variables import VariableRow, VariablesScreen, variable_rows

if TYPE_CHECKING:
    from textual.app import App
    from textual.widget import Widget

    from gradtui.wire.target import DebugTarget

    _Base = App[int]
else:
    _Base = object


class NavigationActions(_Base):
    """Actions that move what is shown; the app provides `state` and `_redraw`."""

    state: UIState
    target: DebugTarget
    find_query: str
    find_ranked: list[int]
    _node_index: NodeIndex | None
    _focus_back: Widget | None = None
    """The pane that had the focus before `o` took it to the output pane."""
    sizes: PaneSizes
    breakpoints: tuple[ev.BreakpointInfo, ...]
    breakpoints_off: list[str]
    script_path: str
    finished: asyncio.Event
    """Specs of the breakpoints turned off in the breakpoints pane (deleted in the target)."""

    def _redraw(self, change: Change) -> None:  # pragma: no cover - the app's
        raise NotImplementedError

    def send(self, text: str) -> int | None:  # pragma: no cover - TargetClient's
        raise NotImplementedError

    @property
    def is_recording(self) -> bool:
        """Is the target a recording (`gradtui replay`)?"""
        return self.target.info.kind == "recording"

    def action_find(self) -> None:
        """Find a node by op, label, module or source line: the palette with nodes only."""
        self.push_screen(CommandPalette(providers=[NodeProvider],
                                        placeholder="find a node: op, label, module, source line…"))

    def node_index(self) -> NodeIndex | None:
        """The search text of the shown pass's nodes (built once per pass)."""
        view = self.state.view
        if view is None or not view.order:
            return None
        if self._node_index is None or self._node_index.view is not view:
            self._node_index = NodeIndex(view)
        return self._node_index

    def found(self, query: str, ranked: list[int], node: int) -> None:
        """A node picked from the palette: select it; `N` goes on through the same matches."""
        self.find_query, self.find_ranked = query, ranked
        nodes = self.query_one(NodeList)
        nodes.select_node(node)
        nodes.focus()

    def action_find_next(self) -> None:
        """The next match of the last find (by rank, wrapping)."""
        view, nodes = self.state.view, self.query_one(NodeList)
        ranked = [n for n in self.find_ranked if view is not None and n in view.graph]
        if not ranked:
            self.action_find()
            return
        at = ranked.index(nodes.selected) if nodes.selected in ranked else -1
        nodes.select_node(ranked[(at + 1) % len(ranked)])
        self.query_one(CommandBar).answer(f"match {(at + 1) % len(ranked) + 1} of {len(ranked)} for "
                                          f"{self.find_query!r}" if self.find_query else "next node")

    def action_up(self) -> None:
        """Select a consumer of the selected node: where its gradient came from (pdb's `u`)."""
        self._walk(up=True)

    def action_down(self) -> None:
        """Select the first input of the selected node: where its gradient goes (pdb's `d`)."""
        self._walk(up=False)

    def _walk(self, up: bool) -> None:
        nodes, view = self.query_one(NodeList), self.state.view
        node = nodes.selected
        if view is None or node is None:
            self.query_one(CommandBar).answer("no node selected", ok=False)
            return
        target = neighbour(view, node, up)
        if target is None:
            self.query_one(CommandBar).answer(f"#{node} is {'the root' if up else 'a leaf'}: nothing "
                                              f"{'above' if up else 'below'} it", ok=False)
            return
        nodes.select_node(target)

    def action_passes(self) -> None:
        """List every pass kept, with the plots over passes; enter (or a click) shows one."""
        if not self.state.summaries:
            self.query_one(CommandBar).answer("no pass yet", ok=False)
            return
        self.push_screen(PassesScreen(self.state, recording=self.is_recording, node=self.query_one(NodeList).selected),
                         self._show_pass)

    def _show_pass(self, index: int | None) -> None:
        if index is None:
            return
        if self.is_recording:
            self.send(f"pass {index}")  # the recording has it, with its statistics
            return
        answer = self.browse_pass(index)
        if answer is not None:
            self.query_one(CommandBar).answer(answer, ok=False)

    def browse_pass(self, index: int) -> str | None:
        """Show kept pass `index` (a live run's `pass N`); None, or why it cannot be shown."""
        change = self.state.browse_to(index)
        if change is None:
            if index >= self.state.passes:
                return f"no pass {index} yet: {self.state.passes} have started"
            kept = [v.index for v in self.state.views]
            return (f"pass {index} is not kept: only its summary is (P lists them); node data is kept for "
                    f"passes {', '.join(map(str, kept))}")
        self._redraw(change)
        if self.state.current is not None:
            self.query_one(NodeList).select_node(self.state.current)
        return None

    def local_command(self, text: str) -> ev.CommandResult | None:
        """`pass N` in a live run browses to pass N here (a recording's target answers it itself;
        a line that does not parse goes on, for the target to refuse)."""
        if self.is_recording:
            return None
        try:
            command = parse(text)
        except CommandError:
            return None
        if not isinstance(command, ShowPass):
            return None
        index = command.index
        why = self.browse_pass(index)
        if why is not None:
            return ev.CommandResult(text, why, ok=False)
        live = self.state.live
        back = f" · live is pass {live.index}: ] goes back" if live is not None and live.index != index else ""
        return ev.CommandResult(text, f"showing pass {index}{back}")

    def action_zoom(self) -> None:
        """The focused pane full screen, or back."""
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is not None and screen.focused.has_class("pane"):
            screen.maximize(screen.focused, container=False)
        else:
            self.query_one(CommandBar).answer("Z zooms a pane: tab to one first", ok=False)

    def action_zoom_output(self) -> None:
        """The output pane full screen (focused), or back; back, the focus returns where it was."""
        screen, output = self.screen, self.query_one(OutputLog)
        if screen.maximized is output:
            screen.minimize()
            return
        self._focus_back = screen.focused if screen.focused is not output else None
        output.focus()
        screen.maximize(output, container=False)

    def zoom_changed(self, maximized: Widget | None) -> None:
        """The main screen's zoom changed (`Z`, `o`, escape): zoomed out of the output pane
        that `o` focused, the focus goes back to the pane it came from."""
        if maximized is not None:
            return
        back, self._focus_back = self._focus_back, None
        if back is not None and back.is_attached:
            back.focus()

    def action_focus_next(self) -> None:
        """tab: the next pane; the command bar is left out (`:` enters it, keys there are text)."""
        self._cycle(1)

    def action_focus_previous(self) -> None:
        """shift+tab: the previous pane."""
        self._cycle(-1)

    def _cycle(self, delta: int) -> None:
        screen = self.screen
        if screen is not self.screen_stack[0]:  # a modal screen: its own widgets, as Textual does
            screen.focus_next() if delta > 0 else screen.focus_previous()
            return
        screen.focus_next(".pane") if delta > 0 else screen.focus_previous(".pane")

    # ---- the breakpoints pane ------------------------------------------------------------

    def action_breakpoints(self) -> None:
        """B: every breakpoint with its hits; jump to its last hit, turn it off or on, delete it."""
        rows = [BreakpointRow(b.number, b.spec, b.hits, self.state.last_hits.get(b.number)) for b in self.breakpoints]
        rows += [BreakpointRow(None, spec, 0, None) for spec in self.breakpoints_off]
        self.push_screen(BreakpointsScreen(rows), self._breakpoint_chosen)

    def _breakpoint_chosen(self, choice: BreakpointChoice | None) -> None:
        if choice is None:
            return
        row, bar = choice.row, self.query_one(CommandBar)
        match choice.action:
            case "jump" if row.last_hit is None:
                bar.answer(f"{row.spec}: no hit yet", ok=False)
            case "jump":
                index, node = row.last_hit
                why = self.browse_pass(index) if self.state.view is None or self.state.view.index != index else None
                if why is not None:
                    bar.answer(why, ok=False)
                    return
                self.query_one(NodeList).select_node(node)
                bar.answer(f"breakpoint {row.number} ({row.spec}) last hit pass {index} at #{node}")
            case "toggle" if row.number is None:
                self.breakpoints_off.remove(row.spec)
                self.send(f"break {row.spec}")
            case "toggle":
                self.breakpoints_off.append(row.spec)
                self.send(f"delete {row.number}")
            case "delete" if row.number is None:
                self.breakpoints_off.remove(row.spec)
                bar.answer(f"forgot {row.spec} (it was off)")
            case "delete":
                self.send(f"delete {row.number}")

    # ---- the variables pane ----------------------------------------------------------------

    def action_variables(self) -> None:
        """V: the tensors and modules where backward was called; enter selects one's node."""
        view = self.state.view
        told = view.variables if view is not None else None
        self.push_screen(VariablesScreen(variable_rows(view), told.call_site if told else "", told.more if told else 0),
                         self._variable_chosen)

    def _variable_chosen(self, row: VariableRow | None) -> None:
        if row is None:
            return
        if row.node is not None:
            self.query_one(NodeList).select_node(row.node)
            self.query_one(CommandBar).answer(f"{row.var.name}: #{row.node}")
        else:
            self.send(f"why {row.var.name}")

    # ---- the source view -----------------------------------------------------------------

    def action_source(self) -> None:
        """v: the selected node's whole file, its line and the lines that made this pass's nodes marked."""
        view, node, bar = self.state.view, self.query_one(NodeList).selected, self.query_one(CommandBar)
        data = view.graph.nodes[node] if view is not None and node is not None and node in view.graph else None
        if data is None or not data["path"] or not data["line"]:
            bar.answer("v shows a node's source: select a node made by a line of Python" if data is None
                       else f"#{node} has no source line (made outside Python code)", ok=False)
            return
        path = data["path"]
        source = SourceFile(path, fmt.short_path(path, os.path.dirname(self.script_path)), data["line"], node)
        for other in view.order:
            if view.graph.nodes[other]["path"] == path and view.graph.nodes[other]["line"]:
                source.made.setdefault(view.graph.nodes[other]["line"], []).append(MadeNode(other, view.title(other)))
        for info in self.breakpoints:
            spec = parse_spec(info.spec)
            if spec.kind == "source" and matches_node(spec, {"path": path, "line": spec.value[1]}, 0, 0, False):
                source.breaks.add(spec.value[1])
        if not source.lines():
            bar.answer(f"cannot read {source.name}: {data['source']} is all that is known", ok=False)
            return
        live = not (self.state.script_over or self.finished.is_set())
        self.push_screen(SourceScreen(source, live=live), self._source_chosen)

    def _source_chosen(self, node: int | None) -> None:
        if node is not None:
            self.query_one(NodeList).select_node(node)

    def on_source_screen_break_requested(self, message: SourceScreen.BreakRequested) -> None:
        """b in the source view: `break FILE:LINE` (the file's whole path; its name if the path has a space)."""
        file = message.path if not any(c.isspace() for c in message.path) else os.path.basename(message.path)
        self.send(f"break {file}:{message.line}")

    # ---- pane sizes ----------------------------------------------------------------------

    def size_panes(self, width: int | None = None) -> None:
        """Size the node list column (and, wide, the graph pane) by what they show and the
        user's moves (see gradtui.ui.layout); styles are set only when a width changed, so a
        step lays nothing out."""
        width = width or self.size.width
        left = self.query_one("#left")
        wanted = self.sizes.left(width, self.query_one(NodeList).natural_width)
        if left.styles.width is None or left.styles.width.value != wanted:
            left.styles.width = wanted
        graph = self.query_one(GraphPane)
        if self.query_one("#main").has_class("wide"):
            wanted = self.sizes.graph(width - wanted, graph.natural_width())
            if graph.styles.width is None or graph.styles.width.value != wanted:
                graph.styles.width = wanted
        elif graph.styles.width is not None:
            graph.styles.width = None

    def action_narrower(self) -> None:
        """`<`: move the node list's right edge left."""
        self.sizes.left_moved -= STEP
        self.size_panes()

    def action_wider(self) -> None:
        """`>`: move the node list's right edge right."""
        self.sizes.left_moved += STEP
        self.size_panes()

    def action_graph_narrower(self) -> None:
        """`-`: a narrower graph pane, a wider detail pane (the wide layout)."""
        self._move_graph(-STEP)

    def action_graph_wider(self) -> None:
        """`+`: a wider graph pane (the wide layout)."""
        self._move_graph(STEP)

    def _move_graph(self, cells: int) -> None:
        if not self.query_one("#main").has_class("wide"):
            self.query_one(CommandBar).answer("- + size the graph pane beside the detail pane: a terminal of "
                                              "160 columns or more; < > size the node list", ok=False)
            return
        self.sizes.graph_moved += cells
        self.size_panes()

    def on_left_column_dragged(self, message: LeftColumn.Dragged) -> None:
        """The node list's right border was dragged: it follows the pointer."""
        self.sizes.drag_left(self.size.width, self.query_one(NodeList).natural_width, message.x)
        self.size_panes()
