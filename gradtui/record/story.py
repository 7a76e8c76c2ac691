"""The story a replay tells when it opens (`ReplayTarget.start`): the run as the live run told
it, read lazily from a recording of any size.

ScriptStarted, the output lines before the first pass and the last lines of the passes not
listed, then the last STORY_PASSES passes (a PassStarted, with its graph for the last few with
per-node data, and a PassFinished with its flow), their output between them (a transcript) or
before them in one piece (a UI, which draws once per run of output). Only those rows are read:
the same few indexed queries whatever the recording's size (tests/record/test_replay_open.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import networkx as nx

from gradtui.model import events as ev
from gradtui.record.reader import OutputLine, PassInfo, PassSpan, Recording

STORY_PASSES = 200
"""The story tells the last this many passes (the passes view lists them); `pass N` shows any
pass, and the replay's `figures()` samples every pass for the plots."""

STORY_GRAPHS = 5
"""...with the graphs of the last this many of them with per-node data (`[` `]` browse them;
a `--flight 5` recording has five, the last of them the pass the replay pauses in); the
others' PassStarted has an empty graph (`pass N` brings it)."""

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
    """Pass `index`'s recorded graph with the attributes a live capture has that a recording
    lacks (`path` and `line` of its source, relative to the script's `folder`; no saved tensors)."""
    graph = rec.graph(index)
    for _, data in graph.nodes(data=True):
        source = data.get("source")
        file, _, line = (source or "").rpartition(":")
        number = bool(source) and line.isascii() and line.isdigit()  # int() refuses '²', isdigit does not
        data["path"] = os.path.join(folder, file) if number else None
        data["line"] = int(line) if number else None
        data.setdefault("saved", ())
    return graph


def pass_started(info: PassInfo, graph: nx.DiGraph, listed: bool = False) -> ev.PassStarted:
    """A recorded pass's PassStarted; `listed`: one with per-node data told without its graph."""
    return ev.PassStarted(info.index, info.call, info.call_text, info.call_site,  # type: ignore[arg-type]
                          graph, (0,) if graph.number_of_nodes() else (), info.losses,
                          recorded=info.per_node and (listed or graph.number_of_nodes() > 0))


def pass_finished(info: PassInfo, flow: tuple[ev.ParamFlow, ...]) -> ev.PassFinished:
    """A recorded pass's PassFinished, with its flow."""
    return ev.PassFinished(info.index, info.done, info.nodes, info.error, info.failed_node, flow=flow)


def _output(line: OutputLine) -> ev.Output:
    return ev.Output(line.stream, line.text)  # type: ignore[arg-type]


def tell(rec: Recording, script: str, argv: tuple[str, ...], output_in_passes: bool) -> Story:
    """The story of the recording `rec` of `script` (see module doc)."""
    span = rec.span()
    told = rec.last_passes(STORY_PASSES)
    story: list[ev.Event] = [ev.ScriptStarted(script, argv)]
    lines = rec.output_story(told[0].index if told else None, STORY_OUTPUT)
    story += [_output(line) for line in lines.before + lines.earlier]
    if span.count > len(told):
        story.append(ev.Output("stderr", f"gradtui replay: passes {span.first}-{told[0].index - 1} are not "
                               f"listed (plotted, and shown by pass N); the last {len(told)} follow\n"))
    last = rec.walkable(last=True)
    # the pass the replay pauses in brings its own graph: the story draws the ones before it
    drawn = {p.index for p in [p for p in told if p.per_node and p.index != last][-(STORY_GRAPHS - 1):]}
    flows = rec.flows(told[0].index) if told else {}
    output: dict[int | None, list[ev.Event]] = {}
    for line in lines.told:
        output.setdefault(line.pass_index, []).append(_output(line))
    if not output_in_passes:
        story += [line for pass_lines in output.values() for line in pass_lines]
        output.clear()
    folder = os.path.dirname(script)
    for info in told:
        graph = recorded_graph(rec, info.index, folder) if info.index in drawn else nx.DiGraph()
        story.append(pass_started(info, graph, listed=info.index not in drawn))
        story.append(pass_finished(info, flows.get(info.index, ())))
        story += output.pop(info.index, [])
    for rest in output.values():
        story += rest
    return Story(story, {p.index: p for p in told}, span, last)
