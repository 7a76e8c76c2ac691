"""Capture a backward pass's autograd graph as a networkx DiGraph of plain data.

`capture(roots, names)` walks `grad_fn.next_functions` breadth-first from the roots. Node
ids are small integers in discovery order, so the loss's node is 0. Edges run from a node
to the nodes it sends gradient to (its inputs), the way gradient flows, with `slot` = the
index in `next_functions`.

Each node's plain data is a `NodeInfo` (gradtui.protocol.nodes: name, kind, labels, param, source,
path, line, seq, next, module, saved), held in `Capture.infos` and, once the graph is built, as
the graph node's one attribute `"info"`, so the graph can outlive the pass. The walk itself keeps
only lists (`Walk`: each node's name, kind, receivers and sole sender, all a planned pass reads);
the NodeInfo list is made from them when first read.

The autograd nodes themselves stay in `Capture.nodes`, which only the session holds, and
only for the duration of the pass.
"""

from __future__ import annotations

import functools
import gc
import os
import threading
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgspec
import torch

from gradtui.engine.capture.names import Names
from gradtui.engine.capture.saved import saved_summary
from gradtui.engine.compat import sequence_nr
from gradtui.engine.hooks import native
from gradtui.engine.provenance import forward as provenance
from gradtui.protocol.lazygraph import LazyGraph
from gradtui.protocol.nodes import ROOT_CHILDREN_KEY, ROOT_KEY, NodeInfo, walked

Node = torch.autograd.graph.Node
"""An autograd node: every node, C++ ones too, passes `isinstance(fn, Node)` on 2.13."""

_PREFIX = "torch::autograd::"

DEEP_STACK = 256 << 20
"""Bytes of main-thread stack `allow_deep_graphs` asks for: freeing a chain of nodes that had
Python wrappers takes about 190 bytes of C stack per node, so this frees ~1.4 million."""


class Walk(NamedTuple):
    """What the walk read of each node, by id: all a pass on the hook plan needs of its graph."""

    names: list[str]
    kinds: list[str]
    nexts: list[tuple[int | None, ...]]
    """Per `next_functions` slot, the node id gradient goes to (None for no node)."""
    producer: list[tuple[int, int] | None]
    """Per node with exactly one sender: (sender id, its output slot); None for the others (the
    roots, nodes several slots send to)."""


class Capture(msgspec.Struct, dict=True, repr_omit_defaults=True):
    """A captured pass: what the walk read (`walk`), each node's NodeInfo (`infos`, made from the
    walk when first read), the graph (built lazily from them), and the live autograd nodes
    indexed by id.

    A lazy capture (`capture(..., lazy=True)`) has only what the walk gives in `infos` (name,
    kind, next, seq; a leaf's labels and param); `describe` replaces each with the whole of it
    (labels, source, module, saved values) from the live nodes, at most once: the first read of
    `graph` does it.
    Once the pass has let go of its nodes (`release`), a description not made yet cannot be:
    what it would have read is filled in as unknown (no labels, no source, nothing saved)."""

    walk: Walk
    nodes: list[Node]
    roots: tuple[int, ...]
    names: Names | None = None
    """What the calling frame named, until the description is made."""
    described: bool = True
    """Are `infos` complete?"""
    leaves_named: bool = True
    """Did the walk's names name the leaves (their labels and param)? Else the description does."""
    _infos: list[NodeInfo] | None = None
    _seqs: list[int] | None = None
    """The nodes' sequence numbers: from the compiled walk, else read when the nodes go before
    `infos` were made."""
    _leaves: dict[int, int] | None = None
    """Accumulator id -> the id of its leaf, kept (with `names`) when the nodes go before `infos` were made."""
    _lock: threading.RLock = msgspec.field(default_factory=threading.RLock)
    _graph: LazyGraph | None = None
    graph_attrs: dict[str, Any] = msgspec.field(default_factory=dict)
    """What the description says of the whole pass, the built graph's `graph` attributes:
    `ROOT_KEY` and `ROOT_CHILDREN_KEY` (see `_describe`)."""

    @property
    def graph(self) -> LazyGraph:
        """The pass's graph, built from `infos` when first read as one; the pass announces it
        (PassStarted), and whoever took it there holds it. Not the capture once the pass is over
        (`release`): the graph reads the capture, and a capture that kept it would make the two a
        cycle that only a garbage collection frees, one per pass (the walk, its lists, the
        description), left young in every `backward()` that follows until a collection runs."""
        graph = self._graph
        if graph is None:
            raise RuntimeError("the pass is over: its capture has let go of its graph")
        return graph

    @property
    def infos(self) -> list[NodeInfo]:
        """Per node id, its NodeInfo (what the graph's nodes carry), made from the walk at the first
        read: a pass on the hook plan that never pauses reads none (the walk makes no object per node)."""
        infos = self._infos
        if infos is None:
            with self._lock:
                if self._infos is None:
                    self._infos = self._made_infos()
                infos = self._infos
        return infos

    def _made_infos(self) -> list[NodeInfo]:
        names, kinds, nexts = self.walk.names, self.walk.kinds, self.walk.nexts
        seqs = self._seqs if self._seqs is not None else list(map(sequence_nr, self.nodes))
        infos = list(map(walked, names, kinds, seqs, nexts))
        if self._leaves_nameable() and self.names is not None:
            by_leaf, params = self.names.by_leaf, self.names.params
            for i in self.accumulators:
                leaf_id = self._leaf_id(i)
                infos[i] = walked(
                    names[i], kinds[i], seqs[i], nexts[i], tuple(by_leaf.get(leaf_id, ())), params.get(leaf_id)
                )
        return infos

    def _leaves_nameable(self) -> bool:
        """Whether the leaves get labels from the frame's names: wanted, and their tensors' ids known
        (the live nodes, or the ids a released pass kept)."""
        return self.leaves_named and self.names is not None and (bool(self.nodes) or self._leaves is not None)

    def _leaves_known(self) -> bool:
        """Are the leaves' tensors' ids at hand (the live nodes, or the ids a released pass kept)?"""
        return bool(self.nodes) or self._leaves is not None

    def _leaf_id(self, i: int) -> int:
        return id(self.nodes[i].variable) if self.nodes else self._leaves[i]  # type: ignore[attr-defined, index]  # AccumulateGrad's; torch's Node type lacks it

    def leaf_name(self, i: int) -> str | None:
        """What the pass calls leaf accumulator `i`'s tensor: its parameter's name, else its first
        label (None: nothing names it), as its NodeInfo says, without making every NodeInfo (a
        pass's flow names only its leaves)."""
        names = self.names
        if names is not None and (self._infos is None or not self.leaves_named) and self._leaves_known():
            # (names collected later, `LaterNames`: collected now, as a description would)
            return names.leaf_name(self._leaf_id(i))
        info = self.infos[i]
        return info.param or (info.labels[0] if info.labels else None)

    @functools.cached_property
    def accumulators(self) -> frozenset[int]:
        """Ids of the leaf accumulators."""
        return frozenset(i for i, kind in enumerate(self.walk.kinds) if kind == "accumulate")

    @functools.cached_property
    def slots(self) -> list[tuple[tuple[int, int] | None, ...]]:
        """Per node, per output slot: (node id, input number) the gradient goes to (else None).
        Read from the live nodes (the every-node hooks do, while their pass runs)."""
        return [
            tuple(
                None if there is None else (there, input_nr)
                for there, (_, input_nr) in zip(receivers, node.next_functions)
            )
            for receivers, node in zip(self.walk.nexts, self.nodes)
        ]

    def describe(self) -> None:
        """Complete `infos` from the live nodes (labels, provenance, saved values; leaves placed
        where their first user ran), if not done yet. Call it on the pass's thread while its
        nodes live (the session does, before a pause and for listeners that want the graph)."""
        if self.described:
            return
        with self._lock:
            if self.described:
                return
            if self.nodes:
                self.graph_attrs = _describe(self.infos, self.nodes, self.names or Names(), self.leaves_named)
            # else: what the walk left out stays unknown (NodeInfo's defaults)
            place_leaves(self.infos)
            self.names = None
            self.described = True

    @functools.cached_property
    def sole_inputs(self) -> list[tuple[tuple[int, int] | None, ...]]:
        """Per node, per output slot: (node id, input number) the gradient goes to when that
        input receives from this slot only, so the very tensor arrives there (else None)."""
        senders: dict[tuple[int, int], int] = {}
        for targets in self.slots:
            for target in targets:
                if target is not None:
                    senders[target] = senders.get(target, 0) + 1
        return [tuple(t if t is not None and senders[t] == 1 else None for t in targets) for targets in self.slots]

    def release(self) -> None:
        """The pass is over: let go of the live nodes (a description not made by now is not; the
        walk's NodeInfo still can be) and of the graph (see `graph`)."""
        with self._lock:
            keep = False
            if self._infos is None:
                if self._seqs is None:
                    self._seqs = list(map(sequence_nr, self.nodes))
                if self.leaves_named and self.names is not None:  # the leaves' labels: by their tensors' ids
                    nodes = self.nodes
                    self._leaves = {i: id(nodes[i].variable) for i in self.accumulators}  # type: ignore[attr-defined]  # AccumulateGrad's; torch's Node type lacks it
                    keep = True
            self.nodes = []
            if not keep:
                self.names = None
            self._graph = None  # see `graph`


def allow_deep_graphs(size: int = DEEP_STACK) -> int:
    """Let the main thread's stack grow to `size` bytes (the soft RLIMIT_STACK, within the hard
    one); returns the soft limit now (0 where there is no such limit).

    Why: once a node has had a Python wrapper (provenance reads `t.grad_fn` of every op, a
    capture walks `next_functions`), torch frees it through that wrapper, and the wrapper's
    deallocation frees the next node the same way: freeing a graph recurses once per node in
    a chain, and the default 8 MiB stack overflows at ~45,000 nodes (a SIGSEGV). Linux
    checks the limit when the main thread's stack grows, so raising it at run time is enough.
    Other threads' stacks are fixed when they start; processes this one starts inherit it.
    """
    try:
        import resource
    except ImportError:  # not a POSIX system
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft >= size:
        return soft
    new = size if hard == resource.RLIM_INFINITY else min(size, hard)
    if new > soft:
        try:
            resource.setrlimit(resource.RLIMIT_STACK, (new, hard))
        except (ValueError, OSError):
            return soft
    return resource.getrlimit(resource.RLIMIT_STACK)[0]


_names: dict[type, str] = {}
"""Node type -> its nodes' name, for types named as their nodes are (a generic wrapper type of
C++ nodes, `CppFunction`, names each node on its own)."""


def short_name(node: Node) -> str:
    """`torch::autograd::AccumulateGrad` -> `AccumulateGrad`."""
    cls = type(node)
    name = _names.get(cls)
    if name is None:
        name = node.name().removeprefix(_PREFIX)
        if cls.__name__ == name:
            _names[cls] = name
    return name


def node_kind(node: Node, name: str) -> str:
    """Classify a node: accumulate, op, custom (autograd.Function) or opaque (compiled...)."""
    if name == "AccumulateGrad":
        return "accumulate"
    if "Compiled" in name or name in ("CppFunction", "Error", "NotImplemented"):
        return "opaque"
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        return "custom"
    return "op"


def capture(roots: Iterable[Node], names: Names | None = None, lazy: bool = False) -> Capture:
    """Walk the graph from `roots` (autograd nodes) and return it with metadata; `lazy`: the walk
    only, the rest when `Capture.describe` is called or the graph first read.

    The collector is off meanwhile: a capture makes tens of thousands of small objects and
    no garbage, and the collections they would trigger walk the whole heap (a model's
    worth of objects), which cost as much as the capture itself on a 48-layer encoder.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        cap = _walk(roots, names or Names())
        if not lazy:
            cap.describe()
        return cap
    finally:
        if collecting:
            gc.enable()


_basenames: dict[str, str] = {}


def _source_text(path: str, line: int) -> str:
    base = _basenames.get(path)
    if base is None:
        base = _basenames[path] = os.path.basename(path)
    return f"{base}:{line}"


def _walk(roots: Iterable[Node], names: Names) -> Capture:
    """The walk: node ids, per node its name, kind and next ids (`Walk`). One breadth-first loop
    that makes no object per node but the tuple of its receivers: a lazy capture is this and
    nothing more (the NodeInfo, sequence numbers and leaves' labels are read when `infos` is).
    Where gradtui's compiled module is built, its `walk` makes the same lists in C++."""
    roots = list(roots)
    module = native.load().module
    compiled = module.walk(roots) if module is not None else None
    kinds = _kinds
    seqs = None
    if compiled is not None:
        nodes, nexts, producer, root_ids, seqs = compiled
        named = [kinds.get(type(node)) or _name_and_kind(node) for node in nodes]
    else:
        nodes, nexts, producer, root_ids, named = _walked(roots)
    node_names, node_kinds = (list(t) for t in zip(*named)) if named else ([], [])
    cap = Capture(
        walk=Walk(node_names, node_kinds, nexts, producer),
        nodes=nodes,
        roots=tuple(root_ids),
        names=names,
        described=False,
        leaves_named=names.ready,
        _seqs=seqs,
    )
    cap._graph = LazyGraph(lambda: cap.infos, cap.describe, len(nodes), lambda: cap.graph_attrs)
    return cap


def _walked(
    roots: list[Node],
) -> tuple[list[Node], list[tuple[int | None, ...]], list[tuple[int, int] | None], list[int], list[tuple[str, str]]]:
    """`_walk`'s loop in Python: the nodes, their receivers, producers, the roots' ids and the
    nodes' names and kinds."""
    nodes: list[Node] = []
    ids: dict[Node, int] = {}
    nexts: list[tuple[int | None, ...]] = []
    named: list[tuple[str, str]] = []
    producer: list[tuple[int, int] | None] = []
    root_ids = []
    for root in roots:
        if root is not None and root not in ids:
            ids[root] = len(nodes)
            nodes.append(root)
            producer.append(None)
        if root is not None:
            root_ids.append(ids[root])
    kinds = _kinds
    for here, node in enumerate(nodes):  # the list grows as the walk finds nodes: breadth-first
        receivers: list[int | None] = []
        for child, _ in node.next_functions:
            if child is None:
                receivers.append(None)
                continue
            there = ids.get(child)
            if there is None:
                there = ids[child] = len(nodes)
                nodes.append(child)
                producer.append((here, len(receivers)))
            else:
                producer[there] = None  # a second sender
            receivers.append(there)
        nexts.append(tuple(receivers))
        known = kinds.get(type(node))
        named.append(known if known is not None else _name_and_kind(node))
    return nodes, nexts, producer, root_ids, named


def _name_and_kind(node: Node) -> tuple[str, str]:
    """A node's name and kind, remembered per type where its nodes are all named alike."""
    cls = type(node)
    name = short_name(node)
    kind = node_kind(node, name)
    if _names.get(cls) == name:
        _kinds[cls] = (name, kind)
    return name, kind


_kinds: dict[type, tuple[str, str]] = {}
"""Node type -> (name, kind) of its nodes, for types whose nodes are all named alike."""


def _describe(infos: list[NodeInfo], nodes: list[Node], names: Names, leaves_named: bool) -> dict[str, Any]:
    """A capture's description (see `Capture`): each node's NodeInfo replaced by one with its
    labels, provenance and saved values (a leaf's labels and param too, unless `leaves_named`:
    the walk had them). Returns the graph's attributes: the root the module paths are shown
    relative to and the paths' first parts under it (ROOT_KEY, ROOT_CHILDREN_KEY)."""
    by_grad_fn = names.by_grad_fn
    source_of, module_of = provenance.source_of, provenance.module_of
    shown: dict[str, str] = {}
    """Recorded module path (led by its root's variable) -> as this pass shows it."""
    several = names.several_roots
    under: dict[str, set[str]] = {}
    """Root lead -> the first parts of the paths shown without it."""
    for i, (info, node) in enumerate(zip(infos, nodes)):
        module = None
        if info.kind != "accumulate":
            labels, param = tuple(by_grad_fn.get(id(node), ())), None
            source, module = source_of(node), module_of(node)
            if module is not None and not several:
                short = shown.get(module)
                if short is None:
                    # `encoder.layers.3` rather than `model.encoder.layers.3`, but `model.0`, not a
                    # bare `0` (an nn.Sequential's children are numbered)
                    lead, _, rest = module.partition(".")
                    relative = bool(rest) and not rest.split(".")[0].isdigit()
                    short = shown[module] = rest if relative else module
                    if relative:
                        under.setdefault(lead, set()).add(rest.partition(".")[0])
                module = short
        elif leaves_named:
            labels, param, source = info.labels, info.param, None
        else:  # a walk with names not collected yet
            leaf_id = id(node.variable)  # type: ignore[attr-defined]  # AccumulateGrad's; torch's Node type lacks it
            labels, param, source = tuple(names.by_leaf.get(leaf_id, ())), names.params.get(leaf_id), None
        if source is None:
            infos[i] = info.described(labels, param, None, None, None, module, saved_summary(node))
        else:
            infos[i] = info.described(
                labels, param, _source_text(*source), source[0], source[1], module, saved_summary(node)
            )
    if len(under) != 1:  # no path was shown relative to a root (or, unlike one root, several were)
        return {}
    [(lead, children)] = under.items()
    return {ROOT_KEY: lead, ROOT_CHILDREN_KEY: sorted(children)}


def place_leaves(infos: list[NodeInfo]) -> None:
    """Give each leaf accumulator the source and module of the first node (lowest id) that
    uses it: a parameter is placed where its layer ran (`fc2.weight` at `self.fc2(h)`), as a
    leaf has no creating op of its own. Works on `Capture.infos` (replacing a placed leaf's), so
    the networkx view stays unbuilt."""
    todo = {i for i, info in enumerate(infos) if info.kind == "accumulate" and info.source is None}
    if not todo:
        return
    for info in infos:  # in id order: the first user with a source places the leaf
        if info.source is None:
            continue
        for there in info.next:
            if there in todo:
                leaf = infos[there]
                infos[there] = leaf.described(
                    leaf.labels, leaf.param, info.source, info.path, info.line, info.module, leaf.saved
                )
                todo.discard(there)
        if not todo:
            return
