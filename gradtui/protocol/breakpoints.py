"""Breakpoint specs and matching.

A spec is one of: an op name (`AddmmBackward0`, the `torch::autograd::` prefix optional),
a label (`z`, `fc.weight`), `#ID`, `nan`, `norm>X`, `pass N`, `loss>X`, `loss nan`, a place
in the code (`model.py:42`), a module (`module encoder.layers.*.attn`) or, in a run against a
reference recording (`--against REF.db`), `differs>R`: the first node of a pass where this run
parts from the reference by more than R (relative; gradtui.record.against). Op names are told
from labels by shape: an identifier ending in `Backward<digits>` or `AccumulateGrad` is an op.

Place and module specs stop once per pass, at the first node of theirs the engine runs (a
line or a module makes many nodes); loss specs are tested on the roots' values when
backward is called and stop at the first node of that pass.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from fnmatch import fnmatchcase
from typing import Any

import msgspec

from gradtui.protocol.words import CommandError, parse_float
from gradtui.protocol.nodes import INFO, NodeInfo
from gradtui.protocol.stats import Stats, any_nonfinite

_OP = re.compile(r"^(torch::autograd::)?([A-Za-z_]\w*Backward\d*|AccumulateGrad|\w*Function\w*)$")
_PREFIXED_OP = re.compile(r"^torch::autograd::([A-Za-z_]\w*)$")  # CopySlices, any C++ node
_LABEL = re.compile(r"[^\s.\[\]]+(?:\.[^\s.\[\]]+|\[[0-9]+\])*")
"""Names joined by dots, with `[N]` indices (x, ŷ, outs[1], 0.weight); `as_label` checks each name."""


class Spec(msgspec.Struct, frozen=True):
    """A parsed breakpoint spec: `kind` is op, label, id, nan, norm, pass, loss, lossnan,
    source (value: (file, line)) or module (value: a glob)."""

    kind: str
    value: Any
    text: str


def parse_spec(text: str) -> Spec:
    """Parse a break spec, or raise CommandError saying which forms exist."""
    spec = text.strip()
    if spec == "nan":
        return Spec("nan", None, spec)
    if m := re.fullmatch(r"#(\d+)", spec):
        return Spec("id", int(m.group(1)), spec)
    if m := re.fullmatch(r"(norm|loss)\s*>\s*(\S+)", spec):  # a NaN or infinite X could never fire
        return Spec(m.group(1), parse_float(m.group(2), f"break {m.group(1)}>X"), spec)
    if m := re.fullmatch(r"differs\s*>\s*(\S+)", spec):
        return Spec("differs", parse_float(m.group(1), "break differs>R"), spec)
    if m := re.fullmatch(r"pass\s+(\d+)", spec):
        return Spec("pass", int(m.group(1)), spec)
    if re.fullmatch(r"loss\s+nan", spec):
        return Spec("lossnan", None, spec)
    if m := re.fullmatch(r"module\s+(\S+)", spec):
        return Spec("module", m.group(1), spec)
    if m := re.fullmatch(r"(\S+\.py):(\d+)", spec):
        return Spec("source", (m.group(1), int(m.group(2))), spec)
    if re.match(r"(pass|norm|loss|module|differs)\b", spec) or re.search(r"\.py:", spec):
        raise CommandError(f"bad break spec {spec!r}: write pass N (e.g. pass 2), norm>X (e.g. norm>100), "
                           "loss>X, loss nan, module PATH (e.g. module encoder.layers.*.attn), FILE.py:LINE "
                           "or differs>R (e.g. differs>0.05)")
    if m := _OP.fullmatch(spec):
        return Spec("op", m.group(2), spec)
    if m := _PREFIXED_OP.fullmatch(spec):
        return Spec("op", m.group(1), spec)
    if (label := as_label(spec)) is not None:
        return Spec("label", label, spec)
    raise CommandError(
        f"bad break spec {spec!r}: use an op name, a variable or parameter name, "
        "#ID, nan, norm>X, pass N, loss>X, loss nan, FILE.py:LINE or module PATH"
    )


def as_label(spec: str) -> str | None:
    """`spec` as a label (a variable, `outs[1]`, `layers.0.weight`: the names gradtui prints,
    which `break` and `why` take), its names in the NFKC form Python gives identifiers (`ﬁ` is
    the variable `fi`), or None if it is not one (`x²`: Python refuses `²` in a name)."""
    if not _LABEL.fullmatch(spec):
        return None
    out = []
    for part in re.split(r"(\.|\[[0-9]+\])", spec):
        if part and part[0] not in ".[" and not re.fullmatch(r"[0-9]+", part):
            if not part.isidentifier():
                return None
            part = unicodedata.normalize("NFKC", part)
        out.append(part)
    return "".join(out)


class Breakpoint(msgspec.Struct):
    """A numbered breakpoint as the user sees it in `breakpoints`."""

    number: int
    spec: Spec
    hits: int = 0

    def __str__(self) -> str:
        hits = {0: "never hit", 1: "hit once"}.get(self.hits, f"hit {self.hits} times")
        return f"{self.number}: {self.spec.text}  ({hits})"


def _norm(grads: tuple[Stats | None, ...]) -> float:
    return max((s.norm for s in grads if s is not None), default=0.0)


def matches_node(spec: Spec, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
    """Does a spec that depends only on where we are (not on gradient values) match?"""
    if spec.kind == "op":
        return node.name == spec.value
    if spec.kind == "label":  # a bare name may also be an op without the usual shape (CopySlices)
        return spec.value in node.labels or node.param == spec.value or node.name == spec.value
    if spec.kind == "id":
        return node_id == spec.value
    if spec.kind == "pass":
        return first and pass_index == spec.value
    if spec.kind == "module":
        return matches_module(spec.value, node.module)
    if spec.kind == "source":
        return node.line == spec.value[1] and same_file(spec.value[0], node.path)
    return False


def matches_module(pattern: str, module: str | None) -> bool:
    """Does a `module PATTERN` breakpoint's pattern name `module` (a dotted path) or a module in it?"""
    return module is not None and (fnmatchcase(module, pattern) or fnmatchcase(module, pattern + ".*"))


def same_file(file: str, path: str | None) -> bool:
    """Is `path` (a node's source file) the `file` of a source spec (its whole path or a tail)?"""
    return path is not None and (path == file or path.endswith("/" + file.lstrip("/"))
                                 or path.replace("\\", "/").endswith("/" + file))


def warning_for(spec: Spec, graph: Any, pass_index: int) -> str | None:
    """What to tell the user about a breakpoint just set while paused in pass `pass_index`,
    whose captured graph is `graph` (a networkx DiGraph, each node's NodeInfo its "info"), or None.

    A spec that names nodes (an op, a label, `#ID`, a module, a place in the code) but matches
    none of this pass's is accepted, since a later pass may have such a node, but would
    silently never stop here: a typo (`break Addmm`, `module no.such`) is found at once.
    """
    nodes = graph.nodes(data=INFO)
    match spec.kind:
        case "op" | "label" | "id" | "module" | "source" if not any(
                matches_node(spec, data, i, pass_index, False) for i, data in nodes):
            if spec.kind == "module":
                return "no node of this pass ran in a module that matches it"
            if spec.kind == "source":
                file = spec.value[0]
                if any(same_file(file, info.path) for _, info in nodes):
                    return "no node of this pass was made at that line"
                return f"no node of this pass was made in {file}"
            return "no node of this pass matches it"
        case "pass" if spec.value <= pass_index:
            return f"pass {spec.value} has already begun; a pass breakpoint stops at the first node of its pass"
        case _:
            return None


ONCE_PER_PASS = frozenset({"module", "source"})
"""Specs that name a region of many nodes: they stop at the first one of a pass only."""

VALUE = frozenset({"nan", "norm"})
"""Specs tested on gradient statistics (read back from the device every few nodes)."""

PASS_LEVEL = frozenset({"loss", "lossnan"})
"""Specs tested on the roots when backward is called, not at nodes."""

DIFFERS = "differs"
"""The spec tested on fingerprints against a reference recording, after each node ran; it
stops once per pass (downstream of a difference everything differs)."""


def matches_losses(spec: Spec, losses: tuple[float | None, ...], nonfinite_root: bool) -> bool:
    """Does a loss spec match the roots of a pass? (`losses`: root values, None if not scalar)."""
    if spec.kind == "lossnan":
        return nonfinite_root
    if spec.kind == "loss":
        return any(v is not None and v > spec.value for v in losses)
    return False


def matches_grads(spec: Spec, grads: tuple[Stats | None, ...], nan_seen: bool = False) -> bool:
    """Does a value spec (`nan`, `norm>X`) match these gradient statistics?

    `nan` matches only the first non-finite gradient of a pass (`nan_seen` says one was
    already seen), so `continue` does not stop again at every node downstream of it.
    """
    if spec.kind == "nan":
        return not nan_seen and any_nonfinite(grads)
    if spec.kind == "norm":
        return _norm(grads) > spec.value
    return False


class Breakpoints:
    """The numbered list of breakpoints; numbers are never reused within a session."""

    def __init__(self) -> None:
        # A tuple replaced on every change, so the script thread can iterate it while the
        # UI thread adds or deletes breakpoints.
        self._items: tuple[Breakpoint, ...] = ()
        self._split: tuple[tuple[Breakpoint, ...], tuple[Breakpoint, ...]] = ((), ())
        """(place breakpoints, value breakpoints) of `_items`, replaced with it: the hooks' view."""
        self._next = 1

    def _set(self, items: tuple[Breakpoint, ...]) -> None:
        self._items = items
        self._split = (tuple(bp for bp in items if bp.spec.kind not in VALUE and bp.spec.kind not in PASS_LEVEL
                             and bp.spec.kind != DIFFERS),
                       tuple(bp for bp in items if bp.spec.kind in VALUE))

    def add(self, text: str) -> Breakpoint:
        """Parse and add a breakpoint; CommandError on a bad spec."""
        bp = Breakpoint(self._next, parse_spec(text))
        self._next += 1
        self._set(self._items + (bp,))
        return bp

    def delete(self, number: int | None) -> list[Breakpoint]:
        """Delete breakpoint `number` (all when None); CommandError if there is none."""
        if number is None:
            gone = list(self._items)
            self._set(())
            return gone
        gone = [bp for bp in self._items if bp.number == number]
        if not gone:
            raise CommandError(f"no breakpoint {number}")
        self._set(tuple(bp for bp in self._items if bp.number != number))
        return gone

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def find(self, node: NodeInfo, node_id: int, pass_index: int, first: bool,
             grads: tuple[Stats | None, ...], nan_seen: bool = False,
             fired: Collection[int] = ()) -> Breakpoint | None:
        """The first breakpoint that matches this node, or None.

        `fired` holds the numbers of breakpoints that already stopped in this pass: a module
        or place spec among them does not stop again.
        """
        for bp in self._items:
            if bp.spec.kind in ONCE_PER_PASS and bp.number in fired:
                continue
            if matches_node(bp.spec, node, node_id, pass_index, first) or matches_grads(bp.spec, grads, nan_seen):
                return bp
        return None

    def find_place(self, node: NodeInfo, node_id: int, pass_index: int, first: bool,
                   fired: Collection[int] = ()) -> Breakpoint | None:
        """The first breakpoint that matches this node by where it is (not by gradient values),
        or None: what a hook can decide before any statistic is read back."""
        for bp in self._split[0]:
            if bp.spec.kind in ONCE_PER_PASS and bp.number in fired:
                continue
            if matches_node(bp.spec, node, node_id, pass_index, first):
                return bp
        return None

    def find_value(self, grads: tuple[Stats | None, ...], nan_seen: bool = False) -> Breakpoint | None:
        """The first value breakpoint (`nan`, `norm>X`) these gradient statistics match, or None."""
        for bp in self._split[1]:
            if matches_grads(bp.spec, grads, nan_seen):
                return bp
        return None

    @property
    def places(self) -> tuple[Breakpoint, ...]:
        """The breakpoints that match nodes by where they are (op, label, #ID, module, place, pass)."""
        return self._split[0]

    @property
    def values(self) -> tuple[Breakpoint, ...]:
        """The value breakpoints (`nan`, `norm>X`): while one is armed, statistics are read every few nodes."""
        return self._split[1]

    def watching(self) -> bool:
        """Is a value breakpoint (`nan`, `norm>X`) armed?"""
        return bool(self._split[1])

    def nan_only(self) -> bool:
        """Are the value breakpoints armed all `nan` specs (no gradient can match them unless
        one holds a non-finite value)?"""
        return all(bp.spec.kind == "nan" for bp in self._split[1])

    def find_loss(self, losses: tuple[float | None, ...], nonfinite_root: bool) -> Breakpoint | None:
        """The first loss breakpoint the roots of a starting pass match, or None."""
        return next((bp for bp in self._items if matches_losses(bp.spec, losses, nonfinite_root)), None)

    def could_stop(self, pass_index: int) -> bool:
        """Could some breakpoint stop inside pass `pass_index` (loss specs aside)? If not, the
        pass may run unhooked."""
        return any(bp.spec.kind not in PASS_LEVEL and (bp.spec.kind != "pass" or bp.spec.value == pass_index)
                   for bp in self._items)

    def differs(self, fired: Collection[int] = ()) -> tuple[Breakpoint, ...]:
        """The `differs>R` breakpoints that have not stopped in this pass (`fired`)."""
        return tuple(bp for bp in self._items if bp.spec.kind == DIFFERS and bp.number not in fired)
