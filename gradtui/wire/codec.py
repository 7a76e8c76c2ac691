"""Events as plain data for the wire, and back: the one place that knows their wire form.

Every event is a frozen msgspec Struct (`PassStarted` a frozen dataclass) of numbers, strings,
tuples, nested Structs (`BreakpointInfo`, `Stats`, `ParamFlow`...) and, for `PassStarted`, a
networkx graph whose nodes carry their `NodeInfo`. `to_wire` turns one into
JSON-able data (a dataclass or Struct becomes a dict of its fields tagged with its class name
under `"$"`, a graph becomes networkx's node-link data, tuples become lists), and `from_wire`
rebuilds it (lists become tuples again, as the frozen events hold them). Floats stay
floats, NaN and infinities included: a NaN gradient is what users come to see.

A graph node's NodeInfo travels as its fields, untagged, beside the node's other attributes
(a replay's `order`): the node-link form the graph had when nodes were attribute dicts, so an
agent of that time and one of now send the same bytes, and either is read as NodeInfo; it is
also the smaller form, a 10,000-node pass's frame carrying no tag per node. That form is made
from NodeInfo's fields (`_node_info_codec`): a field added to NodeInfo travels as it is.

A pass's per-node and per-leaf results (a `NodesRan` batch's events, a `PassFinished`) travel
packed: their Structs as MessagePack bytes that msgspec writes and reads in C, beside the tag
(`{"$": "NodesRan", "pass_index": P, "count": N, "$packed": BYTES}`). Converted field by field
in Python they cost more than the backward pass that made them (the d=64 encoder's 671 nodes:
some 22 ms to encode and 25 ms to decode a pass's batch, against 0.6 ms and 1.3 ms packed), and
the agent's writer and an in-process reader share the script's GIL. A batch is unpacked when
its events are first read (`NodesRan.ran`). Packed values are bytes: this form is the wire's
(MessagePack), never a recording's JSON, which stores neither.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from gradtui.protocol import dist_events, errors
from gradtui.protocol import events as ev
from gradtui.protocol.lazygraph import LazyGraph
from gradtui.protocol.nodes import FIELDS, INFO, NodeInfo
from gradtui.protocol.stats import Stats

if TYPE_CHECKING:
    import networkx as nx

_TAG = "$"
_GRAPH = "$graph"
_PACKED = "$packed"

_PACK = msgspec.msgpack.Encoder()
_UNPACK_RAN = msgspec.msgpack.Decoder(tuple[ev.NodeRan, ...])
_UNPACKED: dict[str, tuple[type, msgspec.msgpack.Decoder[Any]]] = {
    "PassFinished": (ev.PassFinished, msgspec.msgpack.Decoder(ev.PassFinished)),
}
"""Tag -> (class, its decoder) for the events that travel whole as packed bytes (module doc)."""


def _classes() -> dict[str, type]:
    """Every dataclass and Struct that may travel: the events modules' (a pass's and a job's), what
    a script's end holds (its exception), and Stats."""
    found: dict[str, type] = {"Stats": Stats}
    for module in (ev, dist_events, errors):
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and (dataclasses.is_dataclass(value) or issubclass(value, msgspec.Struct))
                and value is not ev.NodesRan
            ):
                found[name] = value
    return found


CLASSES = _classes()
"""Wire tag -> class."""

_FIELDS = {
    cls: cls.__struct_fields__ if issubclass(cls, msgspec.Struct) else tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]  # _classes took only dataclasses
    for cls in CLASSES.values()
}

_RENAMED = {
    ev.PassStarted: ("index", "pass_index"),
    ev.PassFinished: ("index", "pass_index"),
    ev.PassPrints: ("index", "pass_index"),
}
"""Fields an earlier wire form named otherwise (old, new): read under either name."""


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""The types `to_wire` and `from_wire` give back as they are. A statistic's listed values are
tuples of hundreds of floats, a frame holds hundreds of them: such a sequence is copied whole
(one test of its elements' types, in C), not converted element by element."""


def to_wire(value: Any) -> Any:
    """JSON-able data for an event (or any value an event holds)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (tuple, list)):
        if _SCALARS.issuperset(map(type, value)):
            return list(value)
        return [to_wire(v) for v in value]
    if type(value) is ev.NodesRan:  # a batch made on demand: its events travel packed
        return {
            _TAG: "NodesRan",
            "pass_index": value.pass_index,
            "count": value.count,
            _PACKED: _PACK.encode(value.ran),
        }
    if type(value) is ev.PassFinished:
        return {_TAG: "PassFinished", _PACKED: _PACK.encode(value)}
    fields = _FIELDS.get(type(value))
    if fields is not None:
        out = {_TAG: type(value).__name__}
        scalars = _SCALARS
        for name in fields:
            field = getattr(value, name)
            out[name] = field if type(field) in scalars else to_wire(field)
        return out
    if isinstance(value, dict):
        return {str(k): to_wire(v) for k, v in value.items()}
    # A graph: a LazyGraph (built by being read) or one networkx made, which only a process that
    # has imported networkx can hold.
    nx = sys.modules.get("networkx")
    if type(value) is LazyGraph or (nx is not None and isinstance(value, nx.Graph)):
        return {_GRAPH: _graph_data(value)}
    raise TypeError(f"{type(value).__name__} cannot travel on the wire")


def from_wire(data: Any) -> Any:
    """The value `to_wire` made `data` from."""
    if isinstance(data, list):
        if _SCALARS.issuperset(map(type, data)):
            return tuple(data)
        return tuple(from_wire(v) for v in data)
    if not isinstance(data, dict):
        return data
    tag = data.get(_TAG)
    if tag is not None:
        if tag == "NodesRan":
            packed = data[_PACKED]
            return ev.NodesRan(data["pass_index"], data["count"], lambda: _UNPACK_RAN.decode(packed))
        if (unpacked := _UNPACKED.get(tag)) is not None and _PACKED in data:
            return unpacked[1].decode(data[_PACKED])
        cls = CLASSES.get(tag)
        if cls is None:
            raise ValueError(f"unknown wire type {tag!r}")
        scalars = _SCALARS
        fields = {k: v if type(v) in scalars else from_wire(v) for k, v in data.items() if k != _TAG}
        if (renamed := _RENAMED.get(cls)) is not None and renamed[0] in fields:
            fields[renamed[1]] = fields.pop(renamed[0])
        return cls(**fields)
    graph = data.get(_GRAPH)
    if graph is not None:
        return _graph(graph)
    return {k: from_wire(v) for k, v in data.items()}


def _graph_data(graph: nx.Graph) -> dict[str, Any]:
    """A pass graph as networkx's node-link data (`nx.node_link_data(graph, edges="edges")`'s
    shape), each node's NodeInfo spelled out as its fields."""
    nodes = []
    for n, attrs in graph.nodes(data=True):
        info = attrs.get(INFO)
        if info is None:
            node = dict(attrs)
        else:
            node = _info_fields(info)
            if len(attrs) > 1:
                node.update((k, v) for k, v in attrs.items() if k != INFO)
        node["id"] = n
        nodes.append(node)
    return {
        "directed": graph.is_directed(),
        "multigraph": graph.is_multigraph(),
        "graph": graph.graph,
        "nodes": nodes,
        "edges": [{**d, "source": u, "target": v} for u, v, d in graph.edges(data=True)],
    }


_FIELD_SET = frozenset(FIELDS)


def _node_info_codec() -> tuple[Callable[[NodeInfo], dict[str, Any]], Callable[[dict[str, Any]], NodeInfo]]:
    """NodeInfo's wire form, written from its fields (`FIELDS`, so a new field travels with no
    change here): a function that spells a NodeInfo out as the dict of its fields, and one that
    makes it again from that dict. Generated as source, as `dataclasses` makes `__init__`, so each
    is the plain dict display and call it would be if written out by hand (a loop over the fields
    costs twice as much, on every node of a 10,000-node graph frame). Read back, a field the dict
    lacks (a frame from an agent that had no such field) is its default, or None where its type
    allows None; a tuple field (a list on the wire) is a tuple again."""
    spelled, made = [], []
    for field in dataclasses.fields(NodeInfo):
        name = field.name
        assert name.isidentifier()  # the generated source names it
        spelled.append(f"{name!r}: info.{name}")
        if field.default is not dataclasses.MISSING:
            read = f"get({name!r}, {field.default!r})"
        elif "None" in str(field.type):
            read = f"get({name!r})"
        else:
            read = f"node[{name!r}]"
        made.append(f"tuple({read})" if str(field.type).startswith("tuple") else read)
    source = (
        f"def spell(info):\n    return {{{', '.join(spelled)}}}\n"
        f"def make(node):\n    get = node.get\n    return NodeInfo({', '.join(made)})\n"
    )
    namespace: dict[str, Any] = {"NodeInfo": NodeInfo}
    exec(compile(source, "<NodeInfo wire form>", "exec"), namespace)
    return namespace["spell"], namespace["make"]


_info_fields, _info_of = _node_info_codec()


def _node_attrs(node: dict[str, Any]) -> dict[str, Any]:
    """A node-link node's attributes: its NodeInfo under "info" (its list fields tuples again),
    the rest (a replay's `order`) as they came."""
    if "name" not in node:  # a node with no NodeInfo
        return {k: v for k, v in node.items() if k != "id"}
    attrs = {INFO: _info_of(node)}
    if len(node) > len(FIELDS) + 1:  # more than the fields and the id
        attrs.update((k, v) for k, v in node.items() if k != "id" and k not in _FIELD_SET)
    return attrs


def _graph(data: dict[str, Any]) -> nx.DiGraph:
    """A pass graph from node-link data, each node's NodeInfo made again.

    The collector is off meanwhile, as in a capture: a 10,000-node graph is tens of thousands
    of new objects and no garbage, and the collections they would trigger walk the whole heap."""
    import networkx as nx

    collecting = gc.isenabled()
    gc.disable()
    try:
        graph = nx.DiGraph()
        graph.graph.update(data.get("graph") or {})
        # In bulk: networkx's per-call checks cost as much as the dicts themselves on a 10k pass.
        graph.add_nodes_from((node["id"], _node_attrs(node)) for node in data["nodes"])
        graph.add_edges_from(
            (edge["source"], edge["target"], {k: v for k, v in edge.items() if k != "source" and k != "target"})
            for edge in data["edges"]
        )
        return graph
    finally:
        if collecting:
            gc.enable()
