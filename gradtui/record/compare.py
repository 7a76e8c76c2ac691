"""Where two recordings part (`gradtui diff`): nodes matched across runs, the first difference.

Node ids are per pass and per run, so nodes match by a stable key: (op, source `file:line`,
module path, parameter name) and the occurrence among the pass's nodes with that key in forward
order (autograd's sequence number; leaves' accumulators after every op). A key on one side only
is a graph change, named first.

Values are compared through their fingerprints (gradtui.engine.fingerprints.values, the `prints` table):
exactly where both sides recorded the values (at most 64 elements), else by the sketches'
estimate of ‖a − b‖ over the larger norm. Once one forward value differs every gradient from
the loss down differs, so a pass names two things: the first node in forward order whose forward
value (its output, a saved leaf value, its saved arguments) differs beyond `rtol` (a forward
change), and the first node in the order the backward ran that received what the other run's
received but sent on something else while its forward agrees (a backward-only change: a custom
backward, a hook, a changed derivative). A recording without fingerprints (schema 1) compares
gradients by their recorded values or norms only (a norm's difference is a lower bound).
"""

from __future__ import annotations

import json
import math
import sqlite3
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gradtui.protocol.fingerprints import OUTPUT, RECEIVED, SAVED, SENT, Value, estimate_distance  # noqa: F401 - compare's names too
from gradtui.record import schema


class BadInput(Exception):
    """A file that cannot be compared (missing, not a recording, no such pass): one line."""


@dataclass(frozen=True)
class Node:
    """A recorded node of one pass, with its fingerprints keyed by (dir, slot)."""

    id: int
    op: str
    source: str | None
    module: str | None
    param: str | None
    seq: int
    ord: int | None
    next: tuple[int, ...] = ()
    """The nodes that made its inputs (autograd's next functions)."""
    values: dict[tuple[int, int], Value] = field(default_factory=dict, compare=False, hash=False)

    def key(self) -> tuple:
        """The part of the matching key that does not count occurrences."""
        return (self.op, self.source, self.module, self.param)

    def where(self) -> str:
        """`op at file:line in module`, for a report."""
        text = self.op + (f" at {self.source}" if self.source else "")
        return text + (f" in {self.module}" if self.module else "")


def _floats(blob: bytes | None) -> tuple[float, ...]:
    return tuple(array("d", blob)) if blob else ()


def _num(x: Any) -> float | None:
    return math.nan if x == "nan" else (None if x is None else float(x))


class Side:
    """One recording opened read-only for comparison."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # read-only and read by one thread at a time: a live run's passes may run on any thread
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            schema.check_version(self._db)
            schema.require_tables(self._db, ("run", "passes", "nodes", "grads", "flow"))
            self.has_prints = schema.has_prints(self._db)
            self.sketch = schema.sketch_version(self._db)
            """Which sketch its fingerprints were made with (None: it has none; schema.SKETCH_VERSION)."""
            run = self._db.execute("SELECT script FROM run").fetchone()
            self.script: str | None = run[0] if run else None
            rows = self._db.execute("SELECT idx, losses, per_node FROM passes ORDER BY idx").fetchall()
            self.losses = {i: tuple(_num(v) for v in json.loads(text or "[]")) for i, text, _ in rows}
        except schema.NotARecording as exc:
            raise BadInput(f"{path}: {exc}") from None
        except sqlite3.Error as exc:
            raise BadInput(f"{path}: {schema.unreadable(exc)}") from None
        except (ValueError, TypeError) as exc:  # a losses cell that is not a JSON list of numbers
            raise BadInput(f"{path}: damaged: its passes table cannot be read ({exc})") from None
        self.per_node = {i for i, _, per in rows if per}

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def has_fingerprints(self) -> bool:
        """Was it recorded with fingerprints (a `prints` table with rows)?"""
        return self.has_prints and self._db.execute("SELECT 1 FROM prints LIMIT 1").fetchone() is not None

    def flow(self, index: int) -> dict[str, float | None]:
        """Parameter name -> gradient norm after pass `index`."""
        return {name: _num(norm) for name, norm in
                self._db.execute("SELECT name, grad_norm FROM flow WHERE pass = ?", (index,))}

    def nodes(self, index: int, prints: bool = True) -> list[Node]:
        """Pass `index`'s nodes in forward order, with their fingerprints (or, without any or
        without `prints`, their gradients' recorded values and norms)."""
        query = "SELECT id, op, source, module, param, seq, ord, next FROM nodes WHERE pass = ?"
        nodes = {row[0]: Node(*row[:7], tuple(json.loads(row[7] or "[]"))) for row in self._db.execute(query, (index,))}
        if self.has_prints and prints:
            query = "SELECT node, dir, slot, norm, exact, sketch, what FROM prints WHERE pass = ?"
            for node, d, slot, norm, exact, blob, what in self._db.execute(query, (index,)):
                found = nodes.get(node)
                if found is not None:
                    found.values[(d, slot)] = Value(_num(norm), _floats(blob), bool(exact), what or "")
        else:
            query = "SELECT node, dir, slot, norm, vals FROM grads WHERE pass = ? AND shape IS NOT NULL"
            for node, d, slot, norm, blob in self._db.execute(query, (index,)):
                if node in nodes:
                    nodes[node].values[(d, slot)] = Value(_num(norm), _floats(blob), blob is not None)
        # Forward order: autograd numbers nodes as the forward makes them; accumulators (leaves,
        # numbered 2**64 - 1, stored as -1) come after every op.
        return sorted(nodes.values(), key=lambda n: (n.seq < 0, n.seq, n.id))


def distance(a: Value, b: Value) -> float:
    """How far apart two values are, relative to the larger norm (0: equal, inf: not finite)."""
    if a.exact != b.exact or (a.data and b.data and len(a.data) != len(b.data)):
        return math.inf  # different shapes
    if a.data == b.data and _same(a.norm, b.norm):
        return 0.0
    if not a.data or not b.data:  # no values nor sketch (a recording without fingerprints): the norms
        if a.norm is None or b.norm is None:
            return 0.0 if a.norm is None and b.norm is None else math.inf
        return _relative(abs(a.norm - b.norm), a.norm, b.norm)
    if not all(map(math.isfinite, a.data + b.data)):
        return 0.0 if all(_same(x, y) for x, y in zip(a.data, b.data)) else math.inf
    apart = estimate_distance(a.data, b.data)
    na = a.norm if a.norm is not None and math.isfinite(a.norm) else 0.0
    nb = b.norm if b.norm is not None and math.isfinite(b.norm) else 0.0
    return _relative(apart, na, nb)


def _relative(apart: float, na: float, nb: float) -> float:
    scale = max(abs(na), abs(nb))
    if apart == 0.0:
        return 0.0
    return apart / scale if scale > 0 else math.inf


def _same(x: float | None, y: float | None) -> bool:
    return x == y or (x is not None and y is not None and math.isnan(x) and math.isnan(y))


def loss_distance(a: tuple[float | None, ...], b: tuple[float | None, ...]) -> float:
    """The largest relative difference between two passes' losses (inf: a loss on one side only)."""
    if len(a) != len(b):
        return math.inf
    worst = 0.0
    for x, y in zip(a, b):
        if _same(x, y):
            continue
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        worst = max(worst, _relative(abs(x - y), x, y))
    return worst


@dataclass
class Difference:
    """A value that differs between the runs at a matched node."""

    node_a: Node
    node_b: Node
    slot: tuple[int, int]
    """(dir, slot) of the value that differs most."""
    relative: float
    exact: bool
    what: str
    norms: tuple[float | None, float | None]
    arguments: str | None = None
    """The node's saved arguments where they differ (a forward difference)."""


@dataclass
class PassComparison:
    """What differs in one pass (see module doc)."""

    index: int
    losses: tuple[tuple[float | None, ...], tuple[float | None, ...]]
    loss_difference: float
    only_a: list[Node]
    only_b: list[Node]
    matched: int
    forward: Difference | None
    backward_only: Difference | None
    modules: list[tuple[str, float, float]]
    """(module, largest forward difference, largest gradient difference), largest first."""
    gradients_differ: bool
    flow_differs: bool

    @property
    def differs(self) -> bool:
        """Does anything in this pass differ beyond the tolerance?"""
        return bool(self.only_a or self.only_b or self.forward or self.backward_only or self.gradients_differ
                    or self.flow_differs or self.loss_difference > 0)


def match(a: list[Node], b: list[Node]) -> tuple[list[tuple[Node, Node]], list[Node], list[Node]]:
    """Pairs of nodes with the same key and occurrence (in A's forward order), and those on one side only."""
    def keyed(nodes: list[Node]) -> dict[tuple, Node]:
        seen: dict[tuple, int] = defaultdict(int)
        out = {}
        for n in nodes:
            base = n.key()
            out[(*base, seen[base])] = n
            seen[base] += 1
        return out

    ka, kb = keyed(a), keyed(b)
    pairs = [(n, kb[k]) for k, n in ka.items() if k in kb]
    return pairs, [n for k, n in ka.items() if k not in kb], [n for k, n in kb.items() if k not in ka]


def _worst(na: Node, nb: Node, dirs: tuple[int, ...]) -> Difference | None:
    """The value of `dirs` that differs most between two matched nodes (None: none recorded)."""
    found = None
    for slot in sorted(set(na.values) | set(nb.values)):
        if slot[0] not in dirs:
            continue
        va, vb = na.values.get(slot), nb.values.get(slot)
        if va is None or vb is None:
            rel, exact, what, norms = math.inf, True, (va or vb).what + " (recorded on one side only)", \
                (va.norm if va else None, vb.norm if vb else None)
        elif slot[1] == -1:  # saved arguments, as text: `arguments`
            continue
        else:
            rel, exact, what, norms = distance(va, vb), va.exact and vb.exact, va.what, (va.norm, vb.norm)
        if found is None or rel > found.relative:
            found = Difference(na, nb, slot, rel, exact, what, norms)
    return found


def arguments(na: Node, nb: Node) -> str | None:
    """`A's saved arguments vs B's` where they differ (`approximate='none' vs approximate='tanh'`), else None."""
    va, vb = na.values.get((SAVED, -1)), nb.values.get((SAVED, -1))
    ta, tb = va.what if va else "", vb.what if vb else ""
    return None if ta == tb else f"{ta or '(none)'} vs {tb or '(none)'}"


def compare_pass(a: Side, b: Side, index: int, rtol: float) -> PassComparison:
    """Compare pass `index` of two recordings (per-node data where both have it)."""
    losses = (a.losses.get(index, ()), b.losses.get(index, ()))
    loss_diff = loss_distance(*losses)
    fa, fb = a.flow(index), b.flow(index)
    flow_differs = set(fa) != set(fb) or any(
        loss_distance((fa[n],), (fb[n],)) > rtol for n in fa)
    if index not in a.per_node or index not in b.per_node:
        return PassComparison(index, losses, loss_diff if loss_diff > rtol else 0.0, [], [], 0, None, None, [],
                              False, flow_differs)
    both = a.has_prints and b.has_prints  # else both sides compare what both have: gradients
    pairs, only_a, only_b = match(a.nodes(index, both), b.nodes(index, both))
    forward = backward = None
    modules: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    grads_differ = False
    checked = []
    output_differs: set[int] = set()
    """A's ids of nodes whose own forward output or arguments differ."""
    for na, nb in pairs:  # forward order
        fwd = _worst(na, nb, (OUTPUT, SAVED))
        received, sent = _worst(na, nb, (RECEIVED,)), _worst(na, nb, (SENT,))
        checked.append((na, nb, fwd, received, sent))
        f_rel = fwd.relative if fwd else 0.0
        changed = arguments(na, nb)
        g_rel = max(received.relative if received else 0.0, sent.relative if sent else 0.0)
        grads_differ = grads_differ or g_rel > rtol
        if f_rel > rtol or changed:
            output_differs.add(na.id)
            if forward is None:
                forward = fwd if fwd is not None and f_rel > rtol else Difference(na, nb, (SAVED, -1), 0.0, True, "", (None, None))
                forward.arguments = changed
        if na.module:
            entry = modules[na.module]
            entry[0], entry[1] = max(entry[0], f_rel), max(entry[1], g_rel)
    # A node's forward agrees if its own values and arguments do and so do its inputs (the
    # outputs of the nodes that made them): a loss fed a changed output changes its gradient.
    run_order = sorted(checked, key=lambda c: (c[0].ord is None, c[0].ord or 0))
    for na, nb, fwd, received, sent in run_order:
        inputs_agree = na.id not in output_differs and not any(n in output_differs for n in na.next)
        if (inputs_agree and (received is None or received.relative <= rtol)
                and sent is not None and sent.relative > rtol):
            backward = sent
            break
    table = sorted(((m, f, g) for m, (f, g) in modules.items()), key=lambda r: (-max(r[1], r[2]), r[0]))
    return PassComparison(index, losses, loss_diff if loss_diff > rtol else 0.0, only_a, only_b, len(pairs),
                          forward, backward, table, grads_differ, flow_differs)


@dataclass
class Comparison:
    """Two recordings compared: the first pass whose losses differ, and the pass looked into."""

    a: str
    b: str
    passes: tuple[int, int]
    first_loss: int | None
    inspected: PassComparison | None
    fingerprints: tuple[bool, bool]
    script: str | None = None
    """A's script (its folder is where the source lines are looked up)."""

    @property
    def differs(self) -> bool:
        """Does anything differ (exit status 1 of `gradtui diff`)?"""
        return (self.passes[0] != self.passes[1] or self.first_loss is not None
                or (self.inspected is not None and self.inspected.differs))


def compare(path_a: str, path_b: str, *, index: int | None = None, rtol: float = 1e-6) -> Comparison:
    """Compare two recordings: pass `index`, or else the first pass in which anything differs."""
    a = Side(path_a)
    try:
        b = Side(path_b)
    except BadInput:
        a.close()
        raise
    try:
        if a.has_fingerprints() and b.has_fingerprints() and a.sketch != b.sketch:
            raise BadInput(f"{path_a} has fingerprints of sketch {a.sketch}, {path_b} of sketch {b.sketch}: "
                           "not comparable (record both with one gradtui)")
        common = sorted(set(a.losses) & set(b.losses))
        if index is not None and index not in common:
            raise BadInput(f"no pass {index} in both recordings ({len(a.losses)} and {len(b.losses)} passes)")
        first_loss = next((i for i in common if loss_distance(a.losses[i], b.losses[i]) > rtol), None)
        inspected = None
        if index is not None:
            inspected = compare_pass(a, b, index, rtol)
        else:
            for i in common:
                result = compare_pass(a, b, i, rtol)
                if result.differs:
                    inspected = result
                    break
        return Comparison(path_a, path_b, (len(a.losses), len(b.losses)), first_loss, inspected,
                          (a.has_prints, b.has_prints), a.script)
    finally:
        a.close()
        b.close()
