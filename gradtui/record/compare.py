"""Where two recordings part (`gradtui diff`): nodes matched across runs, the first difference.

Node ids are per pass and per run, so nodes match by a stable key: (op, source `file:line`,
module path, parameter name) and the occurrence among the pass's nodes with that key in forward
order (autograd's sequence number; leaves' accumulators after every op). B's places are first
put in A's terms (gradtui.record.files: a script under another name, lines that moved). A key
on one side only is a graph change, named first.

What is compared is what both recordings hold, and a verdict says which:

- every pass both have: its losses and its parameters' gradient norms (the `flow`), always;
- a pass both recorded per node: each matched node's gradients. With fingerprints on both sides
  (gradtui.engine.fingerprints.values, the `prints` table) exactly where both recorded the
  values (at most 64 elements), else by the sketches' estimate of ‖a − b‖ over the larger norm;
  and its forward values too. Once one forward value differs every gradient from the loss down
  differs, so such a pass names two things: the first node in forward order whose forward value
  (its output, a saved leaf value, its saved arguments) differs beyond `rtol` (a forward
  change), and the first node in the order the backward ran that received what the other run's
  received but sent on something else while its forward agrees (a backward-only change: a
  custom backward, a hook, a changed derivative).
- Where either side has no fingerprints of the pass (a plain `--record`, an older gradtui),
  the gradients are compared by what both `grads` tables hold: the values of tensors of at most
  64 elements exactly, else a lower bound of ‖a − b‖ from the recorded norm, min, max and mean
  (each of |Δnorm|, |Δmax|, |Δmin|, √n·|Δmean| is at most ‖a − b‖). The forward is then not
  compared, and the pass names the first node, in the order the backward ran, that received
  what the other run's received but sent on something else: where the gradients part.

A value recorded on one side only (autocast's casts save other tensors) is counted as such,
never given a number.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from array import array
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gradtui.protocol.fingerprints import OUTPUT, RECEIVED, SAVED, SENT, Value, estimate_distance  # noqa: F401 - compare's names too
from gradtui.protocol.stats import Stats
from gradtui.record import readonly, rows, schema
from gradtui.record.files import FileMap, match_files


class BadInput(Exception):
    """A file that cannot be compared (missing, not a recording, no such pass): one line."""


@dataclass(frozen=True)
class Node:
    """A recorded node of one pass, with its fingerprints (or gradients' statistics) keyed by (dir, slot)."""

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
    stats: dict[tuple[int, int], Stats] = field(default_factory=dict, compare=False, hash=False)
    """Its gradients' recorded statistics (`Side.nodes(prints=False)`), read as a replay reads them
    (gradtui.record.rows.stats)."""

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
    """One recording opened read-only for comparison (gradtui.record.readonly: nothing is
    written beside it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # read-only and read by one thread at a time: a live run's passes may run on any thread
            self._db = readonly.connect(path)
            schema.check_version(self._db)
            schema.require_tables(self._db, ("run", "passes", "nodes", "grads", "flow"))
            self.has_prints = schema.has_prints(self._db)
            self.sketch = schema.sketch_version(self._db)
            """Which sketch its fingerprints were made with (None: it has none; schema.SKETCH_VERSION)."""
            run = self._db.execute("SELECT script FROM run").fetchone()
            self.script: str | None = run[0] if run else None
            passes = self._db.execute("SELECT idx, losses, per_node FROM passes ORDER BY idx").fetchall()
            self.losses = {i: tuple(_num(v) for v in json.loads(text or "[]")) for i, text, _ in passes}
        except schema.NotARecording as exc:
            raise BadInput(f"{path}: {exc}") from None
        except sqlite3.Error as exc:
            raise BadInput(f"{path}: {schema.unreadable(exc)}") from None
        except (ValueError, TypeError) as exc:  # a losses cell that is not a JSON list of numbers
            raise BadInput(f"{path}: damaged: its passes table cannot be read ({exc})") from None
        self.per_node = {i for i, _, per in passes if per}

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def has_fingerprints(self) -> bool:
        """Was it recorded with fingerprints (a `prints` table with rows)?"""
        return self.has_prints and self._db.execute("SELECT 1 FROM prints LIMIT 1").fetchone() is not None

    def fingerprinted(self, index: int) -> bool:
        """Has pass `index` fingerprints (rows in `prints`; a plain recording has the table, empty)?"""
        return (
            self.has_prints
            and self._db.execute("SELECT 1 FROM prints WHERE pass = ? LIMIT 1", (index,)).fetchone() is not None
        )

    def sources(self, index: int) -> set[str | None]:
        """The `file:line` places of pass `index`'s nodes."""
        return {row[0] for row in self._db.execute("SELECT DISTINCT source FROM nodes WHERE pass = ?", (index,))}

    def flow(self, index: int) -> dict[str, float | None]:
        """Parameter name -> gradient norm after pass `index`."""
        return {
            name: _num(norm)
            for name, norm in self._db.execute("SELECT name, grad_norm FROM flow WHERE pass = ?", (index,))
        }

    def nodes(self, index: int, prints: bool = True) -> list[Node]:
        """Pass `index`'s nodes in forward order, with their fingerprints (`prints`, where it has
        them), else with their gradients' recorded statistics (`Node.stats`)."""
        query = "SELECT id, op, source, module, param, seq, ord, next FROM nodes WHERE pass = ?"
        nodes = {
            row[0]: Node(*row[:7], tuple(json.loads(row[7] or "[]")))  # type: ignore[call-arg]  # 7 columns, 7 fields
            for row in self._db.execute(query, (index,))
        }
        if self.has_prints and prints:
            query = "SELECT node, dir, slot, norm, exact, sketch, what FROM prints WHERE pass = ?"
            for node, d, slot, norm, exact, blob, what in self._db.execute(query, (index,)):
                found = nodes.get(node)
                if found is not None:
                    found.values[(d, slot)] = Value(_num(norm), _floats(blob), bool(exact), signed_text(what or ""))
        else:
            recorded = self._db.execute(
                f"SELECT node, dir, slot, {schema.grad_columns(self._db)} FROM grads WHERE pass = ?", (index,)
            ).fetchall()
            for row in recorded:
                try:
                    node, d, slot, stats = rows.stats(row, len(recorded))
                except rows.BadRow:  # a damaged row: compared as a gradient not recorded
                    continue
                if stats is not None and node in nodes:
                    nodes[node].stats[(d, slot)] = stats
        # Forward order: autograd numbers nodes as the forward makes them; accumulators (leaves,
        # numbered 2**64 - 1, stored as -1) come after every op.
        return sorted(nodes.values(), key=lambda n: (n.seq < 0, n.seq, n.id))


_UNSIGNED = re.compile(r"(?<![\w.])(1[0-9]{19})(?![\w.])")


def signed_text(text: str) -> str:
    """Saved arguments' text with 64-bit numbers as signed (`padding_idx=-1`): torch reads some
    int64 saved arguments back as unsigned, and recordings made before gradtui turned them back
    hold `padding_idx=18446744073709551615`."""

    def signed(m: re.Match[str]) -> str:
        n = int(m.group(1))
        return str(n - (1 << 64)) if 1 << 63 <= n < 1 << 64 else m.group(1)

    return _UNSIGNED.sub(signed, text) if text else text


def distance(a: Value, b: Value) -> float:
    """How far apart two fingerprinted values are, relative to the larger norm (0: equal, inf: not finite)."""
    if a.exact != b.exact or (a.data and b.data and len(a.data) != len(b.data)):
        return math.inf  # different shapes
    if a.data == b.data and _same(a.norm, b.norm):
        return 0.0
    if not a.data or not b.data:  # no values nor sketch: the norms
        if a.norm is None or b.norm is None:
            return 0.0 if a.norm is None and b.norm is None else math.inf
        return _relative(abs(a.norm - b.norm), a.norm, b.norm)
    if not all(map(math.isfinite, a.data + b.data)):
        return 0.0 if all(_same(x, y) for x, y in zip(a.data, b.data)) else math.inf
    apart = estimate_distance(a.data, b.data)
    na = a.norm if a.norm is not None and math.isfinite(a.norm) else 0.0
    nb = b.norm if b.norm is not None and math.isfinite(b.norm) else 0.0
    return _relative(apart, na, nb)


def stats_distance(a: Stats, b: Stats) -> tuple[float, bool]:
    """How far apart two gradients are by their recorded statistics, relative to the larger norm,
    and whether that is exact (both hold the values) or a lower bound (see the module doc).
    inf: different shapes, or non-finite where the other is not."""
    if a.shape != b.shape:
        return math.inf, True
    if a.values and b.values:
        if not all(map(math.isfinite, a.values + b.values)):
            return (0.0 if all(_same(x, y) for x, y in zip(a.values, b.values)) else math.inf), True
        return _relative(math.dist(a.values, b.values), a.norm or 0.0, b.norm or 0.0), True
    pairs = ((a.norm, b.norm), (a.min, b.min), (a.max, b.max), (a.mean, b.mean))
    if a.nonfinite or b.nonfinite or not all(x is not None and math.isfinite(x) for p in pairs for x in p):
        return (0.0 if a.nonfinite == b.nonfinite and all(_same(x, y) for x, y in pairs) else math.inf), False
    size = math.prod(a.shape)
    bound = max(
        abs(a.norm - b.norm),
        abs(a.min - b.min),  # type: ignore[operator]
        abs(a.max - b.max),  # type: ignore[operator]
        math.sqrt(size) * abs(a.mean - b.mean),  # type: ignore[operator]
    )
    return _relative(bound, a.norm, b.norm), False


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
    one_side: bool = False
    """The value was recorded on one side only (`relative` is then inf, and never shown)."""
    bound: bool = False
    """`relative` is a lower bound from recorded statistics (a recording without fingerprints)."""


@dataclass(frozen=True)
class FlowDifference:
    """A parameter whose gradient norm after the pass differs (None: on that side only)."""

    name: str
    norm_a: float | None
    norm_b: float | None
    relative: float


@dataclass
class ModuleRow:
    """One module's largest relative differences over its matched nodes (None: nothing of that
    kind compared), and how many of its values were recorded on one side only."""

    module: str
    forward: float | None = None
    gradient: float | None = None
    one_side: int = 0


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
    modules: list[ModuleRow]
    """Largest difference first."""
    gradients_differ: bool
    flow: list[FlowDifference]
    per_node: tuple[bool, bool] = (True, True)
    """Has each side per-node data of this pass (nodes, gradients)?"""
    fingerprints: tuple[bool, bool] = (True, True)
    """Has each side fingerprints of this pass (the forward is compared only where both have)?"""
    gradient: Difference | None = None
    """Where the gradients part: the first node in the order the backward ran whose sent gradient
    differs while what it received agrees (else the largest gradient difference)."""
    one_side: int = 0
    """Values of matched nodes recorded on one side only."""
    gradient_parts: bool = True
    """Is `gradient` where the gradients part (else no node fits that, and it is the largest difference)?"""

    @property
    def flow_differs(self) -> bool:
        """Does a parameter's gradient norm differ beyond the tolerance?"""
        return bool(self.flow)

    @property
    def compared_per_node(self) -> bool:
        """Were nodes compared (both sides have per-node data of this pass)?"""
        return all(self.per_node)

    @property
    def forward_compared(self) -> bool:
        """Were forward values compared (both sides have nodes and fingerprints of this pass)?"""
        return self.compared_per_node and all(self.fingerprints)

    @property
    def differs(self) -> bool:
        """Does anything in this pass differ beyond the tolerance?"""
        return bool(
            self.only_a
            or self.only_b
            or self.forward
            or self.backward_only
            or self.gradients_differ
            or self.flow
            or self.loss_difference > 0
            or self.one_side
        )


def match(
    a: list[Node], b: list[Node], place: Callable[[str | None], Hashable] | None = None
) -> tuple[list[tuple[Node, Node]], list[Node], list[Node]]:
    """Pairs of nodes with the same key and occurrence (in A's forward order), and those on one
    side only; `place` puts B's `source` in A's terms (gradtui.record.files.FileMap.place)."""

    def keyed(nodes: list[Node], where: Callable[[str | None], Hashable]) -> dict[tuple, Node]:
        seen: dict[tuple, int] = defaultdict(int)
        out = {}
        for n in nodes:
            base = (n.op, where(n.source), n.module, n.param)
            out[(*base, seen[base])] = n
            seen[base] += 1
        return out

    ka, kb = keyed(a, lambda s: s), keyed(b, place or (lambda s: s))
    pairs = [(n, kb[k]) for k, n in ka.items() if k in kb]
    return pairs, [n for k, n in ka.items() if k not in kb], [n for k, n in kb.items() if k not in ka]


def _worst(na: Node, nb: Node, dirs: tuple[int, ...]) -> Difference | None:
    """The fingerprinted value of `dirs` that differs most between two matched nodes (None: none recorded)."""
    found = None
    for slot in sorted(set(na.values) | set(nb.values)):
        if slot[0] not in dirs:
            continue
        va, vb = na.values.get(slot), nb.values.get(slot)
        if va is None or vb is None:
            d = Difference(
                na,
                nb,
                slot,
                math.inf,
                True,
                (va or vb).what,  # type: ignore[union-attr]
                (va.norm if va else None, vb.norm if vb else None),
                one_side=True,
            )
        elif slot[1] == -1:  # saved arguments, as text: `arguments`
            continue
        else:
            d = Difference(na, nb, slot, distance(va, vb), va.exact and vb.exact, va.what, (va.norm, vb.norm))
        if found is None or d.relative > found.relative:
            found = d
    return found


def _worst_stats(na: Node, nb: Node, dirs: tuple[int, ...]) -> Difference | None:
    """The recorded gradient of `dirs` that differs most by its statistics (None: none recorded)."""
    found = None
    for slot in sorted(set(na.stats) | set(nb.stats)):
        if slot[0] not in dirs:
            continue
        sa, sb = na.stats.get(slot), nb.stats.get(slot)
        if sa is None or sb is None:
            d = Difference(
                na, nb, slot, math.inf, True, "", (sa.norm if sa else None, sb.norm if sb else None), one_side=True
            )
        else:
            rel, exact = stats_distance(sa, sb)
            what = f"shape {list(sa.shape)} vs {list(sb.shape)}" if sa.shape != sb.shape else ""
            d = Difference(na, nb, slot, rel, exact, what, (sa.norm, sb.norm), bound=not exact)
        if found is None or d.relative > found.relative:
            found = d
    return found


class Valued(Protocol):
    """What `arguments` reads of a node: its values (a Node, or a live node's values)."""

    @property
    def values(self) -> dict[tuple[int, int], Value]: ...


def arguments(na: Valued, nb: Valued) -> str | None:
    """`A's saved arguments vs B's` where they differ (`approximate='none' vs approximate='tanh'`), else None."""
    va, vb = na.values.get((SAVED, -1)), nb.values.get((SAVED, -1))
    ta, tb = va.what if va else "", vb.what if vb else ""
    return None if ta == tb else f"{ta or '(none)'} vs {tb or '(none)'}"


def flow_differences(fa: dict[str, float | None], fb: dict[str, float | None], rtol: float) -> list[FlowDifference]:
    """The parameters whose gradient norms differ beyond `rtol` (or are on one side only), largest first."""
    out = []
    for name in sorted(set(fa) | set(fb)):
        if name not in fa or name not in fb:
            out.append(FlowDifference(name, fa.get(name), fb.get(name), math.inf))
            continue
        rel = loss_distance((fa[name],), (fb[name],))
        if rel > rtol:
            out.append(FlowDifference(name, fa[name], fb[name], rel))
    return sorted(out, key=lambda f: (-f.relative, f.name))


def _rel(d: Difference | None) -> float:
    return d.relative if d is not None and not d.one_side else 0.0


def compare_pass(a: Side, b: Side, index: int, rtol: float, files: FileMap | None = None) -> PassComparison:
    """Compare pass `index` of two recordings (per-node data where both have it; forward values
    where both have fingerprints of it)."""
    losses = (a.losses.get(index, ()), b.losses.get(index, ()))
    loss_diff = loss_distance(*losses)
    flow = flow_differences(a.flow(index), b.flow(index), rtol)
    per_node = (index in a.per_node, index in b.per_node)
    prints = (a.fingerprinted(index), b.fingerprinted(index))
    if not all(per_node):
        return PassComparison(
            index,
            losses,
            loss_diff if loss_diff > rtol else 0.0,
            [],
            [],
            0,
            None,
            None,
            [],
            False,
            flow,
            per_node,
            prints,
        )
    both = all(prints)  # else both sides compare what both have: the gradients' statistics
    if files is None:
        files = match_files(a.script, b.script, a.sources(index), b.sources(index))
    pairs, only_a, only_b = match(a.nodes(index, both), b.nodes(index, both), files.place)
    forward = backward = None
    modules: dict[str, ModuleRow] = {}
    grads_differ = False
    one_side = 0
    checked = []
    output_differs: set[int] = set()
    """A's ids of nodes whose own forward output or arguments differ."""
    for na, nb in pairs:  # forward order
        if both:
            fwd = _worst(na, nb, (OUTPUT, SAVED))
            received, sent = _worst(na, nb, (RECEIVED,)), _worst(na, nb, (SENT,))
            sides = {s for s in set(na.values) ^ set(nb.values) if s[1] != -1}
        else:
            fwd = None
            received, sent = _worst_stats(na, nb, (RECEIVED,)), _worst_stats(na, nb, (SENT,))
            sides = set(na.stats) ^ set(nb.stats)
        one_side += len(sides)
        checked.append((na, nb, received, sent))
        f_rel = fwd.relative if fwd else 0.0
        changed = arguments(na, nb) if both else None
        g_rel = max(_rel(received), _rel(sent))
        grads_differ = grads_differ or g_rel > rtol
        if f_rel > rtol or changed:
            output_differs.add(na.id)
            if forward is None:
                forward = (
                    fwd
                    if fwd is not None and f_rel > rtol
                    else Difference(na, nb, (SAVED, -1), 0.0, True, "", (None, None))
                )
                forward.arguments = changed
        if na.module:
            row = modules.setdefault(na.module, ModuleRow(na.module))
            row.one_side += len(sides)
            if both and fwd is not None and not fwd.one_side:
                row.forward = max(row.forward or 0.0, f_rel)
            if any(d is not None and not d.one_side for d in (received, sent)):
                row.gradient = max(row.gradient or 0.0, g_rel)
    # A node's forward agrees if its own values and arguments do and so do its inputs (the
    # outputs of the nodes that made them): a loss fed a changed output changes its gradient.
    run_order = sorted(checked, key=lambda c: (c[0].ord is None, c[0].ord or 0))
    parting = None
    for na, _nb, received, sent in run_order:
        if (
            (received is None or (not received.one_side and received.relative <= rtol))
            and sent is not None
            and sent.relative > rtol
        ):
            if parting is None:
                parting = sent
            inputs_agree = na.id not in output_differs and not any(n in output_differs for n in na.next)
            if both and inputs_agree:
                backward = sent
                break
    parts = parting is not None
    if parting is None and grads_differ:
        parting = max((d for c in checked for d in c[2:] if d is not None and not d.one_side), key=lambda d: d.relative)
    table = sorted(modules.values(), key=lambda r: (-max(r.forward or 0.0, r.gradient or 0.0), -r.one_side, r.module))
    return PassComparison(
        index,
        losses,
        loss_diff if loss_diff > rtol else 0.0,
        only_a,
        only_b,
        len(pairs),
        forward,
        backward,
        table,
        grads_differ,
        flow,
        per_node,
        prints,
        parting,
        one_side,
        parts,
    )


@dataclass
class Comparison:
    """Two recordings compared: the first pass whose losses differ, and the pass looked into."""

    a: str
    b: str
    passes: tuple[int, int]
    first_loss: int | None
    inspected: PassComparison | None
    fingerprints: tuple[bool, bool]
    """Has each recording any fingerprints (rows, not just the table)?"""
    script: str | None = None
    """A's script (its folder is where the source lines are looked up)."""
    script_b: str | None = None
    """B's script."""
    files: FileMap | None = None
    """How B's files were matched to A's (in the pass looked into)."""
    first_loss_values: tuple[tuple[float | None, ...], tuple[float | None, ...]] | None = None
    """Both sides' losses in pass `first_loss`."""
    per_node_passes: int = 0
    """How many passes both recorded per node (their nodes compared)."""
    per_node_one_side: tuple[int, int] = (0, 0)
    """How many of the passes both hold only A, only B recorded per node (their nodes not compared)."""

    @property
    def differs(self) -> bool:
        """Does anything differ (exit status 1 of `gradtui diff`)?"""
        return (
            self.passes[0] != self.passes[1]
            or self.first_loss is not None
            or (self.inspected is not None and self.inspected.differs)
        )


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
            raise BadInput(
                f"{path_a} has fingerprints of sketch {a.sketch}, {path_b} of sketch {b.sketch}: "
                "not comparable (record both with one gradtui)"
            )
        common = sorted(set(a.losses) & set(b.losses))
        if index is not None and index not in common:
            raise BadInput(f"no pass {index} in both recordings ({len(a.losses)} and {len(b.losses)} passes)")
        first_loss = next((i for i in common if loss_distance(a.losses[i], b.losses[i]) > rtol), None)
        # B's files in A's terms, matched once, on the first pass both recorded per node (a file
        # that first runs later is taken by its name)
        first = index if index is not None else next((i for i in common if i in a.per_node and i in b.per_node), None)
        files = match_files(a.script, b.script, a.sources(first), b.sources(first)) if first is not None else None
        inspected = None
        if index is not None:
            inspected = compare_pass(a, b, index, rtol, files)
        else:
            for i in common:
                result = compare_pass(a, b, i, rtol, files)
                if result.differs:
                    inspected = result
                    break
        loss_values = (a.losses[first_loss], b.losses[first_loss]) if first_loss is not None else None
        return Comparison(
            path_a,
            path_b,
            (len(a.losses), len(b.losses)),
            first_loss,
            inspected,
            (a.has_fingerprints(), b.has_fingerprints()),
            a.script,
            b.script,
            files,
            loss_values,
            len(a.per_node & b.per_node & set(common)),
            (len((a.per_node - b.per_node) & set(common)), len((b.per_node - a.per_node) & set(common))),
        )
    finally:
        a.close()
        b.close()
