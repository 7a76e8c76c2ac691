"""A captured node as plain data (`NodeInfo`), and helpers over a captured graph: how nodes are
named, and the order the engine runs them in. No torch here: clients (the UI, `gradtui attach`,
a replay) use them on the graph they received over the wire or read from a recording.

A pass's graph is a networkx DiGraph (the topology: edges, algorithms) whose node `n` carries
its NodeInfo under the one attribute `INFO`: `graph.nodes[n]["info"]`, or `node_info(graph, n)`
(which answers a captured pass's LazyGraph without building it).
"""

from __future__ import annotations

import heapq
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from typing import TYPE_CHECKING, Any

from gradtui.protocol.lazygraph import INFO, LazyGraph  # INFO: its readers take it from here

if TYPE_CHECKING:
    import networkx as nx


ROOT_KEY = "module_root"
"""Graph attribute of a pass: the root module whose lead its module paths are shown without
(`model`, whose `model.encoder.layers.3` is shown `encoder.layers.3`); absent if none is."""
ROOT_CHILDREN_KEY = "module_root_children"
"""Graph attribute of a pass: the first parts of the module paths shown without the root's lead
(`encoder`, `lm_head`): the module tree puts them under the root, its own ops above them."""


@dataclass(slots=True, unsafe_hash=True, init=False)
class NodeInfo:
    """One autograd node of a captured pass, as plain data that outlives the pass.

    Immutable and hashable by value, as a frozen dataclass is, with Stats' faster `__init__`
    (a capture makes one per node). A lazy capture makes it from the walk alone (`walked`: name,
    kind, seq, next; a leaf's labels and param) and replaces it once described.
    """

    name: str
    """Op name without the `torch::autograd::` prefix, e.g. "AddmmBackward0"."""
    kind: str
    """"accumulate" (leaf accumulator), "op", "custom" (autograd.Function), "opaque"."""
    seq: int | None
    """Autograd's sequence number: the engine runs ready nodes highest first (None: not recorded)."""
    next: tuple[int | None, ...]
    """Per `next_functions` slot, the node id gradient goes to (None for no node); unlike the
    graph's edges this keeps repeats, e.g. both slots of `x * x`."""
    labels: tuple[str, ...] = ()
    """Variable names whose tensor this node made (or, for a leaf, is)."""
    param: str | None = None
    """For an accumulator of an nn.Parameter: its name, e.g. "fc.weight"."""
    source: str | None = None
    """"file.py:LINE" of the user code that made the node (None if unknown)."""
    path: str | None = None
    """The full path behind `source` (None if unknown)."""
    line: int | None = None
    """The line number behind `source` (None if unknown)."""
    module: str | None = None
    """Dotted path of the nn.Module whose forward made it, e.g. "encoder.layers.3"."""
    saved: tuple[str, ...] = ()
    """"name [shape] dtype" / "name = value" per saved value of the node."""

    def __init__(
        self,
        name: str,
        kind: str,
        seq: int | None,
        next: tuple[int | None, ...],
        labels: tuple[str, ...] = (),
        param: str | None = None,
        source: str | None = None,
        path: str | None = None,
        line: int | None = None,
        module: str | None = None,
        saved: tuple[str, ...] = (),
    ) -> None:
        _SET_NAME(self, name)
        _SET_KIND(self, kind)
        _SET_SEQ(self, seq)
        _SET_NEXT(self, next)
        _SET_LABELS(self, labels)
        _SET_PARAM(self, param)
        _SET_SOURCE(self, source)
        _SET_PATH(self, path)
        _SET_LINE(self, line)
        _SET_MODULE(self, module)
        _SET_SAVED(self, saved)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getattr__(self, name: str) -> Any:
        # Only for a slot `walked` left unset: it reads as the field's default.
        try:
            return _UNSET[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __reduce__(self) -> Any:
        return (NodeInfo, tuple(getattr(self, name) for name in FIELDS))

    def described(
        self,
        labels: tuple[str, ...],
        param: str | None,
        source: str | None,
        path: str | None,
        line: int | None,
        module: str | None,
        saved: tuple[str, ...],
    ) -> NodeInfo:
        """This node with its description (what `dataclasses.replace(self, labels=..., ...)` gives,
        made without its per-call cost: a lazy capture's description makes one per node)."""
        info = _new(NodeInfo)
        _SET_NAME(info, self.name)
        _SET_KIND(info, self.kind)
        _SET_SEQ(info, self.seq)
        _SET_NEXT(info, self.next)
        _SET_LABELS(info, labels)
        _SET_PARAM(info, param)
        _SET_SOURCE(info, source)
        _SET_PATH(info, path)
        _SET_LINE(info, line)
        _SET_MODULE(info, module)
        _SET_SAVED(info, saved)
        return info

    def with_seq(self, seq: int | None) -> NodeInfo:
        """This node with another sequence number (what `dataclasses.replace(self, seq=seq)`
        gives, without its per-call cost): a client makes one per node of a pass whose
        description only its sequence numbers tell apart from the pass before (gradtui.wire.passgraphs)."""
        info = _new(NodeInfo)
        _SET_NAME(info, self.name)
        _SET_KIND(info, self.kind)
        _SET_SEQ(info, seq)
        _SET_NEXT(info, self.next)
        _SET_LABELS(info, self.labels)
        _SET_PARAM(info, self.param)
        _SET_SOURCE(info, self.source)
        _SET_PATH(info, self.path)
        _SET_LINE(info, self.line)
        _SET_MODULE(info, self.module)
        _SET_SAVED(info, self.saved)
        return info

    @property
    def tags(self) -> list[str]:
        """The names the node goes by: its variable labels, then its parameter name."""
        return [*self.labels, *([self.param] if self.param else [])]


FIELDS: tuple[str, ...] = tuple(field.name for field in fields(NodeInfo))
"""NodeInfo's fields, in order (its wire form, gradtui.wire.codec's, is made from them)."""

(
    _SET_NAME,
    _SET_KIND,
    _SET_SEQ,
    _SET_NEXT,
    _SET_LABELS,
    _SET_PARAM,
    _SET_SOURCE,
    _SET_PATH,
    _SET_LINE,
    _SET_MODULE,
    _SET_SAVED,
) = (NodeInfo.__dict__[name].__set__ for name in FIELDS)

_UNSET: dict[str, Any] = {field.name: field.default for field in fields(NodeInfo) if field.default is not MISSING}
"""The defaults of the fields `walked` may leave unset (every field with a default)."""

_new = object.__new__


def walked(
    name: str,
    kind: str,
    seq: int | None,
    next: tuple[int | None, ...],
    labels: tuple[str, ...] | None = None,
    param: str | None = None,
) -> NodeInfo:
    """`NodeInfo(name, kind, seq, next, labels or (), param)`, made as a capture's walk makes one
    per node (the hot path of a pass in `continue`): only the slots given are written, the rest
    read as their defaults, at a third of `__init__`'s cost. Equal, hashed, printed and pickled
    as the NodeInfo it stands for."""
    info = _new(NodeInfo)
    _SET_NAME(info, name)
    _SET_KIND(info, kind)
    _SET_SEQ(info, seq)
    _SET_NEXT(info, next)
    if labels is not None:
        _SET_LABELS(info, labels)
        _SET_PARAM(info, param)
    return info


def node_info(graph: nx.DiGraph, node: int) -> NodeInfo:
    """Node `node`'s NodeInfo in a pass graph (a LazyGraph nobody has read is not built for it)."""
    if type(graph) is LazyGraph:
        return graph.info(node)
    return graph.nodes[node][INFO]


def engine_order(graph: nx.DiGraph) -> list[int]:
    """Predict the order in which the CPU engine runs the nodes.

    The engine runs a node once all its consumers have run; among ready nodes it takes the
    highest sequence number first (accumulators have the largest), as this simulation does.
    """
    waiting = dict(graph.in_degree())
    nodes = graph.nodes
    ready = [(-nodes[n][INFO].seq, n) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for nxt in graph.successors(node):
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, (-nodes[nxt][INFO].seq, nxt))
    return order


def info_title(info: NodeInfo, node: int) -> str:
    """`#17 AddmmBackward0 (h, fc2)`: how node `node`, described by `info`, is named in messages."""
    tags = info.tags
    suffix = f" ({', '.join(tags)})" if tags else ""
    return f"#{node} {info.name}{suffix}"


def node_title(graph: nx.DiGraph, node: int) -> str:
    """`info_title` of a pass graph's node."""
    return info_title(node_info(graph, node), node)
