"""Every piece of state the UI shows, as plain Python fed by engine events: no Textual, easy to test.

`UIState.apply(event)` folds one engine event into the model and returns the `Changes` it
made (which node rows, whether a new pass replaced the list, ...); the state also gathers every
change since the app last drew (`take_changes`), which the app publishes in a reactive that the
widgets watch, so each redraws only what changed. Its parts are owned objects: the kept passes
(`keptpasses.PassesState`), the breakpoints and their hits (`breakstate.BreakpointsState`), the
norms and series over passes; the last find and the user's pane sizes are here too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import node_info
from gradtui.ui import headertext
from gradtui.ui.breakstate import BreakpointsState
from gradtui.ui.changes import Changes
from gradtui.ui.fmt import remember_source
from gradtui.ui.headertext import HeaderPart
from gradtui.ui.history import NormHistory, PassSummary
from gradtui.ui.keptpasses import FlowSnapshot, PassesState  # noqa: F401 - screens import FlowSnapshot from here
from gradtui.ui.layout import PaneSizes
from gradtui.ui.passview import Grads, PassView, neighbour  # noqa: F401 - widgets import them from here
from gradtui.ui.series import PassSeries


@dataclass
class Find:
    """The last find (`/`): its text and the nodes it matched, best first (`N` steps through them)."""

    query: str = ""
    ranked: list[int] = field(default_factory=list)


class UIState:
    """The whole UI model: the run's state as the events tell it, and the parts it owns: the
    kept passes (`kept`: the live pass, the one browsed, their summaries), the breakpoints
    (`breaks`), the norms and series over passes, the last find, the pane sizes.

    `live` is the latest pass, which events update; `view` is the pass on screen: `live`, or
    an ended pass the user browses with `browse`. Events of the live pass never redraw the
    rows of a browsed pass.
    """

    def __init__(self, script_name: str) -> None:
        self.script_name = script_name
        self.kept = PassesState()
        """The passes kept: live, browsed, their views and summaries, the last flow."""
        self.breaks = BreakpointsState()
        """The target's breakpoints, their markers, the ones turned off, their hits."""
        self.norms = NormHistory()
        """Per-node incoming norms over the last recorded passes (the sparkline)."""
        self.series = PassSeries()
        """Loss, gradient norm, non-finite count and module norms of every pass (the plots)."""
        self.status = "starting"
        """starting, running, paused, finished, failed or quit."""
        self.paused: ev.Paused | None = None
        self.progress: tuple[int, int] = (0, 0)
        self.exit_status: int | None = None
        self.traceback: str | None = None
        self.passes = 0
        self.find = Find()
        self.reference: str | None = None
        """The reference recording the run is compared with (`--against`), once a pass said so."""
        self.sizes = PaneSizes()
        """The user's moves of the panes' edges (`<` `>` `-` `+`, a drag)."""
        self._unseen: Changes | None = None
        """What changed since the app last took the changes to draw them."""

    # ---- what the parts hold, as the widgets read it -----------------------------------------

    @property
    def live(self) -> PassView | None:
        """The latest pass (the one the engine runs or last ran)."""
        return self.kept.live

    @property
    def browsed(self) -> PassView | None:
        """An earlier pass on screen instead of `live`, or None."""
        return self.kept.browsed

    @property
    def view(self) -> PassView | None:
        """The pass on screen: the browsed one, else the live one."""
        return self.kept.view

    @property
    def views(self) -> deque[PassView]:
        """Full views of the last passes, oldest first, `live` last (bounded, see history)."""
        return self.kept.views

    @property
    def summaries(self) -> deque[PassSummary]:
        """One line per pass that started, oldest first (bounded)."""
        return self.kept.summaries

    @property
    def breakpoints(self) -> tuple[ev.BreakpointInfo, ...]:
        """The target's breakpoints, as its last BreakpointsChanged said (their specs parsed: the
        node list marks its rows by them)."""
        return self.breaks.breakpoints

    @property
    def hits(self) -> dict[int, int]:
        """Pass index -> how many breakpoint hits it had."""
        return self.breaks.hits

    @property
    def current(self) -> int | None:
        """The node the engine is paused at, in the shown pass."""
        view = self.view
        if self.paused is not None and view is not None and self.paused.pass_index == view.index:
            return self.paused.node
        return None

    @property
    def script_over(self) -> bool:
        """Has the script ended (or been quit)?"""
        return self.status in ("finished", "failed", "quit")

    def apply(self, event: ev.Event) -> Changes:
        """Fold one event into the model; what it changed (also kept for `take_changes`)."""
        match event:
            case ev.ScriptStarted():
                self.status = "running"
                change = Changes(header=True)
            case ev.SourceText():
                remember_source(event.path, event.lines)
                change = Changes()
            case ev.CallSiteVariables():
                change = self._on_CallSiteVariables(event)
            case ev.PassStarted():
                change = self._on_PassStarted(event)
            case ev.NestedPass():
                change = Changes(log=[_nested_note(event)])
            case ev.NodeRan():
                change = self._on_NodeRan(event)
            case ev.Paused():
                change = self._on_Paused(event)
            case ev.BreakpointHit():
                change = self.breaks.hit(event)
            case ev.BreakpointsChanged():
                change = self.breaks.changed(event)
            case ev.Resumed():
                change = self._on_Resumed(event)
            case ev.Progress():
                change = self._on_Progress(event)
            case ev.GradEdited():
                change = self._on_GradEdited(event)
            case ev.PassDifferences():
                change = self._on_PassDifferences(event)
            case ev.PassFinished():
                change = self._on_PassFinished(event)
            case ev.ScriptFinished():
                change = self._on_ScriptFinished(event)
            case _:
                change = Changes()
        if self.browsed is not None:
            change.rows.clear()  # they are rows of the live pass, not of the one on screen
        return self._note(change)

    def apply_ran(self, events: list[ev.NodeRan]) -> Changes:
        """Fold a batch of NodeRan events (the bridge batches them)."""
        change = Changes(header=True)
        for event in events:
            change.rows |= self._on_NodeRan(event).rows
        if self.browsed is not None:
            change.rows.clear()
        return self._note(change)

    def _note(self, change: Changes) -> Changes:
        self._unseen = change if self._unseen is None else self._unseen.merge(change)
        return change

    def take_changes(self) -> Changes | None:
        """Every change since the last call (None: nothing to draw): the app draws them at once
        (a recording's story of a thousand passes is drawn once, not once a pass)."""
        changes, self._unseen = self._unseen, None
        return changes

    # ---- browsing earlier passes ---------------------------------------------------------

    def browse(self, delta: int) -> Changes | None:
        """Show the kept pass `delta` steps older (-1) or newer (+1); None if there is none."""
        return self._note(Changes(new_pass=True, header=True)) if self.kept.browse(delta) else None

    def browse_to(self, index: int) -> Changes | None:
        """Show the kept pass of that index (the live one: back to live); None if not kept."""
        return self._note(Changes(new_pass=True, header=True)) if self.kept.browse_to(index) else None

    def flow_to_show(self) -> tuple[FlowSnapshot | None, str]:
        """The flow `w` shows, and a note (see `PassesState.flow_to_show`)."""
        return self.kept.flow_to_show()

    @property
    def last_recorded(self) -> PassView | None:
        """The latest kept pass with per-node data (the one worth browsing at the end)."""
        return self.kept.last_recorded

    # ---- one handler per event type ------------------------------------------------------

    def _on_CallSiteVariables(self, event: ev.CallSiteVariables) -> Changes:
        view = self.kept.pass_view(event.pass_index)
        if view is not None:
            view.variables = event
        return Changes()

    def _on_PassStarted(self, event: ev.PassStarted) -> Changes:
        self.series.started(event.pass_index, tuple(event.losses))
        if not event.described:  # the screen keeps the last pass drawn; the header counts this one
            self.kept.undescribed(event)
            self.passes = max(self.passes, event.pass_index + 1)
            self.paused = None
            self.status = "running"
            return Changes(header=True)
        # a pass shown again (a recording's `pass N`) replaces its old view
        live = self.kept.started(event, event.pass_index < self.passes, self.reference)
        self.passes = max(self.passes, event.pass_index + 1)
        self.paused = None
        self.status = "running"
        self.progress = (0, live.total)
        return Changes(new_pass=self.browsed is None, header=True)

    def _on_NodeRan(self, event: ev.NodeRan) -> Changes:
        view = self.live
        if view is None or event.pass_index != view.index:
            return Changes()
        view.node_ran(event)
        self.progress = (view.done, view.total)
        return Changes(rows={event.node}, header=True)

    def _on_Paused(self, event: ev.Paused) -> Changes:
        self.kept.browsed = None  # a pause is always worth seeing: back to the live pass
        change = Changes(header=True, paused=True)
        previous = self.current
        if previous is not None:
            change.rows.add(previous)
        self.paused = event
        self.status = "paused"
        view = self.live
        if view is not None and event.pass_index == view.index:
            view.paused_at(event)
            change.rows.add(event.node)
        self.progress = (event.done, event.total)
        return change

    def _on_Resumed(self, event: ev.Resumed) -> Changes:
        change = Changes(header=True)
        if self.current is not None:
            change.rows.add(self.current)
        self.paused = None
        self.status = "running"
        return change

    def _on_Progress(self, event: ev.Progress) -> Changes:
        if self.live is not None and event.pass_index == self.live.index:
            self.progress = (event.done, event.total)
        return Changes(header=True)

    def _on_GradEdited(self, event: ev.GradEdited) -> Changes:
        view = self.live
        if view is None or event.pass_index != view.index:
            return Changes()
        view.edited(event)
        return Changes(rows={event.node})

    def _on_PassDifferences(self, event: ev.PassDifferences) -> Changes:
        view = self.kept.pass_view(event.pass_index)
        if view is None:
            return Changes()
        view.differences = {d.node: d for d in event.nodes}
        view.reference = self.reference = event.reference
        view.largest_difference = event.largest
        self.kept.compared(view)
        return Changes(rows=set(view.differences) if view is self.view else set(), header=True)

    def _on_PassFinished(self, event: ev.PassFinished) -> Changes:
        view = self.live
        names = None
        if not event.flow and event.leaf_grads and view is not None and event.pass_index == view.index:
            names = view.leaf_names(node for node, _ in event.leaf_grads)  # a flow nothing showed: named here
        self.series.finished(event.pass_index, event.flow, event.leaf_grads, names)
        change = Changes(header=True)
        if self.kept.undrawn == event.pass_index:
            self.kept.undescribed_ended(event)
            return change
        self.kept.flow_ended(event)
        if view is None or event.pass_index != view.index:
            return change
        if self.current is not None:
            change.rows.add(self.current)
        self.paused = None
        change.rows |= view.ended(event)
        self.kept.live_ended()
        if view.recorded and view.total:
            self.norms.add(view.index, _op_names(view), view.incoming_norms())
        self.progress = (event.done, event.total)
        return change

    def _on_ScriptFinished(self, event: ev.ScriptFinished) -> Changes:
        change = Changes(header=True, finished=True)
        if self.current is not None:
            change.rows.add(self.current)
        self.paused = None
        self.exit_status = event.exit_status
        self.traceback = event.traceback
        if event.quit:
            self.status = "quit"
        elif event.exit_status != 0 or event.traceback:
            self.status = "failed"
        else:
            self.status = "finished"
        return change

    # ---- what the header says (gradtui.ui.headertext) --------------------------------------

    def pass_parts(self) -> tuple[HeaderPart, ...]:
        """The header's pass text in parts, each with how soon it goes when the line is short."""
        return headertext.pass_parts(self.view, self.live, browsing=self.browsed is not None, undrawn=self.kept.undrawn)

    def pass_text(self) -> str:
        """`pass 3 · loss 0.41 · loss.backward()`, then `unhooked` or `browsing · live is 7`."""
        return " · ".join(part.text for part in self.pass_parts())

    def status_short(self) -> str:
        """The state text for a narrow header: `paused #1 (y)`, else as `status_text`."""
        return headertext.status_short(self.status, self.paused, self.live, self.exit_status)

    def status_text(self) -> str:
        """`paused at #1 MulBackward0 (y)`, `running`, `finished · exit 0`..."""
        return headertext.status_text(self.status, self.paused, self.live, self.exit_status)


def _nested_note(event: ev.NestedPass) -> str:
    """The output pane's line about a backward nested in a pass (it ran unhooked)."""
    where = f" at {event.call_site}" if event.call_site else ""
    return (
        f"nested {event.call}{where} in pass {event.pass_index} from thread {event.thread}: "
        f"{event.nodes} nodes, ran unhooked"
    )


def _op_names(view: PassView) -> tuple[str, ...]:
    """The op name of every node id of the pass ("" for an id it lacks): the norms' key with the id."""
    graph = view.graph
    return tuple(node_info(graph, n).name if n in graph else "" for n in range(max(graph.nodes) + 1))
