"""The app's ways around a run, an object the app owns (`GradtuiApp.nav`): finding nodes (`/`,
`N`), walking the graph (`u`, `d`), the passes (`[`, `]`, `P`, `pass N`), the breakpoints pane
(`b`, `B`), the source view (`v`) and zooming a pane (`Z`, `o`). The app's actions call it; it
reads and moves the UI state and asks the app to draw (`draw`) or to send a command (`send`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from textual.app import App
from textual.command import CommandPalette
from textual.widget import Widget

from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import NodeId, Source, same_file
from gradtui.protocol.commands import Command, ShowPass
from gradtui.protocol.nodes import node_info
from gradtui.ui import fmt
from gradtui.ui.client import TargetLink
from gradtui.ui.screens.breakpoints import BreakpointChoice, BreakpointRow, BreakpointsScreen
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.screens.source import MadeNode, SourceFile, SourceScreen
from gradtui.ui.search import NodeIndex, NodeProvider
from gradtui.ui.state import UIState, neighbour
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import OutputLog
from gradtui.ui.widgets.variables import VariableRow, VariablesScreen, variable_rows


class Navigator:
    """What moves the view (see module doc): `app` for its screens and panes, `state` to read and
    browse, `link` for the target's kind and end, `send` and `draw` the app's own."""

    def __init__(
        self,
        app: App[int],
        state: UIState,
        link: TargetLink,
        *,
        send: Callable[[str], object],
        draw: Callable[[], None],
        home: str,
    ) -> None:
        self.app = app
        self.state = state
        self.link = link
        self.send = send
        self.draw = draw
        """Draw what the state changed now (the app publishes its changes)."""
        self.home = home
        """The script's folder (source paths are shown relative to it)."""
        self._node_index: NodeIndex | None = None
        self._focus_back: Widget | None = None
        """The pane that had the focus before `o` took it to the output pane."""

    def _nodes(self) -> NodeList:
        return self.app.query_one(NodeList)

    def _refuse(self, text: str) -> None:
        self.app.query_one(CommandBar).answer(text, ok=False)

    # ---- finding and walking ---------------------------------------------------------------

    def find(self) -> None:
        """Find a node by op, label, module or source line: the palette with nodes only."""
        self.app.push_screen(
            CommandPalette(providers=[NodeProvider], placeholder="find a node: op, label, module, source line…")
        )

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
        self.state.find.query, self.state.find.ranked = query, ranked
        nodes = self._nodes()
        nodes.select_node(node)
        nodes.focus()

    def find_next(self) -> None:
        """The next match of the last find (by rank, wrapping)."""
        view, nodes, find = self.state.view, self._nodes(), self.state.find
        ranked = [n for n in find.ranked if view is not None and n in view.graph]
        if not ranked:
            self.find()
            return
        at = ranked.index(nodes.selected) if nodes.selected in ranked else -1
        nodes.select_node(ranked[(at + 1) % len(ranked)])
        self.app.query_one(CommandBar).answer(
            f"match {(at + 1) % len(ranked) + 1} of {len(ranked)} for {find.query!r}" if find.query else "next node"
        )

    def walk(self, up: bool) -> None:
        """Select a consumer of the selected node (`up`) or its first input."""
        nodes, view = self._nodes(), self.state.view
        node = nodes.selected
        if view is None or node is None:
            self._refuse("no node selected")
            return
        target = neighbour(view, node, up)
        if target is None:
            self._refuse(f"#{node} is {'the root' if up else 'a leaf'}: nothing {'above' if up else 'below'} it")
            return
        nodes.select_node(target)

    def goto_current(self) -> None:
        """Select the node the engine is paused at."""
        if self.state.current is None:
            self._refuse("not paused")
            return
        self._nodes().select_node(self.state.current)

    # ---- passes ----------------------------------------------------------------------------

    def browse(self, delta: int) -> None:
        """Show the kept pass `delta` steps older (-1) or newer (+1)."""
        if self.state.browse(delta) is None:
            views = self.state.views
            if not views:
                self._refuse("no pass yet")
                return
            edge = (
                f"pass {views[0].index} is the oldest kept" if delta < 0 else f"pass {views[-1].index} is the live one"
            )
            self._refuse(f"no {'older' if delta < 0 else 'newer'} pass: {edge}")
            return
        self._shown()

    def _shown(self) -> None:
        self.draw()
        if self.state.current is not None:
            self._nodes().select_node(self.state.current)

    def passes(self) -> None:
        """List every pass kept, with the plots over passes; enter (or a click) shows one."""
        if not self.state.summaries:
            self._refuse("no pass yet")
            return
        self.link.show_flow()
        self.app.push_screen(
            PassesScreen(
                self.state,
                recording=self.link.is_recording,
                node=self._nodes().selected,
                param_stats=self.link.param_stats,
            ),
            self._show_pass,
        )

    def _show_pass(self, index: int | None) -> None:
        if index is None:
            return
        if self.link.is_recording and not self.state.script_over:
            self.send(f"pass {index}")  # the recording has it, with its statistics
            return
        answer = self.browse_pass(index)  # a live run, or a replay played to its end: the passes kept
        if answer is not None:
            self._refuse(answer)

    def browse_pass(self, index: int) -> str | None:
        """Show kept pass `index` (a live run's `pass N`); None, or why it cannot be shown."""
        if self.state.browse_to(index) is None:
            if index >= self.state.passes:
                return f"no pass {index} yet: {self.state.passes} have started"
            kept = [v.index for v in self.state.views]
            return (
                f"pass {index} is not kept: only its summary is (P lists them); node data is kept for "
                f"passes {', '.join(map(str, kept))}"
            )
        self._shown()
        return None

    def pass_command(self, command: Command) -> ev.CommandResult | None:
        """`pass N` in a live run browses to pass N here (a recording's target answers it itself)."""
        if self.link.is_recording or not isinstance(command, ShowPass):
            return None
        text = command.text
        index = command.index
        why = self.browse_pass(index)
        if why is not None:
            return ev.CommandResult(text, why, ok=False)
        live = self.state.live
        back = f" · live is pass {live.index}: ] goes back" if live is not None and live.index != index else ""
        return ev.CommandResult(text, f"showing pass {index}{back}")

    # ---- zoom and focus --------------------------------------------------------------------

    def zoom(self) -> None:
        """The focused pane full screen, or back."""
        screen = self.app.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is not None and screen.focused.has_class("pane"):
            screen.maximize(screen.focused, container=False)
        else:
            self._refuse("Z zooms a pane: tab to one first")

    def zoom_output(self) -> None:
        """The output pane full screen (focused), or back; back, the focus returns where it was."""
        screen, output = self.app.screen, self.app.query_one(OutputLog)
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

    def cycle(self, delta: int) -> None:
        """tab / shift+tab: the next or previous pane; the command bar is left out (`:` enters it)."""
        screen = self.app.screen
        if screen is not self.app.screen_stack[0]:  # a modal screen: its own widgets, as Textual does
            screen.focus_next() if delta > 0 else screen.focus_previous()
            return
        screen.focus_next(".pane") if delta > 0 else screen.focus_previous(".pane")

    # ---- breakpoints -----------------------------------------------------------------------

    def toggle_break(self) -> None:
        """Add, or delete, a breakpoint `#ID` on the selected node."""
        node = self._nodes().selected
        if node is None:
            self._refuse("no node selected")
            return
        existing = next(
            (b for b in self.state.breakpoints if NodeId.of(b.spec) and NodeId.value_of(b.spec) == node), None
        )
        self.send(f"delete {existing.number}" if existing else f"break #{node}")

    def breakpoints(self) -> None:
        """B: every breakpoint with its hits; jump to its last hit, turn it off or on, delete it."""
        self.app.push_screen(BreakpointsScreen(self._breakpoint_rows, self._breakpoint_acted), self._breakpoint_chosen)

    def _breakpoint_rows(self) -> list[BreakpointRow]:
        """The armed breakpoints, then the ones turned off, as the state has them now."""
        state = self.state
        rows = [
            BreakpointRow(b.number, b.spec.text, b.hits, state.breaks.last_hits.get(b.number))
            for b in state.breakpoints
        ]
        return rows + [BreakpointRow(None, spec, 0, None) for spec in state.breaks.off]

    def _breakpoint_chosen(self, choice: BreakpointChoice | None) -> None:
        """The pane closed: on `jump`, show the row's last hit."""
        if choice is None:
            return
        row, bar = choice.row, self.app.query_one(CommandBar)
        if row.last_hit is None:
            bar.answer(f"{row.spec}: no hit yet", ok=False)
            return
        index, node = row.last_hit
        why = self.browse_pass(index) if self.state.view is None or self.state.view.index != index else None
        if why is not None:
            bar.answer(why, ok=False)
            return
        self._nodes().select_node(node)
        bar.answer(f"breakpoint {row.number} ({row.spec}) last hit pass {index} at #{node}")

    def _breakpoint_acted(self, choice: BreakpointChoice) -> bool:
        """A toggle or delete in the open pane; whether the target was asked (else done here)."""
        row, off = choice.row, self.state.breaks.off
        match choice.action:
            case "toggle" if row.number is None:
                off.remove(row.spec)
                self.send(f"break {row.spec}")
            case "toggle":
                off.append(row.spec)
                self.send(f"delete {row.number}")
            case "delete" if row.number is None:
                off.remove(row.spec)
                self.app.query_one(CommandBar).answer(f"forgot {row.spec} (it was off)")
                return False
            case "delete":
                self.send(f"delete {row.number}")
        return True

    # ---- the variables pane ----------------------------------------------------------------

    def variables(self) -> None:
        """V: the tensors and modules where backward was called; enter selects one's node."""
        view = self.state.view
        told = view.variables if view is not None else None
        self.app.push_screen(
            VariablesScreen(
                variable_rows(view), told.call_site if told else "", told.more if told else 0, self.link.is_recording
            ),
            self._variable_chosen,
        )

    def variable_chosen(self, row: VariableRow | None) -> None:
        """A variable chosen (in `V`'s table or the docked pane): select its node, or ask why it
        has none."""
        self._variable_chosen(row)

    def _variable_chosen(self, row: VariableRow | None) -> None:
        if row is None:
            return
        if row.node is not None:
            self._nodes().select_node(row.node)
            self.app.query_one(CommandBar).answer(f"{row.var.name}: #{row.node}")
        else:
            self.send(f"why {row.var.name}")

    # ---- the source view -------------------------------------------------------------------

    def source(self) -> None:
        """v: the selected node's whole file, its line and the lines that made this pass's nodes marked."""
        view, node = self.state.view, self._nodes().selected
        data = node_info(view.graph, node) if view is not None and node is not None and node in view.graph else None
        if view is None or node is None or data is None or not data.path or not data.line:
            self._refuse(
                "v shows a node's source: select a node made by a line of Python"
                if data is None
                else f"#{node} has no source line (made outside Python code)"
            )
            return
        path = data.path
        source = SourceFile(path, fmt.short_path(path, self.home), data.line, node)
        for other in view.order:
            made = node_info(view.graph, other)
            if made.path == path and made.line:
                source.made.setdefault(made.line, []).append(MadeNode(other, view.title(other)))
        for info in self.state.breakpoints:
            if Source.of(spec := info.spec) and same_file((place := Source.value_of(spec))[0], path):
                source.breaks.add(place[1])
        if not source.lines():
            self._refuse(f"cannot read {source.name}: {data.source} is all that is known")
            return
        live = not (self.state.script_over or self.link.finished.is_set())
        self.app.push_screen(SourceScreen(source, live=live), self._source_chosen)

    def _source_chosen(self, node: int | None) -> None:
        if node is not None:
            self._nodes().select_node(node)

    def break_at(self, path: str, line: int) -> None:
        """b in the source view: `break FILE:LINE` (the file's whole path; its name if the path has a space)."""
        file = path if not any(c.isspace() for c in path) else os.path.basename(path)
        self.send(f"break {file}:{line}")
