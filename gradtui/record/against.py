"""A live run against a reference recording (`gradtui --against REF.db`, `break differs>R`).

Each hooked pass is matched to the reference's pass of the same index, node by node, by
compare.py's stable key (op, `file:line`, module, parameter, occurrence in forward order). As
the backward runs, each node's fingerprints (gradtui.engine.fingerprints.values) are compared with its
match's (`PassReference.check`), and the node where the runs part is named:

- a **forward** change: the node's saved arguments differ (`approximate='tanh'`), a leaf value
  it saved differs (data, a parameter), or its forward output differs while the outputs of the
  nodes that made its inputs agree (each known: saved by this node). The backward meets the
  consumers of a changed value first, but they see a changed *input*, so they are passed over;
  the node whose own output changed is where the forward parted;
- a **backward-only** change: the node received what the reference's received, its forward
  agrees, and it sent on something else (a custom `backward`, a hook, a changed derivative).

An input made by a node on this side only (a graph change: the casts autocast adds) is compared
with the reference's input in the same place (the output of the reference's producer there),
and a parameter seen through a transpose or a cast that no node saved is not an input that
changed: so fp32 against bf16 autocast stops at the first op whose own output is off.

Torch-free: the values compared are plain data (gradtui.protocol.fingerprints: Value, Parting;
PassReference is the engine's PassAgainst).
"""

from __future__ import annotations

import math
import os
import sqlite3

from gradtui.protocol.fingerprints import OUTPUT, RECEIVED, SAVED, SENT, Parting, Value, Values
from gradtui.protocol.fingerprints import norm_text as _norm
from gradtui.protocol.nodes import NodeInfo
from gradtui.record import compare, schema

_UNSIGNED = 1 << 63


def _seq(n: int) -> int:
    """A sequence number as the recording stores it (a leaf's 2**64 - 1 as -1)."""
    return n - (1 << 64) if n >= _UNSIGNED else n


_DIRS = {
    RECEIVED: "the gradient it received",
    SENT: "the gradient it sent",
    OUTPUT: "its forward output",
    SAVED: "its saved value",
}


def describe(slot: tuple[int, int], what: str) -> str:
    """`its saved value mat2`, `the gradient it sent (input 1)`: a value's name in a report."""
    direction, number = slot
    if direction == SAVED:
        return f"{_DIRS[SAVED]} {what}".rstrip()
    if direction == OUTPUT:
        return _DIRS[OUTPUT] + (f" ({what})" if what else "")
    return f"{_DIRS[direction]} (slot {number})"


class PassReference:
    """One pass's reference nodes, matched to this run's (see module doc)."""

    def __init__(
        self,
        matched: dict[int, compare.Node],
        only_here: int,
        only_there: int,
        theirs: dict[int, compare.Node] | None = None,
    ) -> None:
        self.matched = matched
        """This run's node id -> the reference's node."""
        self.theirs = theirs if theirs is not None else {n.id: n for n in matched.values()}
        """The reference's nodes of the pass by their id (matched or not)."""
        self.only_here, self.only_there = only_here, only_there
        self.values: dict[int, dict[tuple[int, int], Value]] = {}
        """This run's values so far, per node (those compared)."""

    def _apart(self, node: int, slot: tuple[int, int]) -> tuple[float, Value, Value] | None:
        """How far this run's value of (node, slot) is from the reference's: None if either is unknown."""
        ref = self.matched.get(node)
        mine = self.values.get(node, {}).get(slot)
        theirs = ref.values.get(slot) if ref is not None else None
        if mine is None or theirs is None:
            return None
        return compare.distance(mine, theirs), mine, theirs

    def note(self, values: Values) -> None:
        """Record this run's `values` ((node, (dir, slot)) -> Value) for later checks and `print`."""
        known = self.values
        for (owner, slot), value in values.items():
            found = known.get(owner)
            if found is None:
                found = known[owner] = {}
            found[slot] = value

    def _input(self, producer: int, there: int | None) -> tuple[float, Value, Value] | None:
        """How far the output of `producer` (this run's node that made an input) is from the
        reference's input in the same place: its match's output, or, where `producer` is on this
        side only (a graph change: autocast's casts), the output of the reference's producer of
        that input (`there`)."""
        if producer in self.matched:
            return self._apart(producer, (OUTPUT, 0))
        ref = self.theirs.get(there) if there is not None else None
        mine = self.values.get(producer, {}).get((OUTPUT, 0))
        theirs = ref.values.get((OUTPUT, 0)) if ref is not None else None
        if mine is None or theirs is None:
            return None
        return compare.distance(mine, theirs), mine, theirs

    def _inputs(
        self, ref: compare.Node, producers: tuple[int | None, ...], leafish: tuple[bool, ...]
    ) -> list[tuple[float, Value, Value] | None]:
        """Each input's distance from the reference's (see `_input`; None: not known). Left out:
        an input made by a leaf on the reference's side and a leaf or a cast of one here, and a
        parameter's value seen through a transpose or a cast (`leafish`) that no node saved on
        either side (`w.t()` when the layer's input needs no gradient)."""
        out = []
        for slot, producer in enumerate(producers):
            there = ref.next[slot] if slot < len(ref.next) else None
            made_there = there is not None and there in self.theirs and self.theirs[there].seq >= 0
            if producer is None or (producer not in self.matched and not made_there):
                continue
            found = self._input(producer, there)
            if found is None and slot < len(leafish) and leafish[slot]:
                continue
            out.append(found)
        return out

    def check(
        self, node: int, producers: tuple[int | None, ...], values: Values, rtol: float, leafish: tuple[bool, ...] = ()
    ) -> Parting | None:
        """Record `values` ((node, (dir, slot)) -> Value: what `node`'s posthook fingerprinted;
        an output belongs to its maker) and say whether the runs part at `node` by more than
        `rtol` (see module doc). `producers`: per input of the node, the node that made it (None
        for a leaf's accumulator or no input); `leafish`: per input, whether it is a parameter's
        value seen through a transpose or a cast (see `_inputs`)."""
        self.note(values)
        ref = self.matched.get(node)
        if ref is None:
            return None
        mine = self.values.get(node, {})
        if (arguments := compare.arguments(_Args(mine), ref)) is not None:
            return Parting(node, "forward", "its arguments", math.inf, (None, None), arguments)
        for slot in sorted(s for s in mine if s[0] == SAVED and s[1] >= 0):
            if (found := self._apart(node, slot)) is not None and found[0] > rtol:
                return Parting(node, "forward", describe(slot, found[1].what), found[0], (found[1].norm, found[2].norm))
        inputs = self._inputs(ref, producers, leafish)
        inputs_agree = all(found is not None and found[0] <= rtol for found in inputs)
        output = self._apart(node, (OUTPUT, 0))
        if output is not None and output[0] > rtol:
            if not inputs_agree:
                return None  # an input changed upstream: the node that changed it is named there
            return Parting(node, "forward", describe((OUTPUT, 0), ""), output[0], (output[1].norm, output[2].norm))
        if any(found is not None and found[0] > rtol for found in inputs):
            return None
        for direction in (RECEIVED, SENT):
            for slot in sorted(s for s in mine if s[0] == direction):
                found = self._apart(node, slot)
                if found is None or found[0] <= rtol:
                    continue
                if direction == RECEIVED:
                    return None  # what it received differs already: named where that was sent
                return Parting(node, "backward", describe(slot, ""), found[0], (found[1].norm, found[2].norm))
        return None

    def differences(self) -> list[tuple[int, float | None, float | None]]:
        """(node, forward, gradient) for every matched node: the largest relative difference of
        its forward values (output, saved values) and of its gradients from its match's, over
        the values known on both sides (None: none of that kind), in node order."""
        out = []
        for node in sorted(self.matched):
            ref = self.matched[node]
            forward = gradient = None
            for slot, mine in self.values.get(node, {}).items():
                theirs = ref.values.get(slot)
                if slot[1] < 0 or theirs is None:
                    continue
                apart = compare.distance(mine, theirs)
                if slot[0] in (OUTPUT, SAVED):
                    forward = apart if forward is None else max(forward, apart)
                else:
                    gradient = apart if gradient is None else max(gradient, apart)
            out.append((node, forward, gradient))
        return out

    def both_sides(self, node: int) -> list[str]:
        """Lines for `print`: each value of `node` here and in the reference, and how far apart."""
        ref = self.matched.get(node)
        if ref is None:
            return ["reference: no node matches this one"]
        lines = [f"reference: #{ref.id} {ref.where()}"]
        mine = self.values.get(node, {})
        for slot in sorted(set(mine) | set(ref.values)):
            if slot[1] == -1:
                continue
            a, b = mine.get(slot), ref.values.get(slot)
            rel = compare.distance(a, b) if a is not None and b is not None else math.inf
            name = describe(slot, (a or b).what)  # type: ignore[union-attr]  # slot is a key of one side at least
            lines.append(
                f"  {name}: norm {_norm(a.norm if a else None)} here, {_norm(b.norm if b else None)} "
                f"there, apart {rel:.3g}"
            )
        return lines


class _Args:
    """Just what compare.arguments reads of a node: its values."""

    def __init__(self, values: dict[tuple[int, int], Value]) -> None:
        self.values = values


HELD_NODES = 20_000
"""Reference nodes read into memory as a Reference is made, at most (a few MB): its first
passes with per-node data, whole passes only."""


class Reference:
    """A reference recording for a live run (`--against REF.db`). Its first passes with per-node
    data are read into memory as it is made (before the script runs: `HELD_NODES`), so a pass
    compared with one of them reads nothing in the user's backward; a later pass is read where
    it is first asked for (the thread that runs the backward: sqlite connections stay on their
    thread). `check` opens it once at once, so a bad file is bad input before the script runs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._side: compare.Side | None = None
        self._why: tuple[str, str] | None = None
        """Why the last pass asked about has nothing to be compared with: (kind, one line), or None."""
        self._said: set[str] = set()
        """The kinds of line `notice` returned (each is said once)."""
        self._held: dict[int, list[compare.Node]] = {}
        """Passes read already (by index): their nodes in forward order, with their fingerprints."""
        self._per_node: set[int] | None = None
        """The passes that have per-node data, once known (None: not read yet)."""
        self._sketch: int | None = None
        self._hold()

    def _hold(self) -> None:
        """Read the first passes with per-node data (up to HELD_NODES nodes) into memory; a
        recording that cannot be read now is left to `pass_reference`, which says why."""
        try:
            side = compare.Side(self.path)
        except (compare.BadInput, sqlite3.Error, ValueError, OSError):
            return
        try:
            if side.sketch != schema.SKETCH_VERSION:
                return
            held = 0
            for index in sorted(side.per_node):
                nodes = side.nodes(index)
                if held + len(nodes) > HELD_NODES:
                    break
                self._held[index] = nodes
                held += len(nodes)
            self._per_node, self._sketch = side.per_node, side.sketch
        except (compare.BadInput, sqlite3.Error, ValueError):
            self._held = {}
        finally:
            side.close()

    def held(self) -> list[int]:
        """The passes held in memory (read as it was made), by index."""
        return sorted(self._held)

    @staticmethod
    def check(path: str) -> None:
        """Raise compare.BadInput if `path` is not a recording this gradtui reads, or has no
        fingerprints to compare with."""
        side = compare.Side(path)
        try:
            if not side.has_fingerprints():
                raise compare.BadInput(
                    f"{path}: no fingerprints to compare with (record it with --record DB --fingerprints)"
                )
            if side.sketch != schema.SKETCH_VERSION:
                raise compare.BadInput(
                    f"{path}: its fingerprints are of sketch {side.sketch}, this gradtui makes "
                    f"sketch {schema.SKETCH_VERSION}: record the reference again"
                )
        finally:
            side.close()

    def close(self) -> None:
        """Close the recording."""
        if self._side is not None:
            self._side.close()
            self._side = None

    def pass_reference(self, index: int, infos: list[NodeInfo]) -> PassReference | None:
        """Pass `index` of the reference matched to this run's pass (its nodes' NodeInfo, as
        captured), or None if the reference has no per-node data of that pass, or
        cannot be read now (the run is never stopped by its reference's troubles); `notice` then
        says why."""
        self._why = None
        try:
            theirs = self._held.get(index)
            if theirs is None:
                theirs = self._read(index)
            if theirs is None:
                return None
        except (compare.BadInput, sqlite3.Error, ValueError) as exc:
            self._why = (
                "unreadable",
                f"the reference {self.path} cannot be compared with this run: it cannot be read "
                f"({exc}): `break differs` cannot stop",
            )
            return None
        # a live pass's nodes all carry autograd's sequence number (None is a recording's, not read)
        here = sorted(
            (
                compare.Node(i, a.name, a.source, a.module, a.param, _seq(a.seq), None)  # type: ignore[arg-type]
                for i, a in enumerate(infos)
            ),
            key=lambda n: (n.seq < 0, n.seq, n.id),
        )
        pairs, only_here, only_there = compare.match(here, theirs)
        if not pairs and here:
            what = (
                f"its pass {index} has no node recorded (damaged?)"
                if not theirs
                else f"no node of pass {index} matches one of its pass {index} (a different model or script?)"
            )
            self._why = (
                "no match",
                f"the reference {self.path} cannot be compared with this run: {what}: `break differs` cannot stop",
            )
        return PassReference({a.id: b for a, b in pairs}, len(only_here), len(only_there), {n.id: n for n in theirs})

    def _read(self, index: int) -> list[compare.Node] | None:
        """Pass `index`'s nodes, read from the recording (opened here, on the backward's thread),
        or None where it has none to compare with (`_why` says why)."""
        per_node, sketch = self._per_node, self._sketch
        if per_node is None:
            if self._side is None:
                self._side = compare.Side(self.path)
            per_node, sketch = self._side.per_node, self._side.sketch
        if index not in per_node:
            self._why = (
                "no pass",
                f"pass {index} has no counterpart in the reference {self.path} (it has no "
                f"per-node data of pass {index}): `break differs` cannot stop in it, nor in later "
                "passes without one",
            )
            return None
        if sketch != schema.SKETCH_VERSION:
            return None  # refused before the run (`check`)
        if self._side is None:
            self._side = compare.Side(self.path)
        return self._side.nodes(index)

    def notice(self) -> str | None:
        """A line to tell the user about the pass `pass_reference` was last asked about: why it
        has nothing to be compared with; each kind of reason said once a run (the first pass it
        holds for, not every pass after); None when there is nothing new to say."""
        if self._why is None or self._why[0] in self._said:
            return None
        self._said.add(self._why[0])
        return self._why[1]
