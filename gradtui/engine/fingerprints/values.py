"""Fingerprints of a recorded pass's values, for comparing two runs (`gradtui diff`, `--against`).

Each value's fingerprint is its norm and its sign sketch (gradtui.engine.fingerprints.sketch: K numbers
from which two runs' fingerprints alone estimate how far apart the values are), or the value
itself when it is small.

Per node of a recorded pass (`PassPrints.node`, called from the node's posthook):

- the gradients it received (`RECEIVED`) and sent on (`SENT`). A gradient sent to one consumer
  is the tensor that consumer receives (unless it was accumulated or replaced on the way): it
  is sketched once, where it was sent, and the consumer's received print reuses that print
  when it receives the very tensor object, unmodified. A node that sends on a view of what it
  received reuses its received sketch the same way (same memory, version, layout:
  gradtui.engine.fingerprints.moves.same_values), and a node of an op that only moves elements
  (`MOVES_VALUES`: views, transposes, selects...) sends on its received print as it is;
- its forward output (`OUTPUT`): autograd keeps no node's output as such, but the node that
  consumed it usually saved it for its own backward (`_saved_self`, `_saved_mat1`...), and a
  saved tensor's `grad_fn` names the node that produced it; a node that saved its own result
  (`_saved_result`: exp, tanh, sigmoid...) gives it directly. An output no consumer saved (an
  add feeding an add) has no fingerprint: the first consumer that saved something derived from
  it is where a difference shows;
- the saved tensors that no node of the pass produced (`SAVED`: parameters and inputs used
  directly), and its saved non-tensor arguments as text (`approximate='tanh'`, `dim=1`).

What of this the graph fixes (where each gradient a node sends goes, which node made each
tensor it saved, which inputs are a parameter seen another way) is decided once per graph shape
(gradtui.engine.fingerprints.plan) and reused by every pass of that graph; what depends on the values
(the very tensor received, its version, a view's layout, a saved argument) is looked at each pass.

Each value is sketched in the hook, while it is in cache (three small device ops into a
scratch buffer); the results stay on the device and the whole pass comes back to the host in
one read at its end (`event`), so fingerprints add no host read per node. Against a reference
(`--against`) a node's values are read back right after it ran only while a `differs>R`
breakpoint is armed (the stop is decided there); else when `print` asks for both sides.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from gradtui.engine.compat import saved_argument
from gradtui.engine.fingerprints.moves import keeps_sketch, plain, same_values, unmoved
from gradtui.engine.fingerprints.plan import NodeFacts, graph_key, plan_for, saved_names  # noqa: F401 - saved_names re-exported
from gradtui.engine.fingerprints.sketch import (  # noqa: F401 - the sketch's names, re-exported for callers
    CHUNK,
    EXACT_LIMIT,
    SKETCH_VERSION,
    K,
    ReadRow,
    Row,
    buckets_and_norm,
    fingerprint,
    hashed_signs,
    read_numbers,
    read_rows,
    shape2d,
    signs,
)
from gradtui.engine.hooks.plan import sent_shape, shape_and_saved
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Differs
from gradtui.protocol.fingerprints import OUTPUT, RECEIVED, SAVED, SENT, PassAgainst, Value, Values

_Entry = tuple[int, int, int, str]
"""Where a fingerprint goes: node, direction, slot, what it is (a plain tuple: a pass makes
hundreds, and a NamedTuple's constructor is a Python call each; whether it holds the values is
its Row's `exact`)."""


class _Sent(NamedTuple):
    """A gradient sent to a consumer, by weak reference (a reference held would make a leaf's
    accumulator copy it into .grad instead of taking it), its version then, its fingerprint.
    Torch keeps a tensor's Python object while the tensor lives, so the consumer receives
    the very object if it receives the very tensor."""

    tensor: weakref.ref | None
    """None: passed on by a node no posthook noted (`_derive_unhooked`)."""
    version: int
    row: Row
    shape: tuple[int, ...]


class PassPrints:
    """The fingerprints of one recorded pass, gathered node by node (see module doc)."""

    def __init__(
        self, nodes: list[Any], against: PassAgainst | None = None, reference: str = "", slots: list[Any] | None = None
    ) -> None:
        """`against`: the reference recording's pass matched to this one (`--against`), and
        `reference` its name: each node's fingerprints are then read back after it ran (one
        small host read per node) and compared (gradtui.record.against.PassReference is one).
        `slots`: the capture's (gradtui.engine.capture.graph.Capture.slots, one entry per node): the
        per-node decisions are then those of every pass of the same graph shape
        (gradtui.engine.fingerprints.plan); without, made for this pass alone."""
        self._ids = {id(fn): i for i, fn in enumerate(nodes)}
        known = slots is not None and len(slots) == len(nodes)  # a capture's edges, node by node
        self.plan = plan_for(graph_key(nodes, slots) if known and slots is not None else None, len(nodes))
        self._facts = self.plan.known
        """Per node, its NodeFacts where the plan has them already (else None: `plan.facts` makes them)."""
        self.against = against
        self._reference = reference
        """id of a node object -> its node id in the pass (the capture keeps the objects alive)."""
        self._entries: list[_Entry] = []
        self._rows: list[Row] = []
        self._nodes = nodes
        self.unhooked: Callable[[int], bool] | None = None
        """On the hook plan: does node `i` get no posthook (gradtui.engine.hooks.planned sets it)?"""
        self._seen: set[int] = set()
        """Nodes whose posthook called `node` (a planned pass hooks only some: `_derive_unhooked`)."""
        self._sent: dict[tuple[int, int], _Sent | None] = {}
        """(consumer node, its input) -> the one gradient sent there so far (None: several)."""
        self._outputs: set[int] = set()
        """Nodes whose output is fingerprinted already (several consumers may have saved it)."""
        self._zeros: list[ev.Print] = []
        self._params: list[ev.Print] = []
        self._marks = (0, 0, 0)
        """How many entries, zeros and arguments were read back already (`_unread`)."""
        self._read: list[ReadRow] = []
        """The rows read back so far, in order (the pass's end reads only the rest)."""
        self.sketched = 0
        """Values sketched (not reused) in this pass: a count the tests assert."""

    failed: str | None = None
    """Why fingerprinting stopped in this pass (it never breaks the user's backward), or None."""

    def node(
        self, node: int, fn: Any, received: tuple[Any, ...], sent: tuple[Any, ...], watch: tuple[Breakpoint, ...] = ()
    ) -> tuple[Breakpoint, str] | None:
        """Note what `node` (`fn`, the autograd node) received, sent and saved; called after it
        ran. Against a reference, the first of the `differs>R` breakpoints in `watch` that this
        node's values part from the reference's by more than R, with why; else None. A failure
        stops this pass's fingerprints, never the pass."""
        if self.failed is not None:
            return None
        self._seen.add(node)
        try:
            self._node(node, fn, received, sent)
            if self.against is not None and watch:
                return self._compare(node, fn, watch)
        except Exception as exc:  # noqa: BLE001 - a user's odd tensor must not abort their backward
            self.failed = f"{type(exc).__name__}: {exc}"
            self._entries, self._rows, self._sent, self._read = [], [], {}, []
        return None

    def _unread(self) -> Values:
        """The values fingerprinted since the last call, read back (one small host read)."""
        marks, self._marks = self._marks, (len(self._entries), len(self._zeros), len(self._params))
        values: Values = {}
        entries, read = self._entries[marks[0] :], read_rows(self._rows[marks[0] :])
        self._read.extend(read)
        for (node, direction, slot, what), row, r in zip(entries, self._rows[marks[0] :], read):
            values[(node, (direction, slot))] = Value(r.norm, r.data, row.exact, what)
        for p in self._zeros[marks[1] :] + self._params[marks[2] :]:
            values[(p.node, (p.dir, p.slot))] = Value(p.norm, p.sketch, p.exact, p.what)
        return values

    def _compare(self, node: int, fn: Any, watch: tuple[Breakpoint, ...]) -> tuple[Breakpoint, str] | None:
        """Read back what `node` fingerprinted and compare it with the reference (see `node`):
        only while a `differs` breakpoint is armed (else the values are read when `print` asks,
        or with the pass's one read at its end)."""
        assert self.against is not None
        values = self._unread()
        facts = self.plan.facts(node, fn, self._ids)
        parting = self.against.check(
            node, facts.producers, values, min(Differs.value_of(bp.spec) for bp in watch), facts.cast
        )
        if parting is None:
            return None
        bp = next(bp for bp in watch if parting.relative > Differs.value_of(bp.spec))
        return bp, parting.text(self._reference)

    def both_sides(self, node: int) -> list[str]:
        """`print`'s lines of `node`'s values here and in the reference (none without one)."""
        if self.against is None:
            return []
        if self.failed is None:
            try:
                self.against.note(self._unread())
            except Exception as exc:  # noqa: BLE001 - as in `node`
                self.failed = f"{type(exc).__name__}: {exc}"
        return self.against.both_sides(node)

    def _node(self, node: int, fn: Any, received: tuple[Any, ...], sent: tuple[Any, ...]) -> None:
        arrived: list[tuple[torch.Tensor, Row]] = []
        pending, entries, rows = self._sent, self._entries, self._rows
        for slot, grad in enumerate(received):
            if not isinstance(grad, torch.Tensor):
                if pending:
                    pending.pop((node, slot), None)
                continue
            held = pending.pop((node, slot), None) if pending else None
            if held is not None and held.tensor is not None and grad._version == held.version and held.tensor() is grad:
                row: Row | None = held.row
                entries.append((node, RECEIVED, slot, ""))
                rows.append(held.row)
            else:
                row = self._add(grad, node, RECEIVED, slot, "")
            if row is not None:
                arrived.append((grad, row))
        facts = self._facts[node] or self.plan.facts(node, fn, self._ids)
        consumers = facts.consumers
        moves = facts.moves if len(arrived) == 1 and len(sent) == 1 else 0
        for slot, grad in enumerate(sent):
            if not plain(grad):  # None, a ZeroTensor (its zero print), nothing to read
                self._add(grad, node, SENT, slot, "")
                continue
            true = True  # the row is the sketch of `grad` itself
            if moves:
                reuse: Row | None = arrived[0][1]
                true = keeps_sketch(moves, tuple(arrived[0][0].shape), tuple(grad.shape))
            elif arrived:
                reuse = next((row for t, row in arrived if same_values(t, grad)), None)
            else:
                reuse = None
            if reuse is None:
                reuse = fingerprint(grad)
                self.sketched += 1
            entries.append((node, SENT, slot, ""))
            rows.append(reuse)
            if slot >= len(consumers):
                continue
            key = consumers[slot]
            if key is not None:  # sent there by several: summed on the way, not reused
                first = key not in pending
                if not true and first and self.unhooked is not None and self.unhooked(key[0]):
                    reuse, true = fingerprint(grad), True  # no hook will see it arrive: sketched here
                    self.sketched += 1
                pending[key] = (
                    _Sent(weakref.ref(grad), grad._version, reuse, tuple(grad.shape)) if true and first else None
                )
        if facts.saved:
            self._saved(node, fn, facts)

    def _derive_unhooked(self) -> None:
        """The prints of the nodes no posthook noted (a planned pass, gradtui.engine.hooks.planned, hooks
        no view, transpose, select nor weight accumulator with one producer): as the every-node
        hooks make them, from their producer's. What such a node received is what its producer
        sent it (where that print is the tensor's own sketch), what it sends on its received
        print, passed on to a consumer as the every-node hooks would (`keeps_sketch`, from the
        shapes it saved); its saved arguments (a select's dim and index) are read now. A node
        whose received print is not known keeps none (its consumer's hook sketches its own)."""
        todo = deque(key for key in self._sent if key[0] not in self._seen)
        held = dict(self._sent)
        while todo:
            node, slot = todo.popleft()
            arrived = held.get((node, slot))
            if node in self._seen or arrived is None:
                continue
            self._seen.add(node)
            fn = self._nodes[node]
            facts = self.plan.facts(node, fn, self._ids)
            self._append(node, RECEIVED, slot, arrived.row)
            if facts.moves and facts.inputs == (1, 1):  # one input, not None
                shape, saved = shape_and_saved(fn, facts.name)
                sent = shape if shape is not None else sent_shape(facts.name, saved, arrived.shape)
                self._append(node, SENT, 0, arrived.row)
                key = facts.consumers[0]
                if key is not None and key[0] not in self._seen and keeps_sketch(facts.moves, arrived.shape, sent):
                    held[key] = _Sent(None, 0, arrived.row, tuple(sent))
                    todo.append(key)
            self._saved(node, fn, facts)
        seen, known, nodes = self._seen, self.plan.known, self._nodes
        for node in self.plan.with_saved(nodes, self._ids):  # no print known: its saved arguments still are
            if node not in seen:
                made = known[node]
                assert made is not None
                self._saved(node, nodes[node], made)

    def _saved(self, node: int, fn: Any, facts: NodeFacts) -> None:
        """Fingerprint the node's saved values: its inputs' producers' outputs, leaf values, arguments."""
        params = []
        for number, attribute, name, known, producer, text in facts.saved:
            try:
                value = getattr(fn, attribute)
            except RuntimeError:  # released (retain_graph=False after a pause's own use) or unreadable
                continue
            if isinstance(value, torch.Tensor):
                if not known:  # which node made it: the same every pass of this graph
                    made = value.grad_fn
                    entry = self.plan.saved(node, number, self._ids.get(id(made)) if made is not None else None)
                    producer, text = entry.producer, entry.text
                if producer is None:
                    self._add(value, node, SAVED, number, name)
                elif producer not in self._outputs:
                    self._outputs.add(producer)
                    self._add(unmoved(value), producer, OUTPUT, 0, text)
            elif not isinstance(value, (tuple, list)) or not any(isinstance(v, torch.Tensor) for v in value):
                params.append(f"{name}={saved_argument(value)!r}")
        if params:
            self._params.append(ev.Print(node, SAVED, -1, None, (), False, ", ".join(params)))

    def _add(self, t: Any, node: int, direction: int, slot: int, what: str, reuse: Row | None = None) -> Row | None:
        """Fingerprint `t` (or take `reuse`, its values' fingerprint already) for (node, direction, slot)."""
        if not isinstance(t, torch.Tensor):
            return None
        if reuse is None:
            if not plain(t):
                if t._is_zerotensor():
                    self._zeros.append(ev.Print(node, direction, slot, 0.0, (0.0,) * K, False, what))
                return None
            reuse = fingerprint(t)
            self.sketched += 1
        self._entries.append((node, direction, slot, what))
        self._rows.append(reuse)
        return reuse

    def _append(self, node: int, direction: int, slot: int, row: Row, what: str = "") -> None:
        self._entries.append((node, direction, slot, what))
        self._rows.append(row)

    def event(self, index: int) -> ev.PassPrints:
        """The pass's fingerprints as plain data: one host read for the whole pass (none if
        fingerprinting failed in it)."""
        if self.failed is None:
            try:
                self._derive_unhooked()
            except Exception as exc:  # noqa: BLE001 - as in `node`
                self.failed = f"{type(exc).__name__}: {exc}"
        self._sent = {}
        if self.failed is not None:
            return ev.PassPrints(index, ())
        entries, rows = self._entries, self._rows
        self._entries, self._rows = [], []
        out = list(self._zeros) + list(self._params)
        done = len(self._read)
        try:
            numbers = read_numbers(rows[done:])
        except Exception as exc:  # noqa: BLE001 - as in `node`
            self.failed = f"{type(exc).__name__}: {exc}"
            return ev.PassPrints(index, ())
        out.extend(
            ev.Print(node, direction, slot, r.norm, r.data, row.exact, what)
            for (node, direction, slot, what), row, r in zip(entries, rows, self._read)
        )
        at = len(rows) - done  # the bodies follow the norms
        for (node, direction, slot, what), row, norm in zip(entries[done:], rows[done:], numbers):
            length = row.body.numel()
            out.append(ev.Print(node, direction, slot, norm, tuple(numbers[at : at + length]), row.exact, what))
            at += length
        self._last = out
        return ev.PassPrints(index, tuple(out))

    _last: list[ev.Print] = []

    def differences(self, index: int) -> ev.PassDifferences | None:
        """Against a reference, after `event`: each matched node's difference from the
        reference's over every value the pass fingerprinted (the UI's difference column), or
        None without a reference or when fingerprinting failed in this pass."""
        if self.against is None or self.failed is not None:
            return None
        self.against.note({(p.node, (p.dir, p.slot)): Value(p.norm, p.sketch, p.exact, p.what) for p in self._last})
        nodes = tuple(
            ev.NodeDifference(node, forward, gradient) for node, forward, gradient in self.against.differences()
        )
        known = [n.largest for n in nodes if n.largest is not None]
        return ev.PassDifferences(index, self._reference, nodes, max(known) if known else None, self.against.only_here)
