"""What a pass's fingerprints decide per node once per graph shape (gradtui.engine.fingerprints.values).

Each pass, PassPrints asks of every node it notes the same questions: which node each gradient
it sends goes to, which node of the pass made each tensor it saved (that node's forward output)
or that none did (a leaf value), which of its inputs are a parameter seen another way
(`leafish`, against a reference), whether its op only moves elements. The answers depend only
on the graph (node types, edges, discovery order), not on the values: a `GraphPlan` keeps them
per node, keyed like the hook plan by the captured graph's shape (`graph_key`), made at the
first pass of a graph as its nodes run and reused while the graph stays the same. What depends
on the values (is a received gradient the very tensor sent, its version, a view's layout, a
saved argument's value) is still looked at every pass.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

from gradtui.engine.fingerprints.moves import leafish, moves_values

_SKIPPED_SUFFIXES = ("_sym_sizes", "_sym_strides", "_sym_numel", "_sizes", "_strides", "_numel")
"""Saved attributes that describe shapes (already in the statistics): not fingerprinted."""

_saved_names: dict[type, tuple[str, ...]] = {}


def saved_names(fn: Any) -> tuple[str, ...]:
    """The `_saved_*` attributes of a node's type (its saved values), cached per type."""
    kind = type(fn)
    names = _saved_names.get(kind)
    if names is None:
        names = _saved_names[kind] = tuple(
            n for n in dir(fn) if n.startswith("_saved_") and not n.endswith(_SKIPPED_SUFFIXES)
        )
    return names


class Saved(NamedTuple):
    """One saved attribute of a node: its number among them, its attribute, its name as printed
    (`mat2`), and, once a pass read a tensor there, the node of the pass that made it (None:
    none did, a leaf value) with the text of that node's OUTPUT print."""

    number: int
    attribute: str
    name: str
    known: bool = False
    """Has a pass read a tensor there (and `producer` is its producer)?"""
    producer: int | None = None
    text: str = ""


class NodeFacts(NamedTuple):
    """What the graph fixes about one node's fingerprints (see module doc)."""

    name: str
    moves: int
    """gradtui.engine.fingerprints.moves.moves_values."""
    consumers: tuple[tuple[int, int] | None, ...]
    """Per `next_functions` slot: (node of the pass, its input) the gradient goes to, or None."""
    producers: tuple[int | None, ...]
    """Per `next_functions` slot, for a comparison: the node of the pass that made that input
    (None: no input, or a leaf's accumulator)."""
    cast: tuple[bool, ...]
    """Per `next_functions` slot: is that input a parameter seen another way (`leafish`)?"""
    inputs: tuple[int, int]
    """How many `next_functions` it has, and how many of them are not None."""
    saved: tuple[Saved, ...]
    """Its saved attributes, tensors first known where a pass read them (`GraphPlan.saved`)."""


def graph_key(nodes: Sequence[Any], slots: Sequence[Sequence[tuple[int, int] | None]]) -> tuple:
    """A captured graph's shape: its nodes' types in discovery order and where each sends its
    gradients (gradtui.engine.capture.graph.Capture.slots): two passes with one key have the same facts."""
    return tuple(map(type, nodes)), tuple(map(tuple, slots))


class GraphPlan:
    """The NodeFacts of one graph shape's nodes, each made the first time a pass notes it."""

    def __init__(self, size: int) -> None:
        self.known: list[NodeFacts | None] = [None] * size
        """Per node, its NodeFacts once made (None: not yet; read by a pass, written here only)."""
        self.made = 0
        """Nodes whose facts were made (not reused): a count the tests assert."""
        self._with_saved: tuple[int, ...] | None = None
        """The nodes with saved attributes, once every node's facts are made (`with_saved`)."""

    def with_saved(self, nodes: Sequence[Any], ids: dict[int, int]) -> tuple[int, ...]:
        """The nodes (ascending) that have saved attributes, every node's facts made where a pass
        had not (`nodes`: the pass's autograd nodes): which nodes save something is the same in
        every pass of this graph, so the list is made once and a pass's end visits only those."""
        found = self._with_saved
        if found is None:
            found = self._with_saved = tuple(node for node, fn in enumerate(nodes) if self.facts(node, fn, ids).saved)
        return found

    def facts(self, node: int, fn: Any, ids: dict[int, int]) -> NodeFacts:
        """`node`'s facts (`fn` its autograd node, `ids`: id of a node object -> its node id)."""
        found = self.known[node]
        if found is None:
            found = self.known[node] = _facts(fn, ids)
            self.made += 1
        return found

    def saved(self, node: int, number: int, producer: int | None) -> Saved:
        """Note that `node`'s saved attribute `number` is a tensor made by `producer`, and return it."""
        facts = self.known[node]
        assert facts is not None
        entry = facts.saved[number]
        entry = entry._replace(
            known=True, producer=producer, text=f"saved by #{node} as {entry.name}" if producer is not None else ""
        )
        self.known[node] = facts._replace(saved=facts.saved[:number] + (entry,) + facts.saved[number + 1 :])
        return entry


def _facts(fn: Any, ids: dict[int, int]) -> NodeFacts:
    inputs = fn.next_functions
    consumers = tuple(_consumer(f, number, ids) for f, number in inputs)
    producers = tuple(None if f is None or hasattr(f, "variable") else ids.get(id(f)) for f, _ in inputs)
    cast = tuple(f is not None and leafish(f) for f, _ in inputs)
    saved = tuple(Saved(i, name, name[7:]) for i, name in enumerate(saved_names(fn)))
    given = (len(inputs), sum(f is not None for f, _ in inputs))
    return NodeFacts(fn.name(), moves_values(fn), consumers, producers, cast, given, saved)


def _consumer(f: Any, number: int, ids: dict[int, int]) -> tuple[int, int] | None:
    found = ids.get(id(f)) if f is not None else None
    return None if found is None else (found, number)


PLANS_KEPT = 8
"""Graph shapes whose plans are kept (a script alternating a few graphs reuses each)."""

_plans: OrderedDict[tuple, GraphPlan] = OrderedDict()


def plan_for(key: tuple | None, size: int) -> GraphPlan:
    """The plan of the graph shape `key` (a new one: made by this pass), the most recent kept;
    None: a plan of its own, kept nowhere (a PassPrints made without the capture's shape)."""
    if key is None:
        return GraphPlan(size)
    found = _plans.get(key)
    if found is None:
        found = _plans[key] = GraphPlan(size)
        while len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)
    return found


def plans_kept() -> int:
    """How many graph shapes' plans are kept now (the tests: one per graph)."""
    return len(_plans)
