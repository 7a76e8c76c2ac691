"""Capture a backward pass's autograd graph as a networkx DiGraph of plain data.

`capture(roots, names)` walks `grad_fn.next_functions` breadth-first from the roots. Node
ids are small integers in discovery order, so the loss's node is 0. Edges run from a node
to the nodes it sends gradient to (its inputs), the way gradient flows, with `slot` = the
index in `next_functions`.

Node attributes (all plain data, so the graph can outlive the pass):
    name    op name without the `torch::autograd::` prefix, e.g. "AddmmBackward0"
    kind    "accumulate" (leaf accumulator), "op", "custom" (autograd.Function), "opaque"
    labels  tuple of variable names whose tensor this node made (or, for a leaf, is)
    param   for an accumulator of an nn.Parameter: its name, e.g. "fc.weight"
    source  "file.py:LINE" of the user code that made the node (None if unknown)
    path, line  the full path and line number behind `source` (None if unknown)
    seq     autograd's sequence number: the engine runs ready nodes highest first
    next    per `next_functions` slot, the node id gradient goes to (None for no node); unlike
            the DiGraph's edges this keeps repeats, e.g. both slots of `x * x`
    module  dotted path of the nn.Module whose forward made it, e.g. "encoder.layers.3"
    saved   tuple of "name [shape] dtype" / "name = value" for the node's saved values

The autograd nodes themselves stay in `Capture.nodes`, which only the session holds, and
only for the duration of the pass.
"""

from __future__ import annotations

import functools
import gc
import os
from collections import deque
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from gradtui.engine import provenance
from gradtui.engine.lazygraph import LazyGraph
from gradtui.engine.names import Names
from gradtui.engine.compat import sequence_nr

Node = Any  # torch.autograd.graph.Node (every node, C++ ones too, passes its isinstance on 2.13)

_PREFIX = "torch::autograd::"

DEEP_STACK = 256 << 20
"""Bytes of main-thread stack `allow_deep_graphs` asks for: freeing a chain of nodes that had
Python wrappers takes about 190 bytes of C stack per node, so this frees ~1.4 million."""


@dataclass
class Capture:
    """A captured pass: the node attribute dicts, the graph (built lazily from them), and the
    live autograd nodes indexed by id.

    A lazy capture (`capture(..., lazy=True)`) has only what the walk gives in `attrs` (name,
    kind, next, seq; a leaf's labels and param); `describe` adds the rest (labels, source,
    module, saved values) from the live nodes, at most once: the first read of `graph` does it.
    Once the pass has let go of its nodes (`release`), a description not made yet cannot be:
    what it would have read is filled in as unknown (no labels, no source, nothing saved)."""

    attrs: list[dict[str, Any]]
    """Per node id, its attributes (the dicts the graph's nodes carry)."""
    graph: LazyGraph
    nodes: list[Node]
    roots: tuple[int, ...]
    slots: list[tuple[tuple[int, int] | None, ...]] = field(default_factory=list)
    """Per node, per output slot: (node id, input number) the gradient goes to (else None)."""
    accumulators: frozenset[int] = frozenset()
    """Ids of the leaf accumulators."""
    names: Names | None = None
    """What the calling frame named, until the description is made."""
    described: bool = True
    """Are `attrs` complete?"""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def describe(self) -> None:
        """Complete `attrs` from the live nodes (labels, provenance, saved values; leaves placed
        where their first user ran), if not done yet. Call it on the pass's thread while its
        nodes live (the session does, before a pause and for listeners that want the graph)."""
        if self.described:
            return
        with self._lock:
            if self.described:
                return
            if self.nodes:
                _describe(self.attrs, self.nodes, self.names or Names())
            else:
                for data in self.attrs:
                    for key, value in _UNKNOWN.items():
                        data.setdefault(key, value)
            place_leaves(self.attrs)
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
        """The pass is over: let go of the live nodes (a description not made by now is not)."""
        self.nodes = []
        self.names = None


_UNKNOWN: dict[str, Any] = {"labels": (), "param": None, "source": None, "path": None, "line": None,
                            "module": None, "saved": ()}
"""What a lazy capture's attrs say of a node whose description was never made."""


def allow_deep_graphs(size: int = DEEP_STACK) -> int:
    """Let the main thread's stack grow to `size` bytes (the soft RLIMIT_STACK, within the hard
    one); returns the soft limit now (0 where there is no such limit).

    Why: once a node has had a Python wrapper (provenance reads `t.grad_fn` of every op, a
    capture walks `next_functions`), torch frees it through that wrapper, and the wrapper's
    deallocation frees the next node the same way: freeing a graph recurses once per node in
    a chain, and the default 8 MiB stack overflows at ~45,000 nodes (SIGSEGV, issue 11.2). Linux
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


_saved_attrs: dict[type, tuple[tuple[str, str, str | None], ...]] = {}
"""Per node type: (label, `_saved_*` attribute, its `_raw_saved_*` attribute if the type has one)."""

_described: dict[Any, str] = {}
"""Descriptions of saved values by (type, value) or (shape, dtype): a pass repeats the same few
shapes, sizes and scalars thousands of times."""
_DESCRIBED_LIMIT = 50_000


def _saved_fields(node: Node) -> tuple[tuple[str, str, str | None], ...]:
    cls = type(node)
    fields = _saved_attrs.get(cls)
    if fields is None:
        fields = tuple(
            (a.removeprefix("_saved_"), a, "_raw" + a if hasattr(cls, "_raw" + a) else None)
            for a in dir(node) if a.startswith("_saved_")
        )
        _saved_attrs[cls] = fields
    return fields


def saved_summary(node: Node) -> tuple[str, ...]:
    """Describe a node's `_saved_*` values without keeping them: shapes, or scalar values."""
    out = []
    for label, attr, raw in _saved_fields(node):
        if raw is not None and _packed(getattr(node, raw, None)):
            out.append(f"{label} (packed by a saved-tensors hook)")
            continue
        try:
            value = getattr(node, attr)
        except RuntimeError:
            out.append(f"{label} (freed)")
            continue
        out.append(f"{label} {_describe_saved(value)}")
    return tuple(out)


def _packed(raw: Any) -> bool:
    """Is this raw saved value (or list of them) packed by a saved-tensors hook? Then reading
    `_saved_*` would run the unpack hook: a recomputation under non-reentrant checkpointing,
    a copy back from the CPU under save_on_cpu."""
    items = raw if isinstance(raw, (list, tuple)) else (raw,)
    return any(getattr(item, "unpack_hook", None) is not None for item in items)


_PLAIN = frozenset({int, float, bool, str, type(None)})


def _describe_saved(value: Any) -> str:
    """`_describe_saved_uncached`, remembered for plain values (never for anything holding a
    tensor: the cache must not keep a pass's tensors alive)."""
    kind = type(value)
    if isinstance(value, torch.Tensor):
        key: Any = (value.shape, value.dtype)
    elif kind in _PLAIN or (kind is tuple and all(type(v) is int for v in value)):
        key = (kind, value)
    else:
        return _describe_saved_uncached(value)
    text = _described.get(key)
    if text is not None:
        return text
    text = _describe_saved_uncached(value)
    if len(_described) >= _DESCRIBED_LIMIT:
        _described.clear()
    _described[key] = text
    return text


def _describe_saved_uncached(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        shape = ",".join(map(str, value.shape))
        return f"[{shape}] {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return f"[{len(value)} tensors]"
    text = repr(value)
    return "= " + (text if len(text) <= 40 else text[:37] + "...")


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
    """The walk: node ids, per node its name, kind, next ids and sequence number (a leaf's labels
    and param too: the flow names leaves at every pass's end). One breadth-first loop: a lazy
    capture is this and nothing more."""
    nodes: list[Node] = []
    ids: dict[Node, int] = {}
    slots: list[tuple[tuple[int, int] | None, ...]] = []
    attrs: list[dict[str, Any]] = []
    accumulators: list[int] = []
    named = names.ready  # LaterNames: leaves are named when the capture is described
    by_leaf, params = (names.by_leaf, names.params) if named else ({}, {})
    root_ids = []
    for root in roots:
        if root is not None and root not in ids:
            ids[root] = len(nodes)
            nodes.append(root)
        if root is not None:
            root_ids.append(ids[root])
    kinds = _kinds
    for here, node in enumerate(nodes):  # the list grows as the walk finds nodes: breadth-first
        targets: list[tuple[int, int] | None] = []
        receivers: list[int | None] = []
        for child, input_nr in node.next_functions:
            if child is None:
                targets.append(None)
                receivers.append(None)
                continue
            there = ids.get(child)
            if there is None:
                there = ids[child] = len(nodes)
                nodes.append(child)
            targets.append((there, input_nr))
            receivers.append(there)
        slots.append(targets)  # type: ignore[arg-type]
        cls = type(node)
        known = kinds.get(cls)
        if known is None:
            name = short_name(node)
            kind = node_kind(node, name)
            if _names.get(cls) == name:
                kinds[cls] = (name, kind)
        else:
            name, kind = known
        data = {"name": name, "kind": kind, "seq": sequence_nr(node), "next": tuple(receivers)}
        if kind == "accumulate":
            if named:
                leaf_id = id(node.variable)
                data["labels"] = tuple(by_leaf.get(leaf_id, ()))
                data["param"] = params.get(leaf_id)
            accumulators.append(here)
        attrs.append(data)
    cap = Capture(attrs=attrs, graph=None, nodes=nodes, roots=tuple(root_ids),  # type: ignore[arg-type]
                  slots=slots, accumulators=frozenset(accumulators), names=names, described=False)
    cap.graph = LazyGraph(attrs, None, cap.describe)
    return cap


_kinds: dict[type, tuple[str, str]] = {}
"""Node type -> (name, kind) of its nodes, for types whose nodes are all named alike."""


def _describe(attrs: list[dict[str, Any]], nodes: list[Node], names: Names) -> None:
    """A capture's description (see `Capture`): labels, provenance and saved values per node."""
    by_grad_fn = names.by_grad_fn
    source_of, module_of = provenance.source_of, provenance.module_of
    shown: dict[str, str] = {}
    """Recorded module path (led by its root's variable) -> as this pass shows it."""
    several = names.several_roots
    for data, node in zip(attrs, nodes):
        source = module = None
        if data["kind"] == "accumulate" and "labels" not in data:  # a walk with names not collected yet
            leaf_id = id(node.variable)
            data["labels"] = tuple(names.by_leaf.get(leaf_id, ()))
            data["param"] = names.params.get(leaf_id)
        elif data["kind"] != "accumulate":
            data["labels"] = tuple(by_grad_fn.get(id(node), ()))
            data["param"] = None
            source, module = source_of(node), module_of(node)
            if module is not None and not several:
                short = shown.get(module)
                if short is None:
                    # `encoder.layers.3` rather than `model.encoder.layers.3`, but `model.0`, not a
                    # bare `0` (an nn.Sequential's children are numbered)
                    rest = module.partition(".")[2]
                    short = shown[module] = rest if rest and not rest.split(".")[0].isdigit() else module
                module = short
        data["source"] = None if source is None else _source_text(*source)
        data["path"] = None if source is None else source[0]
        data["line"] = None if source is None else source[1]
        data["module"] = module
        data["saved"] = saved_summary(node)


def place_leaves(attrs: list[dict[str, Any]]) -> None:
    """Give each leaf accumulator the source and module of the first node (lowest id) that
    uses it: a parameter is placed where its layer ran (`fc2.weight` at `self.fc2(h)`), as a
    leaf has no creating op of its own. Works on `Capture.attrs`, so the networkx view stays
    unbuilt."""
    todo = {i for i, data in enumerate(attrs) if data["kind"] == "accumulate" and data["source"] is None}
    if not todo:
        return
    for data in attrs:  # in id order: the first user with a source places the leaf
        if data["source"] is None:
            continue
        for there in data["next"]:
            if there in todo:
                leaf = attrs[there]
                leaf["source"], leaf["path"], leaf["line"] = data["source"], data["path"], data["line"]
                leaf["module"] = data["module"]
                todo.discard(there)
        if not todo:
            return
