"""Every piece of state the UI shows, as plain Python fed by engine events: no Textual, easy to test.

`UIState.apply(event)` folds one engine event into the model and returns the `Changes` it
made (which node rows, whether a new pass replaced the list, ...); the state also gathers every
change since the app last drew (`take_changes`), which the app publishes in a reactive that the
widgets watch, so each redraws only what changed. The target's breakpoints, the ones turned off
in the breakpoints pane, the last find and the user's pane sizes are here too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from gradtui.model import events as ev
from gradtui.model.breakpoints import Spec, parse_spec
from gradtui.model.nodes import node_tags
from gradtui.model.stats import any_nonfinite
from gradtui.ui.changes import Changes
from gradtui.ui.history import KEEP_NODES, KEEP_SUMMARIES, KEEP_VIEWS, NormHistory, PassSummary
from gradtui.ui.passview import Grads, PassView, neighbour  # noqa: F401 - widgets import them from here
from gradtui.ui.layout import PaneSizes
from gradtui.ui.series import PassSeries
from gradtui.ui.fmt import remember_source


class FlowSnapshot(NamedTuple):
    """The gradient flow of one ended pass: what `w` shows while the next pass runs."""

    index: int
    flow: tuple[ev.ParamFlow, ...]


class HeaderPart(NamedTuple):
    """A part of the header's text; parts of higher `drop` go first when the line is short."""

    text: str
    drop: int


class Marker(NamedTuple):
    """A breakpoint as the node list marks it: its number and parsed spec."""

    number: int
    spec: Spec


@dataclass
class Find:
    """The last find (`/`): its text and the nodes it matched, best first (`N` steps through them)."""

    query: str = ""
    ranked: list[int] = field(default_factory=list)


class UIState:
    """The whole UI model: the live pass, the pass being browsed, the engine's state, history.

    `live` is the latest pass, which events update; `view` is the pass on screen: `live`, or
    an ended pass the user browses with `browse`. Events of the live pass never redraw the
    rows of a browsed pass.
    """

    def __init__(self, script_name: str) -> None:
        self.script_name = script_name
        self.live: PassView | None = None
        """The latest pass (the one the engine runs or last ran)."""
        self.browsed: PassView | None = None
        """An earlier pass on screen instead of `live`, or None."""
        self.views: deque[PassView] = deque()
        """Full views of the last passes, oldest first, `live` last (bounded, see history)."""
        self.summaries: deque[PassSummary] = deque(maxlen=KEEP_SUMMARIES)
        """One line per pass that started, oldest first (bounded)."""
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
        self.hits: dict[int, int] = {}
        """Pass index -> how many breakpoint hits it had."""
        self.last_hits: dict[int, tuple[int, int]] = {}
        """Breakpoint number -> (pass index, node) of its last hit (the breakpoints pane's jump)."""
        self.last_flow: FlowSnapshot | None = None
        """The flow of the last pass that ended (kept whatever views are dropped)."""
        self.breakpoints: tuple[ev.BreakpointInfo, ...] = ()
        """The target's breakpoints, as its last BreakpointsChanged said."""
        self.markers: tuple[Marker, ...] = ()
        """The same, parsed, as the node list marks its rows by them."""
        self.breakpoints_off: list[str] = []
        """Breakpoints turned off in the breakpoints pane: their specs (the target deleted them)."""
        self.find = Find()
        self.sizes = PaneSizes()
        """The user's moves of the panes' edges (`<` `>` `-` `+`, a drag)."""
        self._unseen: Changes | None = None
        """What changed since the app last took the changes to draw them."""

    @property
    def view(self) -> PassView | None:
        """The pass on screen: the browsed one, else the live one."""
        return self.browsed if self.browsed is not None else self.live

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
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        change = handler(event) if handler is not None else Changes()
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
        view = self.view
        if view is None or not self.views:
            return None
        kept = list(self.views)
        at = next((i for i, v in enumerate(kept) if v is view), len(kept) - 1 if delta < 0 else None)
        if at is None:  # a browsed pass that has since been dropped: newer goes back to live
            target = self.live
        else:
            i = at + delta
            if not 0 <= i < len(kept):
                return None
            target = kept[i]
        self.browsed = None if target is self.live else target
        return self._note(Changes(new_pass=True, header=True))

    def browse_to(self, index: int) -> Changes | None:
        """Show the kept pass of that index (the live one: back to live); None if not kept."""
        target = next((v for v in self.views if v.index == index), None)
        if target is None:
            return None
        self.browsed = None if target is self.live else target
        return self._note(Changes(new_pass=True, header=True))

    def _keep(self, view: PassView) -> None:
        """Keep `view`; drop views past the bounds, those without per-node data first (a
        training loop's one hooked pass must not be pushed out by the unhooked ones after it)."""
        self.views.append(view)
        while len(self.views) > 2 and (len(self.views) > KEEP_VIEWS
                                       or sum(v.total for v in self.views) > KEEP_NODES):
            victim = next((v for v in self.views if not v.recorded and v is not self.live
                           and v is not self.browsed), None)
            if victim is None:
                victim = next(v for v in self.views if v is not self.browsed)
            self.views.remove(victim)

    def flow_to_show(self) -> tuple[FlowSnapshot | None, str]:
        """The flow `w` shows, and a note: the shown pass's once it has ended, else the last
        ended pass's (right after `f`, or mid-pass, the question is about that one)."""
        view = self.view
        if view is not None and view.finished:
            return FlowSnapshot(view.index, view.flow), ""
        last = self.last_flow
        if last is None:
            which = f"pass {view.index}" if view is not None else "the first pass"
            return None, f"{which} has not ended yet: the flow is measured when backward returns"
        running = f" · pass {view.index} has not ended yet" if view is not None else ""
        return last, f"the last pass that ended{running}"

    @property
    def last_recorded(self) -> PassView | None:
        """The latest kept pass with per-node data (the one worth browsing at the end)."""
        return next((v for v in reversed(self.views) if v.recorded and v.total), None)

    # ---- one handler per event type ------------------------------------------------------

    def _on_ScriptStarted(self, event: ev.ScriptStarted) -> Changes:
        self.status = "running"
        return Changes(header=True)

    def _on_SourceText(self, event: ev.SourceText) -> Changes:
        remember_source(event.path, event.lines)
        return Changes()

    def _on_CallSiteVariables(self, event: ev.CallSiteVariables) -> Changes:
        view = next((v for v in reversed(self.views) if v.index == event.pass_index), None)
        if view is not None:
            view.variables = event
        return Changes()

    def _on_PassStarted(self, event: ev.PassStarted) -> Changes:
        if event.pass_index < self.passes:  # a pass shown again (a recording's `pass N`): it replaces its old view
            self.views = deque(v for v in self.views if v.index != event.pass_index)
            self.summaries = deque((s for s in self.summaries if s.index != event.pass_index), maxlen=KEEP_SUMMARIES)
            if self.browsed is not None and self.browsed.index == event.pass_index:
                self.browsed = None
        self.series.started(event.pass_index, tuple(event.losses))
        self.live = PassView.from_event(event)
        self._keep(self.live)
        self.summaries.append(self.live.summary())
        if len(self.summaries) > 1 and self.summaries[-2].index > event.pass_index:
            self.summaries = deque(sorted(self.summaries, key=lambda s: s.index), maxlen=KEEP_SUMMARIES)
        self.passes = max(self.passes, event.pass_index + 1)
        self.paused = None
        self.status = "running"
        self.progress = (0, self.live.total)
        return Changes(new_pass=self.browsed is None, header=True)

    def _on_NestedPass(self, event: ev.NestedPass) -> Changes:
        where = f" at {event.call_site}" if event.call_site else ""
        return Changes(log=[f"nested {event.call}{where} in pass {event.pass_index} from thread {event.thread}: "
                           f"{event.nodes} nodes, ran unhooked"])

    def _on_NodeRan(self, event: ev.NodeRan) -> Changes:
        view = self.live
        if view is None or event.pass_index != view.index:
            return Changes()
        view.ran[event.node] = event.order
        view.done = max(view.done, event.order)
        view.grad_outputs[event.node] = event.grad_outputs
        view.grad_inputs[event.node] = event.grad_inputs
        if any_nonfinite(event.grad_outputs) or any_nonfinite(event.grad_inputs):
            view.nonfinite.add(event.node)
        self.progress = (view.done, view.total)
        return Changes(rows={event.node}, header=True)

    def _on_Paused(self, event: ev.Paused) -> Changes:
        self.browsed = None  # a pause is always worth seeing: back to the live pass
        change = Changes(header=True, paused=True)
        previous = self.current
        if previous is not None:
            change.rows.add(previous)
        self.paused = event
        self.status = "paused"
        view = self.live
        if view is not None and event.pass_index == view.index:
            view.done = max(view.done, event.done)
            if event.phase == "before":
                view.grad_outputs[event.node] = event.grads
                view.grad_outputs_hist[event.node] = event.grads
                view.arrived_hist.setdefault(event.node, event.grads)
            else:
                view.grad_inputs[event.node] = event.grads
                view.grad_inputs_hist[event.node] = event.grads
            if any_nonfinite(event.grads):
                view.nonfinite.add(event.node)
            change.rows.add(event.node)
        self.progress = (event.done, event.total)
        return change

    def _on_BreakpointHit(self, event: ev.BreakpointHit) -> Changes:
        self.hits[event.pass_index] = self.hits.get(event.pass_index, 0) + 1
        self.last_hits[event.number] = (event.pass_index, event.node)
        return Changes()

    def _on_BreakpointsChanged(self, event: ev.BreakpointsChanged) -> Changes:
        self.breakpoints = event.breakpoints
        self.markers = tuple(Marker(b.number, parse_spec(b.spec)) for b in event.breakpoints)
        return Changes(breakpoints=True)

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
        view.edits.setdefault(event.node, []).append((event.command, event.before))
        view.grad_outputs[event.node] = event.after
        if any(s is not None and s.histogram for s in event.after):
            view.grad_outputs_hist[event.node] = event.after
        else:
            view.grad_outputs_hist.pop(event.node, None)
        if any_nonfinite(event.after):
            view.nonfinite.add(event.node)
        return Changes(rows={event.node})

    def _on_PassFinished(self, event: ev.PassFinished) -> Changes:
        self.series.finished(event.pass_index, event.flow)
        if self.last_flow is None or event.pass_index >= self.last_flow.index:
            self.last_flow = FlowSnapshot(event.pass_index, tuple(event.flow))
        view = self.live
        change = Changes(header=True)
        if view is None or event.pass_index != view.index:
            return change
        if self.current is not None:
            change.rows.add(self.current)
        self.paused = None
        view.finished = True
        view.done = event.done
        view.leaf_grads = dict(event.leaf_grads)
        view.flow = tuple(event.flow)
        if event.error is not None and event.error != "quit":
            view.error = event.error
            view.failed_node = event.node
            if event.node is not None:
                change.rows.add(event.node)
                if event.failed_grads:
                    view.grad_outputs[event.node] = event.failed_grads
        if self.summaries and self.summaries[-1].index == view.index:
            self.summaries[-1] = view.summary()
        if view.recorded and view.total:
            graph = view.graph
            names = tuple(graph.nodes[n]["name"] if n in graph else "" for n in range(max(graph.nodes) + 1))
            self.norms.add(view.index, names, view.incoming_norms())
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

    # ---- what the header says ------------------------------------------------------------

    def pass_parts(self) -> tuple[HeaderPart, ...]:
        """The header's pass text in parts, each with how soon it goes when the line is short."""
        view = self.view
        if view is None:
            return ()
        parts = [HeaderPart(f"pass {view.index}", 0)]
        loss = view.loss_text()
        if loss:
            parts.append(HeaderPart(loss, 2))
        parts.append(HeaderPart(view.call_text or view.call + "()", 4))
        if not view.recorded:
            parts.append(HeaderPart("unhooked", 1))
        if self.browsed is not None and self.live is not None:
            parts.append(HeaderPart(f"browsing · live is {self.live.index}", 0))
        return tuple(parts)

    def pass_text(self) -> str:
        """`pass 3 · loss 0.41 · loss.backward()`, then `unhooked` or `browsing · live is 7`."""
        return " · ".join(part.text for part in self.pass_parts())

    def status_short(self) -> str:
        """The state text for a narrow header: `paused #1 (y)`, else as `status_text`."""
        view = self.live
        if self.status == "paused" and self.paused is not None:
            tags = node_tags(view.graph.nodes[self.paused.node]) if view is not None and self.paused.node in view.graph else []
            return f"paused #{self.paused.node}" + (f" ({tags[0]})" if tags else "")
        return self.status_text()

    def status_text(self) -> str:
        """`paused at #1 MulBackward0 (y)`, `running`, `finished · exit 0`..."""
        view = self.live
        if self.status == "paused" and self.paused is not None:
            where = view.title(self.paused.node) if view is not None else f"#{self.paused.node}"
            return f"paused {'at' if self.paused.phase == 'before' else 'after'} {where}"
        if self.status == "running":
            return "running"
        if self.status in ("finished", "failed"):
            if view is not None and view.error and view.failed_node is not None:
                return f"backward raised at #{view.failed_node} · exit {self.exit_status}"
            return f"{self.status} · exit {self.exit_status}"
        return self.status
