"""A captured pass's graph: a networkx DiGraph from the moment anyone reads it as one.

The hooks of a pass need only the nodes' NodeInfo list; the networkx view is for clients (the
UI, the report, `why`), and building it costs as much as walking the graph, and importing
networkx ~50 ms that a `--headless -c continue` run never needs. So a `LazyGraph` starts as
what makes that list, plus the node count: it says how many nodes it has and what one node's
NodeInfo is (`info`, what a headless pause prints) without networkx, and the first read of
anything else (a networkx method, `nodes`, iteration, `in`, `[]`, pickling) turns this very
object into an ordinary `networkx.DiGraph`, each node carrying its NodeInfo as its `"info"`
attribute and an edge per receiver (its data the last slot to it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

NodeInfo = Any
"""gradtui.protocol.nodes.NodeInfo (which imports this module): what the graph's nodes carry."""

INFO = "info"
"""The node attribute of a pass graph that holds the node's NodeInfo."""

_BUILDING = threading.Lock()
"""One build at a time: a client's thread and the script's can both reach an unbuilt graph."""


class LazyGraph:
    """A networkx DiGraph that is built the first time anyone reads it as one (see module doc).

    `infos` makes the nodes' NodeInfo list when first needed; `complete`, if given, is called
    once before that (a lazy capture's description, gradtui.engine.capture.graph.Capture.describe, fills
    the list in); `count` is the number of nodes. Once built, `type(graph) is networkx.DiGraph`.
    Another thread can build it under a reader's feet: the methods here read the object's state,
    never a LazyGraph attribute, so they answer either way.
    """

    def __init__(
        self,
        infos: Callable[[], list[NodeInfo]],
        complete: Callable[[], None] | None,
        count: int,
        attrs: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """`attrs`, if given, is read once the description is made: the built graph's `graph`
        attributes (what a pass says of all its nodes: the module its paths are relative to)."""
        self._lazy: tuple[Callable[[], list[NodeInfo]], Callable[[], None] | None] = (infos, complete)
        self._count = count
        self._attrs = attrs

    def info(self, node: int) -> NodeInfo:
        """Node `node`'s NodeInfo, as the built graph's `nodes[node]["info"]`, without building it."""
        with _BUILDING:
            state = self.__dict__
            if state.get("_lazy") is None:  # built meanwhile
                return state["_node"][node][INFO]
            return _described(state)[node]

    def infos(self) -> list[NodeInfo]:
        """Every node's NodeInfo, by node id, without building the graph (a recording's rows need
        no networkx graph: built, it would cost ~850 bytes a node more than the list)."""
        with _BUILDING:
            state = self.__dict__
            if state.get("_lazy") is None:  # built meanwhile
                return [data[INFO] for data in state["_node"].values()]
            return _described(state)

    def attributes(self) -> dict[str, Any]:
        """The graph's `graph` attributes (what the pass says of all its nodes), without building
        it: what the built graph's `graph` dict holds, the description made first."""
        with _BUILDING:
            state = self.__dict__
            if state.get("_lazy") is None:  # built meanwhile
                return dict(state["graph"])
            _described(state)
            attrs = state.get("_attrs")
            return dict(attrs()) if attrs is not None else {}

    def number_of_nodes(self) -> int:
        """How many nodes, without building the graph."""
        state = self.__dict__
        count = state.get("_count")
        return count if count is not None else len(state["_node"])

    def __len__(self) -> int:
        return LazyGraph.number_of_nodes(self)

    def _build(self) -> None:
        import networkx as nx  # here: a run whose graph nobody reads never imports networkx

        with _BUILDING:
            state = self.__dict__
            if state.get("_lazy") is None:
                return
            infos = _described(state)
            graph = nx.DiGraph()
            node, adj, pred = graph._node, graph._adj, graph._pred
            for i, info in enumerate(infos):  # the same NodeInfo: what the session reads is what clients read
                node[i] = {INFO: info}
                adj[i] = {}
                pred[i] = {}
            for here, info in enumerate(infos):  # one edge per receiver, the last slot to it named
                for slot, there in enumerate(info.next):
                    if there is not None:
                        adj[here][there] = pred[there][here] = {"slot": slot}
            attrs = state.pop("_attrs", None)
            if attrs is not None:
                graph.graph.update(attrs())
            state.update(graph.__dict__)
            self.__class__ = nx.DiGraph
            del state["_lazy"], state["_count"]

    def __getattr__(self, name: str) -> Any:
        # Only for what this object lacks: networkx's attributes (and any before __init__ has run).
        state = self.__dict__
        if "_lazy" not in state and "_node" not in state:
            raise AttributeError(name)
        LazyGraph._build(self)
        return getattr(self, name)

    def __iter__(self) -> Iterator[int]:
        LazyGraph._build(self)
        return iter(self)

    def __contains__(self, node: object) -> bool:
        LazyGraph._build(self)
        return node in self

    def __getitem__(self, node: int) -> Any:
        LazyGraph._build(self)
        return self[node]

    def __reduce_ex__(self, protocol: Any) -> Any:
        LazyGraph._build(self)
        return self.__reduce_ex__(protocol)


def _described(state: dict[str, Any]) -> list[NodeInfo]:
    """The NodeInfo list of an unbuilt LazyGraph's `state`, its description run first, once
    (the caller holds `_BUILDING`)."""
    infos, complete = state["_lazy"]
    if complete is not None:
        complete()
        state["_lazy"] = (infos, None)
    return infos()


def node_infos(graph: Any) -> list[NodeInfo]:
    """Every node's NodeInfo of a pass graph, by node id, built or not (a built one is not
    rebuilt; an unbuilt one stays unbuilt)."""
    if isinstance(graph, LazyGraph):
        return LazyGraph.infos(graph)
    return [data[INFO] for _, data in sorted(graph.nodes(data=True))]


def is_built(graph: Any) -> bool:
    """Whether `graph` is a networkx graph already (not a LazyGraph nobody has read as one)."""
    return not isinstance(graph, LazyGraph)
