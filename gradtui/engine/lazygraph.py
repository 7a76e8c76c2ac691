"""A networkx DiGraph built the first time anyone reads it (a captured pass's graph).

The hooks of a pass need only the nodes' NodeInfo list; the networkx view is for clients (the
UI, the report, `why`), and building it costs as much as walking the graph. `LazyGraph` holds
the list and the edge list, and becomes an ordinary DiGraph, each node carrying its NodeInfo as
its `"info"` attribute, on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import networkx as nx

from gradtui.model.nodes import INFO, NodeInfo


class _Built:
    """A data descriptor for one of DiGraph's storage attributes (`_node`, `_adj`, `_succ`,
    `_pred`): reading it builds a LazyGraph first; setting it is networkx's own."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._parent = nx.DiGraph.__dict__.get(name) or nx.Graph.__dict__.get(name)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        od = obj.__dict__
        if self._name not in od:
            obj._build(od["_lazy"])
        return od[self._name]

    def __set__(self, obj: Any, value: Any) -> None:
        if self._parent is not None and hasattr(self._parent, "__set__"):
            self._parent.__set__(obj, value)
        else:
            obj.__dict__[self._name] = value


class LazyGraph(nx.DiGraph):
    """A networkx DiGraph that is built the first time anyone reads it.

    A pass's hooks need only the nodes' NodeInfo list (`Capture.infos`); the networkx view is
    for clients (the UI, the report, `why`), and building it costs as much as the walk itself.
    So it starts as that list and the edge list and becomes an ordinary DiGraph, each node's
    `"info"` the list's NodeInfo, on first use (any attribute it does not have yet: `nodes`,
    `_succ`, ...). `number_of_nodes()` and `len()` answer without building it.
    """

    _node = _Built("_node")
    _adj = _Built("_adj")
    _succ = _Built("_succ")
    _pred = _Built("_pred")

    def __init__(self, infos: list[NodeInfo] | Callable[[], list[NodeInfo]],
                 edges: list[tuple[int, int, dict[str, int]]] | None,
                 complete: Callable[[], None] | None = None, count: int | None = None) -> None:
        """`infos`: the list, or what makes it when the graph is built (then `count` says how many).
        `edges`: (from, to, data); None: from each node's `next` ids (the slot in the data).
        `complete`: called once before the graph is first built, to finish `infos` (a lazy
        capture's description, gradtui.engine.graph.Capture.describe, replaces its items)."""
        # No DiGraph.__init__ here: `_build` runs it on first use.
        self.__dict__["_lazy"] = (infos, edges, complete, len(infos) if count is None else count)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        lazy = self.__dict__.get("_lazy")
        if lazy is None:
            raise AttributeError(name)
        self._build(lazy)
        return getattr(self, name)

    def _build(self, lazy: tuple[Any, list[tuple[int, int, dict[str, int]]] | None, Callable[[], None] | None, int]) -> None:
        infos, edges, complete, _ = lazy
        if complete is not None:
            complete()
        if callable(infos):
            infos = infos()
        nx.DiGraph.__init__(self)
        del self.__dict__["_lazy"]
        od = self.__dict__
        node, adj, pred = od["_node"], od["_adj"], od["_pred"]
        for i, info in enumerate(infos):  # the same NodeInfo: what the session reads is what clients read
            node[i] = {INFO: info}
            adj[i] = {}
            pred[i] = {}
        if edges is None:  # from each node's `next`: one edge per receiver, the last slot to it named
            for here, info in enumerate(infos):
                for slot, there in enumerate(info.next):
                    if there is not None:
                        adj[here][there] = pred[there][here] = {"slot": slot}
            return
        for here, there, data in edges:
            adj[here][there] = data
            pred[there][here] = data

    @property
    def built(self) -> bool:
        """Has the networkx graph been built (has someone read it)?"""
        return "_lazy" not in self.__dict__

    def number_of_nodes(self) -> int:
        lazy = self.__dict__.get("_lazy")
        return lazy[3] if lazy is not None else len(self._node)

    def __len__(self) -> int:
        return self.number_of_nodes()

    def __reduce__(self) -> Any:
        if not self.built:
            self._build(self.__dict__["_lazy"])
        return (nx.DiGraph, (), self.__dict__)
