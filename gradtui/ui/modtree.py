"""The module view's model: a pass's nodes folded into a tree by nn.Module path. No Textual.

Every node belongs to one module: the `module` attribute of its graph node
(`encoder.layers.3.linear1`), or, for the accumulator of a parameter, the module owning the
parameter's name (`encoder.layers.3.linear1.weight` -> `encoder.layers.3.linear1`); the rest
go to `NO_MODULE`. Each dotted prefix is a row that expands to its submodules, then its own
nodes (in engine order). Where the pass shows its paths relative to the root module (the
graph's ROOT_KEY: `encoder.layers.3` of `model`), the root is the row above them, its own ops
and parameters in it, whether or not it made any node itself (an nn.TransformerEncoder). A
module row sums up what is under it (`ModuleStats`): how many nodes, the norm of the gradient
it sends out of itself, whether anything non-finite went by.

`rows` is the flat list the widget draws, rebuilt only when a module is expanded or
collapsed, so drawing a screenful is a list lookup per line whatever the size of the pass.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from gradtui.protocol.nodes import ROOT_CHILDREN_KEY, ROOT_KEY, NodeInfo, node_info
from gradtui.ui.state import PassView

NO_MODULE = "(no module)"
"""The group of nodes made outside any nn.Module's forward (and of leaves that are no parameter)."""

AUTO_ROWS = 60
"""`auto_expand` opens levels of modules while the tree stays within this many rows."""


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the tree: a module (`module` set) or a node (`node` set), at `depth`."""

    depth: int
    module: str | None = None
    node: int | None = None


@dataclass(slots=True)
class Module:
    """A module path in the tree."""

    path: str
    parent: str | None
    children: list[str] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    """Nodes directly in this module (not in a submodule), in engine order."""
    count: int = 0
    """Nodes in this module and its submodules."""


@dataclass(slots=True)
class ModuleStats:
    """What a module row shows."""

    count: int
    out_norm: float | None
    """sqrt of the sum of squared norms of the gradients its nodes sent to nodes outside it;
    None while none has been sent."""
    nonfinite: bool
    ran: int
    """Nodes under it that have run."""


def owner_of(data: NodeInfo) -> str | None:
    """The module path a node belongs to (see module doc), None for the NO_MODULE group."""
    if data.module:
        return data.module
    param = data.param
    if data.kind == "accumulate" and param and "." in param:
        return param.rpartition(".")[0]
    return None


def _roots_param(data: NodeInfo) -> bool:
    """Is the node the accumulator of a parameter the root holds itself (`scale`, no dot)?"""
    return data.kind == "accumulate" and data.param is not None and data.param != "" and "." not in data.param


_DIGITS = re.compile(r"[0-9]+")
"""A path part that is a list index (`layers.3`). ASCII digits only: `str.isdigit` is also
true of `²` or `①`, which `int()` refuses (a ModuleDict may use any key), and `\\d` with `$`
would take `3\\n` too."""


def _natural(path: str) -> tuple:
    """Sort key: `layers.10` after `layers.9`; other parts by text, after the numbers."""
    return tuple((0, int(p), "") if _DIGITS.fullmatch(p) else (1, 0, p) for p in path.split("."))


def display_name(module: Module) -> str:
    """The row's name: the path relative to the parent row; `layers.3` rather than a bare `3`."""
    if module.parent is None or not module.path.startswith(module.parent + "."):
        return module.path  # a root, or a path shown relative to the root above it
    rel = module.path[len(module.parent) + 1 :]
    if _DIGITS.fullmatch(rel):
        return module.parent.rpartition(".")[2] + "." + rel
    return rel


class ModuleTree:
    """The nodes of one pass folded by module path (see module doc)."""

    def __init__(self, view: PassView) -> None:
        self.view = view
        self.modules: dict[str, Module] = {}
        self.top: list[str] = []
        """Top-level module paths, NO_MODULE last."""
        self.member: dict[int, str] = {}
        """Node id -> the module path it is directly in."""
        self.expanded: set[str] = set()
        self.rows: list[Row] = []
        self._stats_key: tuple | None = None
        self._chains: dict[str, tuple[str, ...]] = {}
        attrs = getattr(view.graph, "graph", {})
        self.root: str | None = attrs.get(ROOT_KEY)
        """The root module the paths are shown relative to (None: none is)."""
        self._under_root: frozenset[str] = frozenset(attrs.get(ROOT_CHILDREN_KEY, ()) if self.root else ())
        self._reset()
        self._build()
        self._flatten()

    # ---- structure -----------------------------------------------------------------------

    def _module(self, path: str) -> Module:
        module = self.modules.get(path)
        if module is None:
            parent = path.rpartition(".")[0] if "." in path and path != NO_MODULE else None
            if parent is None and path in self._under_root and path != self.root:
                parent = self.root  # `encoder` is shown without the `model.` it is in
            module = self.modules[path] = Module(path, parent)
            if parent is not None:
                self._module(parent).children.append(path)
            else:
                self.top.append(path)
        return module

    def _build(self) -> None:
        graph = self.view.graph
        if self.root is not None:
            self._module(self.root)  # the row above its children, if it made no node itself
        for node in self.view.order:
            data = node_info(graph, node)
            path = owner_of(data) or (self.root if _roots_param(data) and self.root else NO_MODULE)
            self.member[node] = path
            self._module(path).nodes.append(node)
        for module in self.modules.values():
            module.children.sort(key=_natural)
            for path in self.chain(module.path):
                self.modules[path].count += len(module.nodes)
        self.top.sort(key=lambda p: (p == NO_MODULE, _natural(p)))

    def chain(self, path: str) -> tuple[str, ...]:
        """`a.b.c` -> (`a.b.c`, `a.b`, `a`): the module and its ancestors that are rows."""
        chain = self._chains.get(path)
        if chain is None:
            out, module = [], self.modules.get(path)
            while module is not None:
                out.append(module.path)
                module = self.modules.get(module.parent) if module.parent is not None else None
            chain = self._chains[path] = tuple(out)
        return chain

    # ---- expanding and collapsing --------------------------------------------------------

    def _flatten(self) -> None:
        rows: list[Row] = []

        def walk(path: str, depth: int) -> None:
            rows.append(Row(depth, module=path))
            if path in self.expanded:
                module = self.modules[path]
                for child in module.children:
                    walk(child, depth + 1)
                rows.extend(Row(depth + 1, node=n) for n in module.nodes)

        for path in self.top:
            walk(path, 0)
        self.rows = rows

    def set_expanded(self, path: str, expanded: bool) -> bool:
        """Expand or collapse a module row; True if that changed anything."""
        if path not in self.modules or (path in self.expanded) == expanded:
            return False
        if expanded:
            self.expanded.add(path)
        else:
            self.expanded.discard(path)
        self._flatten()
        return True

    def toggle(self, path: str) -> None:
        """Expand a collapsed module, collapse an expanded one."""
        self.set_expanded(path, path not in self.expanded)

    def auto_expand(self, limit: int = AUTO_ROWS) -> None:
        """Open whole levels of modules (never NO_MODULE) while the tree stays within `limit` rows."""
        rows = len(self.top)
        level = [p for p in self.top if p != NO_MODULE]
        while level:
            more = sum(len(self.modules[p].children) + len(self.modules[p].nodes) for p in level)
            if rows + more > limit:
                break
            rows += more
            self.expanded.update(level)
            level = [c for p in level for c in self.modules[p].children]
        self._flatten()

    def reveal(self, node: int) -> int | None:
        """Expand the modules around `node`; its row, None if it is not in the pass."""
        path = self.member.get(node)
        if path is None:
            return None
        missing = [p for p in self.chain(path) if p not in self.expanded]
        if missing:
            self.expanded.update(missing)
            self._flatten()
        return self.row_of_node(node)

    def row_of_node(self, node: int) -> int | None:
        """The row showing `node`, if its modules are expanded."""
        for i, row in enumerate(self.rows):
            if row.node == node:
                return i
        return None

    def row_of_module(self, path: str) -> int | None:
        """The row of module `path`, if visible."""
        for i, row in enumerate(self.rows):
            if row.module == path:
                return i
        return None

    # ---- what module rows say ------------------------------------------------------------

    def difference(self, path: str) -> float | None:
        """The largest difference from the reference of the nodes in module `path` and its
        submodules (None: none known), folded once per set of differences the pass got."""
        view = self.view
        if self._diff_of is not view.differences:
            self._diff_of = view.differences
            self._diffs = {}
            for node, found in view.differences.items():
                largest = found.largest
                if largest is None:
                    continue
                for p in self.chain(self.member.get(node, NO_MODULE)):
                    if p not in self._diffs or largest > self._diffs[p]:
                        self._diffs[p] = largest
        return self._diffs.get(path)

    _diff_of: object = None
    _diffs: dict[str, float] = {}

    def stats(self, path: str) -> ModuleStats:
        """The summary of module `path`, folded in incrementally as nodes of the pass run."""
        self._update()
        squares = self._squares.get(path)
        return ModuleStats(
            self.modules[path].count,
            None if squares is None else math.sqrt(squares),
            path in self._nonfinite,
            self._ran.get(path, 0),
        )

    def _reset(self) -> None:
        self._squares: dict[str, float] = {}
        self._nonfinite: set[str] = set()
        self._ran: dict[str, int] = {}
        self._sent: dict[int, object] = {}
        """Node id -> the outgoing gradients already folded in (a new object means: start over)."""
        self._ran_seen: set[int] = set()
        self._nonfinite_seen: set[int] = set()

    def _update(self) -> None:
        view = self.view
        key = (len(view.grad_inputs), len(view.ran), len(view.nonfinite), view.finished)
        if key == self._stats_key:
            return
        self._stats_key = key
        if any(self._sent.get(node, grads) is not grads for node, grads in view.grad_inputs.items()):
            self._reset()  # a node's outgoing gradients were replaced (a pause after it): fold again
        for node in view.ran.keys() - self._ran_seen:
            self._ran_seen.add(node)
            for p in self.chain(self.member.get(node, NO_MODULE)):
                self._ran[p] = self._ran.get(p, 0) + 1
        for node in view.nonfinite - self._nonfinite_seen:
            self._nonfinite_seen.add(node)
            self._nonfinite.update(self.chain(self.member.get(node, NO_MODULE)))
        graph = view.graph
        for node, grads in view.grad_inputs.items():
            if node in self._sent:
                continue
            self._sent[node] = grads
            chain = self.chain(self.member.get(node, NO_MODULE))
            for slot, target in enumerate(node_info(graph, node).next):
                stats = grads[slot] if slot < len(grads) else None
                if target is None or stats is None:
                    continue
                inside = self.chain(self.member.get(target, NO_MODULE))
                norm = stats.norm
                for p in chain:
                    if p not in inside:  # the gradient leaves p
                        self._squares[p] = self._squares.get(p, 0.0) + norm * norm
