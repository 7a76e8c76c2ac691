"""`ReplayTarget`: a DebugTarget over a recording (`gradtui replay run.db`), read-only.

A client (the UI, headless) sees the run's story as the live run told it (`gradtui.record.story`:
ScriptStarted, then per pass a PassStarted, with its graph where the recording has per-node
data, and a PassFinished with its flow; the script's output). Then the replay pauses in the
last pass with per-node data, where the run stopped in it (its first breakpoint hit), else at
its first node. `pass N` shows another recorded pass; `step`, `continue` and `finish` walk the
recorded nodes in engine order (the `order` column), stopping at breakpoints set with `break`
as a live run would; `print` and `flow` answer from the recorded statistics. The run's edits are
told (GradEdited, before the pause at the edited node or its NodeRan where the walk passes it):
the UI marks the node and shows the value before, headless says it. Nodes are told ran (NodeRan)
as the walk passes them, so no row after the pause is marked ran. A recording keeps statistics,
not tensors: edits, `print EXPR` and `why` are refused with a `read-only:` answer.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import networkx as nx

from gradtui.protocol import breakpoint_commands
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import NOT_MINE, Breakpoint, Breakpoints, Nan, matches_grads
from gradtui.protocol.commands import (
    Break,
    Command,
    CommandError,
    Continue,
    Delete,
    Finish,
    Flow,
    FlowOf,
    Help,
    ListBreakpoints,
    Print,
    Quit,
    ShowPass,
    Step,
)
from gradtui.protocol.nodes import node_info, node_title
from gradtui.protocol.stats import Stats, any_nonfinite, format_grads
from gradtui.record.ending import UNKNOWN_END
from gradtui.record.reader import (
    NodeStats,
    PassFigures,
    PassInfo,
    PassSpan,
    Recording,
    damage_text,
    open_recording,
    ran_in_order,
)
from gradtui.record.replay_text import (
    EDITS_REFUSED,
    READ_ONLY,
    flow_text,
    no_nodes,
    recorded_hits,
    refusal,
    replay_help,
)
from gradtui.record.story import pass_finished, pass_started, recorded_graph, tell, walkable
from gradtui.wire.target import TargetInfo

__all__ = ["READ_ONLY", "ReplayTarget", "open_recording"]

FIGURE_POINTS = 512
"""Passes `figures()` reads, evenly spread, and as many first non-finite ones (the plots draw
two points a column: a 256-column plot)."""


@dataclass
class _Shown:
    """The recorded pass on screen, where in its walk the replay is paused, and what stops the walk there."""

    info: PassInfo
    graph: nx.DiGraph
    stats: dict[int, NodeStats]
    walk: list[int]
    """The nodes that ran, in engine order."""
    at: int = 0
    """Position in `walk` of the paused node."""
    phase: str = "before"
    nan_seen: bool = False
    fired: frozenset[int] = frozenset()
    edits: dict[int, list[ev.GradEdited]] = field(default_factory=dict)
    """The run's edits of this pass, per node, in order."""
    told: set[int] = field(default_factory=set)
    """The nodes whose edits the replay has told (GradEdited) since it entered the pass."""
    ran: int = 0
    """How many nodes of `walk` the replay has told ran (NodeRan): those before the pause."""

    def grads(self, node: int) -> NodeStats:
        """What arrived at `node` (after the run's edits) and what it sent on, as recorded
        (nothing if it ran unrecorded)."""
        return self.stats.get(node, NodeStats((), ()))

    def arrived(self, node: int) -> tuple[Stats | None, ...]:
        """What arrived at `node` before the run edited it there (what a breakpoint saw), else as recorded."""
        edits = self.edits.get(node)
        return edits[0].before if edits else self.grads(node).grad_outputs

    def edits_of(self, node: int) -> list[ev.Event]:
        """The run's edits of `node`, once: the UI marks the node edited and keeps the value before."""
        if node in self.told or node not in self.edits:
            return []
        self.told.add(node)
        return list(self.edits[node])

    def run_to(self, end: int) -> list[ev.Event]:
        """NodeRan (after the node's edits) of the walk's nodes up to position `end`, those not told yet."""
        events: list[ev.Event] = []
        for position in range(self.ran, end):
            node = self.walk[position]
            got = self.grads(node)
            events += self.edits_of(node)
            events.append(ev.NodeRan(self.info.index, node, position + 1, got.grad_outputs, got.grad_inputs))
        self.ran = max(self.ran, end)
        return events

    def stops_before(self, breakpoints: Breakpoints) -> Breakpoint | None:
        """The breakpoint that stops before the paused node (a loss spec: at a pass's first node)."""
        node = self.walk[self.at]
        if self.at == 0:
            losses = self.info.losses
            bp = breakpoints.find_loss(losses, any(v is not None and v != v for v in losses))
            if bp is not None:
                return bp
        return breakpoints.find(
            node_info(self.graph, node),
            node,
            self.info.index,
            self.at == 0,
            self.arrived(node),
            self.nan_seen,
            self.fired,
        )

    def stops_after(self, breakpoints: Breakpoints, got: NodeStats) -> Breakpoint | None:
        """A `nan` breakpoint that stops after the paused node: it sent on a non-finite value."""
        seen = self.nan_seen or any_nonfinite(got.grad_outputs)
        return next(
            (bp for bp in breakpoints if Nan.of(bp.spec) and matches_grads(bp.spec, got.grad_inputs, seen)), None
        )

    def hit_reason(self, number: int, spec: str) -> str:
        """How the run's pause named a hit at the paused node: the node that made a non-finite
        gradient (a pause after it), or the spec and the node it matched."""
        title = node_title(self.graph, self.walk[self.at])
        if self.phase == "after":
            return f"breakpoint {number}: {title} made a non-finite gradient"
        return f"breakpoint {number}: {spec} at {title}"


class ReplayTarget:
    """A recording as a DebugTarget (see module doc)."""

    def __init__(self, path: str, *, output_in_passes: bool = True) -> None:
        """`output_in_passes`: the story tells each listed pass's output lines after it, as the
        run printed them (a transcript: headless); False: all of them before the passes, in
        order (a UI's output pane has no passes in it, and its client draws what is pending
        before each run of output: once, not once a pass)."""
        self.path = path
        self.output_in_passes = output_in_passes
        self.info = TargetInfo(path, kind="recording")
        self._ids = itertools.count(1)
        self._queue: asyncio.Queue[list[ev.Event] | None] = asyncio.Queue()
        self._rec: Recording | None = None
        self._passes: dict[int, PassInfo] = {}
        """The pass rows read so far (the story's, and those `pass N` showed)."""
        self._span = PassSpan(None, None)
        self._script = ""
        self._shown: _Shown | None = None
        self._over = False
        self._ending = False
        self.breakpoints = Breakpoints()
        self.damage: list[str] = []
        """What the replay found damaged in the recording (see `reader.Recording.damage`)."""

    # ---- the DebugTarget protocol ----------------------------------------------------------

    async def start(self) -> None:
        """Open the recording and queue the run's story (`gradtui.record.story`: only what it
        tells is read) and the first pause."""
        self._rec = rec = open_recording(self.path)
        self.damage = rec.damage  # the same list: it grows as the replay reads on
        run = rec.run()
        self._script = run.script or self.path
        self.info = TargetInfo(
            self._script, run.argv, None, "recording", {"recording": self.path, "edits_refused": EDITS_REFUSED}
        )
        story = tell(rec, self._script, run.argv, self.output_in_passes)
        self._span, last = story.span, story.last
        self._passes.update(story.told)
        self._queue.put_nowait(story.events)
        if self.damage:
            self._queue.put_nowait(
                [ev.CommandResult("", f"recording damaged: {damage_text(self.damage)}; the rest is replayed", ok=False)]
            )
        if last is None:
            why = "no pass has per-node data" if story.span.count else "no pass was recorded"
            self._queue.put_nowait([ev.CommandResult("", f"recording: {why}; nothing to walk", ok=False), *self._end()])
            self._close()
        else:
            self._queue.put_nowait(self._show(last, "recording"))

    def _pass(self, index: int) -> PassInfo | None:
        """Pass `index`'s row (read once, when first asked for)."""
        info = self._passes.get(index)
        if info is None and self._rec is not None:
            info = self._rec.pass_info(index)
            if info is not None:
                self._passes[index] = info
        return info

    def submit(self, command: Command) -> int:
        """Answer a command (parsed by the client; the events are queued at once); its request id."""
        request = next(self._ids)
        if self._over:
            return request
        match command:
            case Quit():
                self._quit()
            case _:
                self._queue.put_nowait(self._run(command, request))
                if self._ending:
                    self._close()
        return request

    async def batches(self) -> AsyncIterator[list[ev.Event]]:
        """The queued events, a batch at a time, until the replay ends."""
        while True:
            batch = await self._queue.get()
            if batch is None:
                return
            if batch:
                yield batch

    async def quit(self) -> None:
        """End the replay (the client quit)."""
        self._quit()

    def _quit(self) -> None:
        """The replay's one quit path (a typed `quit`, the client's quit): the script's end, as
        the user's, then the replay closes."""
        if not self._over:
            self._queue.put_nowait(self._end(by_user=True))
            self._close()

    async def detach(self) -> None:
        """A recording runs nowhere: detaching ends the replay."""
        self._close()

    def _close(self) -> None:
        if self._over:
            return
        self._over = True
        self._queue.put_nowait(None)
        if self._rec is not None:
            self._rec.close()
            self._rec = None

    def _end(self, by_user: bool = False) -> list[ev.Event]:
        """The script's end (as recorded; `by_user`: the user quit the replay): the replay closes
        once it is queued."""
        run = self._rec.run() if self._rec is not None else None
        self._ending = True
        if by_user:
            return [ev.ScriptFinished(0, None, True, self._span.count)]
        if run is None or run.finished is None or run.exit_status is None:  # the writer died first
            return [ev.ScriptFinished(None, None, False, self._span.count, how=UNKNOWN_END)]
        return [ev.ScriptFinished(run.exit_status, run.error, run.quit, self._span.count, how=run.how)]

    # ---- events from the recording --------------------------------------------------------

    def _graph(self, index: int) -> nx.DiGraph:
        assert self._rec is not None
        return recorded_graph(self._rec, index, os.path.dirname(self._script))

    def _finished(self, info: PassInfo) -> ev.PassFinished:
        assert self._rec is not None
        return pass_finished(info, self._rec.flow(info.index))

    def figures(self) -> list[PassFigures]:
        """Every recorded pass's figures for the plots (see `Recording.figures`); [] before start."""
        return self._rec.figures(FIGURE_POINTS) if self._rec is not None else []

    def param_stats(self, name: str, passes: list[int]) -> dict[int, Stats]:
        """The recorded gradient statistics of parameter `name` in `passes` (Recording.param_stats),
        for the gradients view's distributions; {} before start."""
        return self._rec.param_stats(name, passes) if self._rec is not None else {}

    def _enter(self, index: int) -> list[ev.Event]:
        """PassStarted of pass `index` and the call-site variables the run read in it (as the
        live agent sends them at a pass's first pause); the walk at its first node, no node run
        yet (a node is told ran, NodeRan, as the walk passes it, so no row after the pause is
        marked ran: in a pass the run stopped in, nor in one it finished)."""
        assert self._rec is not None
        info = self._pass(index)
        assert info is not None
        graph = self._graph(index)
        stats = self._rec.stats(index)
        walk = ran_in_order(graph)
        edits: dict[int, list[ev.GradEdited]] = {}
        for edit in self._rec.grad_edits(index):
            edits.setdefault(edit.node, []).append(edit)
        self._shown = _Shown(info, graph, stats, walk, edits=edits)
        told = self._rec.variables(index, index).get(index)
        return [pass_started(info, graph), *([told] if told is not None else [])]

    def _show(self, index: int, reason: str) -> list[ev.Event]:
        """`_enter` pass `index`, then pause: at the run's first breakpoint hit in it, else at its first node."""
        assert self._rec is not None
        events = self._enter(index)
        shown = self._shown
        assert shown is not None
        hit = next((h for h in self._rec.hits(index) if h["node"] in shown.walk), None)
        if hit is not None:
            shown.at = shown.walk.index(hit["node"])
            got = shown.grads(hit["node"])
            # a `nan` hit stopped after the node that made the non-finite value, others before it
            nan_here = (
                Nan.parse(hit["spec"]) is not NOT_MINE
                and any_nonfinite(got.grad_inputs)
                and not any_nonfinite(got.grad_outputs)
            )
            shown.phase = "after" if nan_here else "before"
            shown.nan_seen = nan_here or any_nonfinite(got.grad_outputs)
            reason = f"{reason}: the run stopped here: {shown.hit_reason(hit['breakpoint'], hit['spec'])}"
        else:
            reason = f"{reason}: pass {index}, its first node"
        events += shown.run_to(shown.at + (shown.phase == "after"))
        return events + self._paused(reason)

    def _paused(self, reason: str) -> list[ev.Event]:
        """The run's edits of the walk's node not told yet (GradEdited: the UI marks the node and
        keeps the value before, headless says it), then the pause there, with the gradient as
        the run left it (the edited one: the recording's)."""
        shown = self._shown
        assert shown is not None
        node = shown.walk[shown.at]
        got = shown.grads(node)
        grads = got.grad_outputs if shown.phase == "before" else got.grad_inputs
        return [
            *shown.edits_of(node),
            ev.Paused(
                shown.info.index,
                node,
                node_info(shown.graph, node).name,
                shown.phase,  # type: ignore[arg-type]
                reason,
                grads,
                shown.at + (shown.phase == "after"),
                shown.graph.number_of_nodes(),
            ),
        ]

    # ---- commands --------------------------------------------------------------------------

    def _run(self, command: Command, request: int) -> list[ev.Event]:
        """The events that answer `command`."""

        def answer(text: str, ok: bool = True) -> list[ev.Event]:
            return [ev.CommandResult(command.text, text, ok=ok, request=request)]

        shown = self._shown
        assert shown is not None, "commands come after start()"
        match command:
            case ShowPass(index=index):
                return self._pass_command(index, answer)
            case Step() | Continue() | Finish():
                return self._walk(command)
            case Print(expr=None):
                node = shown.walk[shown.at]
                got = shown.grads(node)
                lines = format_grads(got.grad_outputs, "before")
                if shown.phase == "after":
                    lines += format_grads(got.grad_inputs, "after")
                return answer("\n".join(lines) or "no gradients recorded")
            case FlowOf(index=index):
                if self._pass(index) is None:
                    return answer(f"no pass {index} in this recording", False)
                return answer(*flow_text(self._rec, index))
            case Flow():
                return answer(*flow_text(self._rec, shown.info.index))
            case Break() | Delete() | ListBreakpoints():
                return self._breakpoint_command(command, answer)
            case Help():
                return answer(replay_help())
            case _:
                return answer(refusal(command), False)

    def _breakpoint_command(self, command: Command, answer) -> list[ev.Event]:
        """`break`, `delete`, `breakpoints` on the replay's own breakpoints (the one handler)."""
        try:
            text = breakpoint_commands.answer(self.breakpoints, command, listing=lambda: recorded_hits(self._rec))
        except CommandError as exc:
            return answer(str(exc), False)
        assert text is not None
        changed = [self._breakpoints_changed()] if isinstance(command, breakpoint_commands.CHANGES) else []
        return [*answer(text), *changed]

    def _pass_command(self, index: int, answer) -> list[ev.Event]:
        assert self._rec is not None
        info = self._pass(index)
        if info is None and index in self._rec.unreadable:
            return answer(
                f"pass {index} cannot be read: the recording is damaged ({self._rec.unreadable[index]})", False
            )
        if info is None:
            last = self._span.last
            return answer(
                f"no pass {index} in this recording"
                + (f" (passes {self._span.first}-{last})" if last is not None else ""),
                False,
            )
        if not info.per_node or not self._rec.walk(index):
            return answer(no_nodes(self._rec, info), False)
        # the pause shown is the answer's picture; the answer itself follows, so a client feeding
        # commands knows its command was answered (every command that does not resume gets one)
        return [*self._show(index, "pass"), *answer(f"showing pass {index}", True)]

    def _walk(self, command: Step | Continue | Finish) -> list[ev.Event]:
        """Run the recorded nodes on from the pause, as `command` would, to the next pause: on into
        the next pass with per-node data when this one ends, the script's end after the last."""
        shown = self._shown
        assert shown is not None
        events: list[ev.Event] = [ev.Resumed(shown.info.index, command.verb)]
        running_on = isinstance(command, Continue)  # else it pauses at the next node (step) or pass (finish)
        while True:
            node = shown.walk[shown.at]
            got = shown.grads(node)
            if shown.phase == "before":
                shown.phase = "after"
                events += shown.run_to(shown.at + 1)
                if running_on and (bp := shown.stops_after(self.breakpoints, got)) is not None:
                    return events + self._hit(bp)
            shown.nan_seen = shown.nan_seen or any_nonfinite(got.grad_outputs) or any_nonfinite(got.grad_inputs)
            if shown.at + 1 < len(shown.walk):
                shown.at, shown.phase = shown.at + 1, "before"
                if isinstance(command, Step):
                    return events + self._paused(command.verb)
                if running_on and (bp := shown.stops_before(self.breakpoints)) is not None:
                    return events + self._hit(bp)
                continue
            events.append(self._finished(shown.info))
            assert self._rec is not None
            later = walkable(self._rec, after=shown.info.index)
            if later is None:
                return events + self._end()
            events += self._enter(later)
            shown = self._shown
            assert shown is not None
            if not running_on:
                return events + self._paused(command.verb)
            if (bp := shown.stops_before(self.breakpoints)) is not None:
                return events + self._hit(bp)

    def _hit(self, bp: Breakpoint) -> list[ev.Event]:
        shown = self._shown
        assert shown is not None
        bp.hits += 1
        shown.fired = shown.fired | {bp.number}
        return [
            ev.BreakpointHit(bp.number, bp.spec.text, shown.info.index, shown.walk[shown.at]),
            self._breakpoints_changed(),
            *self._paused(shown.hit_reason(bp.number, bp.spec.text)),
        ]

    def _breakpoints_changed(self) -> ev.BreakpointsChanged:
        return ev.BreakpointsChanged(tuple(ev.BreakpointInfo(b.number, b.spec, b.hits) for b in self.breakpoints))
