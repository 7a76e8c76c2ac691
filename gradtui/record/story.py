"""The story a replay tells when it opens (`ReplayTarget.start`): the run as the live run told
it, read lazily from a recording of any size.

ScriptStarted, the texts of the notebook cells the run's nodes were made in (`SourceText`),
the output lines before the first pass and the last lines of the passes not listed, then the
last STORY_PASSES passes (a PassStarted, with its graph, its nodes' statistics and the run's
edits for the last few with per-node data and the call-site variables the run read in it, the
run's breakpoint hits in it, and a PassFinished with its flow), their output between them (a
transcript) or before them in one piece (a UI, which draws once per run of output). A pass is
told as the run told it: hooked or not, with its node count whether or not its graph is told.
Only those rows are read: the same few indexed queries whatever the recording's size
(tests/record/test_replay_open.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import networkx as nx

from gradtui.protocol import events as ev
from gradtui.record.reader import NodeStats, OutputLine, PassInfo, PassSpan, Recording, ran_in_order

STORY_PASSES = 200
"""The story tells the last this many passes (the passes view lists them); `pass N` shows any
pass, and the replay's `figures()` samples every pass for the plots."""

STORY_GRAPHS = 60
"""...with the graphs and statistics of the last this many of them with per-node data (as many
as the UI keeps norms of, for a node's norm over passes; `[` `]` browse them; the last of them
is the pass the replay pauses in), at most STORY_NODES nodes in all; the others' PassStarted has
an empty graph (`pass N` brings it)."""

STORY_NODES = 10_000
"""Nodes the story's graphs have at most, together (the open stays well under a second)."""

STORY_OUTPUT = 2000
"""Output lines the story tells at most of each part of the run: before its first pass, of the
passes it does not list (their last lines), of those it lists (their last lines)."""


@dataclass
class Story:
    """What `tell` read: the events, the pass rows it told, the span, the last walkable pass."""

    events: list[ev.Event]
    told: dict[int, PassInfo]
    span: PassSpan
    last: int | None
    """The last pass with per-node data and a node that ran (where the replay pauses), or None."""


def recorded_graph(rec: Recording, index: int, folder: str) -> nx.DiGraph:
    """Pass `index`'s recorded graph as a replay shows it: the `path` and `line` of each node's
    source relative to the script's `folder` (a recording keeps no saved tensors)."""
    return rec.graph(index, folder)


def recorded_sources(rec: Recording, folder: str) -> list[ev.SourceText]:
    """The cells' texts the run sent, each under the path a replay's nodes name its file by
    (a recording keeps a node's source as `FILE:LINE`: the file in the script's `folder`)."""
    return [ev.SourceText(os.path.join(folder, os.path.basename(text.path)), text.lines) for text in rec.sources()]


def pass_started(info: PassInfo, graph: nx.DiGraph) -> ev.PassStarted:
    """A recorded pass's PassStarted as the run told it (hooked or not, with its node count),
    with `graph` (empty: told without it)."""
    return ev.PassStarted(
        info.index,
        info.call,  # type: ignore[arg-type]
        info.call_text,
        info.call_site,
        graph,
        (0,) if graph.number_of_nodes() else (),
        info.losses,
        recorded=info.hooked,
        nodes=None if graph.number_of_nodes() else info.nodes,
        kept=info.per_node,
    )


def nodes_ran(
    index: int, walk: list[int], stats: dict[int, NodeStats], edits: dict[int, list[ev.GradEdited]] | None = None
) -> list[ev.Event]:
    """A NodeRan per recorded node of pass `index` that ran, in engine order, each after the
    run's edits of the gradient that arrived at it (`edits`, per node: the UI marks them)."""
    empty = NodeStats((), ())
    edits = edits or {}
    out: list[ev.Event] = []
    for position, node in enumerate(walk, 1):
        out += edits.get(node, ())
        out.append(
            ev.NodeRan(index, node, position, stats.get(node, empty).grad_outputs, stats.get(node, empty).grad_inputs)
        )
    return out


def pass_finished(info: PassInfo, flow: tuple[ev.ParamFlow, ...]) -> ev.PassFinished:
    """A recorded pass's PassFinished, with its flow."""
    return ev.PassFinished(info.index, info.done, info.nodes, info.error, info.failed_node, flow=flow)


def walkable(rec: Recording, after: int | None = None, *, last: bool = False) -> int | None:
    """The next pass after `after` (or the last pass) a replay can walk: per-node data, a row
    that can be read and a node that ran (a damaged pass is skipped), or None."""
    before = None
    while True:
        index = rec.walkable(after, last=last, before=before)
        if index is None or (rec.pass_info(index) is not None and rec.walk(index)):
            return index
        after, before = (after, index) if last else (index, before)


def _drawn(told: list[PassInfo], last: int | None) -> set[int]:
    """The passes whose graphs the story tells (see STORY_GRAPHS): the pass the replay pauses in
    brings its own graph, so it is left out, but counts."""
    drawn: set[int] = set()
    nodes = 0
    for info in reversed([p for p in told if p.per_node][-STORY_GRAPHS:]):
        nodes += info.nodes
        if nodes > STORY_NODES:
            break
        if info.index != last:
            drawn.add(info.index)
    return drawn


def _output(line: OutputLine) -> ev.Output:
    return ev.Output(line.stream, line.text)  # type: ignore[arg-type]


def tell(rec: Recording, script: str, argv: tuple[str, ...], output_in_passes: bool) -> Story:
    """The story of the recording `rec` of `script` (see module doc)."""
    span = rec.span()
    told = rec.last_passes(STORY_PASSES)
    folder = os.path.dirname(script)
    story: list[ev.Event] = [ev.ScriptStarted(script, argv), *recorded_sources(rec, folder)]
    lines = rec.output_story(told[0].index if told else None, STORY_OUTPUT)
    story += [_output(line) for line in lines.before + lines.earlier]
    if told and span.first is not None and told[0].index > span.first:
        story.append(
            ev.Output(
                "stderr",
                f"gradtui replay: passes {span.first}-{told[0].index - 1} are not "
                f"listed (plotted, and shown by pass N); the last {len(told)} follow\n",
            )
        )
    last = walkable(rec, last=True)
    drawn = _drawn(told, last)
    flows = rec.flows(told[0].index) if told else {}
    hits: dict[int, list[ev.Event]] = {}
    for hit in rec.hits(since=told[0].index) if told else []:
        hits.setdefault(hit["pass"], []).append(
            ev.BreakpointHit(hit["breakpoint"], hit["spec"], hit["pass"], hit["node"])
        )
    output: dict[int | None, list[ev.Event]] = {}
    for line in lines.told:
        output.setdefault(line.pass_index, []).append(_output(line))
    if not output_in_passes:
        story += [line for pass_lines in output.values() for line in pass_lines]
        output.clear()
    variables = rec.variables(min(drawn)) if drawn else {}
    edits: dict[int, dict[int, list[ev.GradEdited]]] = {}
    for edit in rec.grad_edits(since=min(drawn)) if drawn else []:
        edits.setdefault(edit.pass_index, {}).setdefault(edit.node, []).append(edit)
    for info in told:
        graph = recorded_graph(rec, info.index, folder) if info.index in drawn else nx.DiGraph()
        story.append(pass_started(info, graph))
        if graph.number_of_nodes():
            story += nodes_ran(info.index, ran_in_order(graph), rec.stats(info.index), edits.get(info.index))
            story += [variables[info.index]] if info.index in variables else []
        story += hits.pop(info.index, [])
        story.append(pass_finished(info, flows.get(info.index, ())))
        story += output.pop(info.index, [])
    for rest in output.values():
        story += rest
    return Story(story, {p.index: p for p in told}, span, last)
