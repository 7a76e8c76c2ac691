"""A pass's description sent once per connection while it stays the same.

A training loop's passes walk the same graph: every `PassStarted` carries the description of
every node (name, labels, module, source, saved values' shapes and scalars), which on the d=64
encoder's 671 nodes costs the agent's writer ~1.8 ms to convert and a client ~5 ms to decode
and make again, a third of the backward pass itself. What tells two such passes apart is most
often only the nodes' sequence numbers (each pass's ops are numbered anew).

So, on one connection, the writer (`GraphsSent`) compares each pass's description with the last
one it sent: where every node's NodeInfo is the same but for its sequence number, and the
pass's graph attributes are the same, the pass's graph travels as
`{"$graphof": P, "seqs": [...]}`: "pass P's graph, these sequence numbers". Anything else that
differs (a saved shape of a last, smaller batch, a label, one node more) sends the whole graph.
The comparison is of the described NodeInfo the pass sends, field by field, never a guess from
the walk's shape: what the client makes (`GraphsRead`) is exactly what the whole graph would
have given. Both ends keep the last pass's description only (a pass sent without one,
`described=False`, changes nothing), and a new connection starts with none (its first pass is
sent whole); the reader refuses a reference to a pass it does not hold.

Only a graph the agent has not yet built as a networkx graph (a `LazyGraph`: nodes 0..N-1, each
with its NodeInfo only, an edge per receiver) is sent so, and a client's graph made from a
reference is one too, so both ends' graphs have that shape.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from gradtui.protocol import events as ev
from gradtui.protocol.lazygraph import LazyGraph, node_infos
from gradtui.protocol.nodes import FIELDS, NodeInfo
from gradtui.wire.codec import from_wire, to_wire
from gradtui.wire.protocol import ProtocolError

_REFERENCE = "$graphof"
_SEQS = "seqs"

_BUT_SEQ = operator.attrgetter(*(name for name in FIELDS if name != "seq"))
"""A NodeInfo's fields but its sequence number, as one tuple (made in C)."""


class GraphsSent:
    """The writer's side, one per connection: events to wire data, a pass whose description is
    the last one's but for sequence numbers sent as a reference to it (see module doc)."""

    def __init__(self) -> None:
        self._last: tuple[int, list[tuple[Any, ...]], dict[str, Any]] | None = None
        """The last pass sent: its index, its nodes' fields but the sequence numbers, its graph
        attributes (None: none sent yet, or one whose graph was not a LazyGraph)."""
        self.referenced = 0
        """How many passes were sent as a reference to the pass before."""

    def to_wire(self, event: ev.Event) -> Any:
        """`event` as wire data (`codec.to_wire`'s, but for a repeated description)."""
        if type(event) is not ev.PassStarted:
            return to_wire(event)
        if not event.described:  # no graph: the last description sent stays the one to refer to
            return to_wire(event)
        graph = event.graph
        if type(graph) is not LazyGraph:
            self._last = None
            return to_wire(event)
        infos = LazyGraph.infos(graph)
        attrs = LazyGraph.attributes(graph)
        shape = list(map(_BUT_SEQ, infos))
        last, self._last = self._last, (event.pass_index, shape, attrs)
        if last is None or last[1] != shape or last[2] != attrs:
            return to_wire(event)
        data = to_wire(dataclasses.replace(event, graph=None))
        data["graph"] = {_REFERENCE: last[0], _SEQS: [info.seq for info in infos]}
        self.referenced += 1
        return data


class GraphsRead:
    """The reader's side, one per connection: wire data to events, a pass sent as a reference to
    the pass before made with that pass's description (see module doc)."""

    def __init__(self) -> None:
        self._last: tuple[int, list[NodeInfo], dict[str, Any]] | None = None
        """The last pass read: its index, its nodes' NodeInfo, its graph attributes."""

    def from_wire(self, data: Any) -> Any:
        """The event `data` is (`codec.from_wire`'s, and a pass's graph made from a reference)."""
        if not isinstance(data, dict) or data.get("$") != "PassStarted" or data.get("described") is False:
            return from_wire(data)
        graph = data.get("graph")
        if isinstance(graph, dict) and _REFERENCE in graph:
            infos, attrs = self._referenced(graph)
            event = from_wire({**data, "graph": None})
            event = dataclasses.replace(event, graph=LazyGraph(lambda: infos, None, len(infos), lambda: attrs))
        else:
            event = from_wire(data)
            made = event.graph
            try:
                infos = node_infos(made)
            except KeyError:  # a node without its NodeInfo: no later pass refers to this one
                self._last = None
                return event
            attrs = LazyGraph.attributes(made) if type(made) is LazyGraph else dict(made.graph)
        self._last = (event.pass_index, infos, attrs)
        return event

    def _referenced(self, graph: dict[str, Any]) -> tuple[list[NodeInfo], dict[str, Any]]:
        """The NodeInfo and attributes of a graph sent as a reference to the last pass read."""
        last, seqs = self._last, graph.get(_SEQS)
        if last is None or last[0] != graph[_REFERENCE] or not isinstance(seqs, list) or len(seqs) != len(last[1]):
            held = "none" if last is None else f"pass {last[0]}'s"
            raise ProtocolError(f"a pass's graph refers to pass {graph[_REFERENCE]}'s, this client holds {held}")
        return [info.with_seq(seq) for info, seq in zip(last[1], seqs)], dict(last[2])
