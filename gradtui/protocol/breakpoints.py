"""Breakpoint specs and matching: every kind of breakpoint is a `Kind` subclass, in one
registry (`KINDS`) that the parser, `help`, the command palette and the engine read.

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

import enum
import math
import re
import unicodedata
from collections.abc import Collection
from fnmatch import fnmatchcase
from typing import Any, ClassVar, Generic, TypeVar, cast, get_args, get_origin

import msgspec

from gradtui.protocol.nodes import INFO, NodeInfo
from gradtui.protocol.stats import Stats, any_nonfinite

# ---- the words of the command language: numbers read one way everywhere, the one refusal type,
# a long text quoted for a message. Here, below the command grammar (gradtui.protocol.commands),
# which reads them as the spec grammar does.


class CommandError(ValueError):
    """A line that is not a valid command; the message says what is wrong."""


def parse_float(word: str, what: str) -> float:
    """`word` as a finite number, read as `float()` reads it (`1e-3`, `1_000`, `٣`), or a
    CommandError that starts with `what` (`nan` and `inf` are refused: no command wants them).

    Every number of the command language goes through here or `parse_int`, so what one command
    accepts the others do too, and nothing `str` methods accept but `float()` refuses (`²`)
    gets further than a refusal.
    """
    try:
        value = float(word)
    except (ValueError, OverflowError):
        raise CommandError(f"{what}: {word!r} is not a number") from None
    if not math.isfinite(value):
        raise CommandError(f"{what}: {word!r} must be finite")
    return value


def parse_int(word: str, what: str, minimum: int | None = None) -> int:
    """`word` as a whole number, read as `int()` reads it (`12`, `+3`, `١٢`), at least `minimum`,
    or a CommandError that starts with `what` (`²` is a digit to `str.isdigit()`, not to `int()`)."""
    try:
        value = int(word)
    except ValueError:
        raise CommandError(f"{what}: {word!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise CommandError(f"{what}: {word!r} must be at least {minimum}")
    return value


def shown(text: str, limit: int = 80) -> str:
    """`text` quoted for a message, cut to about `limit` characters (a pasted page stays readable)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


_OP = re.compile(r"^(torch::autograd::)?([A-Za-z_]\w*Backward\d*|AccumulateGrad|\w*Function\w*)$")
_PREFIXED_OP = re.compile(r"^torch::autograd::([A-Za-z_]\w*)$")  # CopySlices, any C++ node
_LABEL = re.compile(r"[^\s.\[\]]+(?:\.[^\s.\[\]]+|\[[0-9]+\])*")
"""Names joined by dots, with `[N]` indices (x, ŷ, outs[1], 0.weight); `as_label` checks each name."""


class Role(enum.Enum):
    """Where a breakpoint kind is tested, which decides what the engine must read for it."""

    PLACE = "place"
    """At a node, by where it is (its op, labels, id, module, line, or the pass it is in): a
    hook decides it before any statistic is read."""
    VALUE = "value"
    """On a node's gradient statistics (read back every few nodes while one is armed)."""
    LOSS = "loss"
    """On the roots' values when backward is called; stops at the first node of that pass."""
    REFERENCE = "reference"
    """On fingerprints against a reference recording (`--against REF.db`), after each node ran."""
    JOB = "job"
    """By a torchrun job's hub, across ranks, after each pass."""


NOT_MINE = object()
"""What `Kind.parse` returns for a text that is not of its kind."""

V = TypeVar("V")
"""A kind's value: what its `parse` makes of the spec's text and its matching reads."""

SpecValue = str | int | float | tuple[str, int] | None
"""The values the kinds declare (`Kind[float]`, ...): what a spec's value is decoded as from the
wire, then checked against its own kind's type."""


class Kind(Generic[V]):
    """One kind of breakpoint: how its spec is written and parsed, what it matches, and its
    line in `help`. Every kind is a subclass, registered in `KINDS` by being defined (in the
    order they are tried), so the parser, the help texts, the palette and the engine all read
    the same list; nothing outside a kind compares its name.

    A kind declares the type of its value as its parameter (`class Norm(Kind[float])`): its
    methods read the value as that type, and a `Spec` of the kind, made by the parser or read
    from the wire, holds a value of that type (else it is refused where it is made).

    A kind whose text is free-form (a label) comes last: `parse` is tried in order."""

    value_type: ClassVar[Any] = object
    """The type of the kind's value, read from its parameter (`object`, anything, for a kind
    defined without one)."""

    name: ClassVar[str]
    """The spec's `kind` on the wire and in recordings."""
    form: ClassVar[str]
    """How the spec is written in help (`norm>X`)."""
    example: ClassVar[str] = ""
    """An example, shown in help after the form where it helps (`norm>100`)."""
    stops: ClassVar[str] = ""
    """Where it stops, as the manual's table of specs says it (docs/usage.md is made from it)."""
    role: ClassVar[Role] = Role.PLACE
    once_per_pass: ClassVar[bool] = False
    """Does it name a region of many nodes (a module, a line), so it stops at the first one of a pass only?"""
    free_form: ClassVar[bool] = False
    """Does it take texts other kinds did not (a label)? Free-form kinds are tried last."""
    keyword: ClassVar[str | None] = None
    """The word its text starts with (`pass`, `module`): a text starting with it that does not
    parse is refused with the list of forms, not read as a label."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if get_origin(base) is Kind:  # `Kind[float]`: the value's type
                (cls.value_type,) = get_args(base)
        if "name" in cls.__dict__:
            register(cls)

    @classmethod
    def parse(cls, text: str) -> Any:
        """The spec's value if `text` is of this kind, else NOT_MINE (CommandError if it is
        this kind's but wrong, e.g. `norm>big`)."""
        raise NotImplementedError

    @classmethod
    def of(cls, spec: Spec) -> bool:
        """Is `spec` of this kind?"""
        return spec.kind == cls.name

    @classmethod
    def value_of(cls, spec: Spec) -> V:
        """The value of `spec`, a spec of this kind, as this kind's type (a `differs>R`'s R a float)."""
        assert cls.of(spec), f"a {spec.kind} spec read as {cls.name}"
        return cast(V, spec.value)  # checked against `value_type` when the spec was made

    @classmethod
    def matches_node(cls, value: V, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        """Does a PLACE spec with this value match this node (`first`: the pass's first node)?"""
        return False

    @classmethod
    def matches_grads(cls, value: V, grads: tuple[Stats | None, ...], nan_seen: bool) -> bool:
        """Does a VALUE spec match these gradient statistics (`nan_seen`: a non-finite one was
        already seen in this pass)?"""
        return False

    @classmethod
    def matches_losses(cls, value: V, losses: tuple[float | None, ...], nonfinite_root: bool) -> bool:
        """Does a LOSS spec match a starting pass's roots (`losses`: their values, None if not scalar)?"""
        return False

    @classmethod
    def could_stop(cls, value: V, pass_index: int) -> bool:
        """Could this spec stop inside pass `pass_index`? If no armed spec could, the pass may
        run unhooked."""
        return cls.role is not Role.LOSS

    @classmethod
    def warning(cls, value: V, graph: Any, pass_index: int) -> str | None:
        """What to tell the user about this spec, just set while paused in pass `pass_index`
        (whose captured graph is `graph`), or None."""
        return None

    @classmethod
    def help_form(cls) -> str:
        """The kind as help lists it: its form, with its example where one helps."""
        return f"{cls.form} (e.g. {cls.example})" if cls.example else cls.form


KINDS: list[type[Kind[Any]]] = []
"""Every breakpoint kind, in the order `parse_spec` tries them."""

_BY_NAME: dict[str, type[Kind[Any]]] = {}


def register(kind: type[Kind[Any]]) -> type[Kind[Any]]:
    """Add a kind to the registry (a subclass of Kind with a `name` registers itself when it is
    defined; a free-form kind, such as labels, is kept last). Returns the kind."""
    if kind.name in _BY_NAME:
        KINDS.remove(_BY_NAME[kind.name])
    _BY_NAME[kind.name] = kind
    at = len(KINDS) if kind.free_form else next((i for i, k in enumerate(KINDS) if k.free_form), len(KINDS))
    KINDS.insert(at, kind)
    return kind


def unregister(kind: type[Kind[Any]]) -> None:
    """Take a kind out of the registry again (a plug-in or a test that added one)."""
    KINDS.remove(kind)
    del _BY_NAME[kind.name]


def kind_of(spec: Spec) -> type[Kind[Any]]:
    """The kind class of a parsed spec."""
    return _BY_NAME[spec.kind]


class Spec(msgspec.Struct, frozen=True):
    """A parsed breakpoint spec: `kind` names its Kind (`KINDS`), `value` is what the kind
    parsed from `text` (a number, a name, a glob, (file, line), or None: the kind's declared
    type). Parsed once, where the line enters; the `break` command carries it whole, over the
    wire too, so nothing downstream parses the text again. Made with a kind that does not exist
    or a value not of its kind's type (a frame built by hand), it is refused (ValueError; a
    ValidationError when decoded)."""

    kind: str
    value: SpecValue
    text: str

    def __post_init__(self) -> None:
        kind = _BY_NAME.get(self.kind)
        if kind is None:
            raise ValueError(f"no breakpoint kind {self.kind!r}")
        if not _fits(self.value, kind.value_type):
            raise ValueError(f"a {self.kind} breakpoint's value is not {self.value!r}")

    @property
    def role(self) -> Role:
        """Where this spec is tested (its kind's role)."""
        return _BY_NAME[self.kind].role


def _fits(value: SpecValue, value_type: Any) -> bool:
    """Is `value` of `value_type` (exactly: an int is not a float's, a bool not an int's)?"""
    if value_type is object:
        return True
    try:
        converted = msgspec.convert(value, value_type, strict=True)
    except msgspec.ValidationError:
        return False
    return type(converted) is type(value)


def forms() -> str:
    """Every kind's form, as the refusal of a bad spec and `help` list them."""
    return " | ".join(kind.help_form() for kind in KINDS)


def parse_spec(text: str) -> Spec:
    """Parse a break spec, or raise CommandError saying which forms exist (the forms of the kinds
    its first word names, when it names some: `norm` alone asks for `norm>X`)."""
    spec = text.strip()
    fixed = [kind for kind in KINDS if not kind.free_form]
    for kind in fixed:
        if (value := kind.parse(spec)) is not NOT_MINE:
            return Spec(kind.name, value, spec)
    if near := [
        kind.help_form()
        for kind in fixed
        if kind.keyword is not None and re.match(rf"{re.escape(kind.keyword)}\b", spec)
    ]:
        raise CommandError(f"bad break spec {spec!r}: write {' or '.join(near)}")
    for kind in KINDS:
        if kind.free_form and (value := kind.parse(spec)) is not NOT_MINE:
            return Spec(kind.name, value, spec)
    raise CommandError(f"bad break spec {spec!r}: the forms are {forms()}")


class Op(Kind[str]):
    """An autograd op by name (`AddmmBackward0`, the `torch::autograd::` prefix optional)."""

    name = "op"
    stops = "at nodes of that op (the `torch::autograd::` prefix is optional)"
    form = "OP"
    example = "AddmmBackward0"

    @classmethod
    def parse(cls, text: str) -> Any:
        if m := _OP.fullmatch(text):
            return m.group(2)
        if m := _PREFIXED_OP.fullmatch(text):
            return m.group(1)
        return NOT_MINE

    @classmethod
    def matches_node(cls, value: str, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        return node.name == value

    @classmethod
    def warning(cls, value: str, graph: Any, pass_index: int) -> str | None:
        return _names_no_node(cls, value, graph, pass_index)


class NodeId(Kind[int]):
    """A node by its number in the pass (`#ID`, as the node list shows it)."""

    name = "id"
    stops = "at that node id of the current pass"
    form = "#ID"

    @classmethod
    def parse(cls, text: str) -> Any:
        return int(m.group(1)) if (m := re.fullmatch(r"#(\d+)", text)) else NOT_MINE

    @classmethod
    def matches_node(cls, value: int, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        return node_id == value

    @classmethod
    def warning(cls, value: int, graph: Any, pass_index: int) -> str | None:
        return _names_no_node(cls, value, graph, pass_index)


class Nan(Kind[None]):
    """The first node of a pass whose gradient holds a NaN or an infinity."""

    name = "nan"
    stops = "after the node that made the first non-finite gradient of a pass, naming it"
    form = "nan"
    role = Role.VALUE

    @classmethod
    def parse(cls, text: str) -> Any:
        return None if text == "nan" else NOT_MINE

    @classmethod
    def matches_grads(cls, value: None, grads: tuple[Stats | None, ...], nan_seen: bool) -> bool:
        # only the first non-finite gradient of a pass: `continue` does not stop again at
        # every node downstream of it
        return not nan_seen and any_nonfinite(grads)


class Norm(Kind[float]):
    """A node whose gradient's L2 norm is above X."""

    name = "norm"
    stops = "before a node whose incoming gradient's norm exceeds X"
    form = "norm>X"
    example = "norm>100"
    role = Role.VALUE
    keyword = "norm"

    @classmethod
    def parse(cls, text: str) -> Any:
        if m := re.fullmatch(r"norm\s*>\s*(\S+)", text):  # a NaN or infinite X could never fire
            return parse_float(m.group(1), "break norm>X")
        return NOT_MINE

    @classmethod
    def matches_grads(cls, value: float, grads: tuple[Stats | None, ...], nan_seen: bool) -> bool:
        return _norm(grads) > value


class Pass(Kind[int]):
    """The first node of pass N."""

    name = "pass"
    stops = "at the first node of the N-th backward pass (from 0)"
    form = "pass N"
    example = "pass 2"
    keyword = "pass"

    @classmethod
    def parse(cls, text: str) -> Any:
        return int(m.group(1)) if (m := re.fullmatch(r"pass\s+(\d+)", text)) else NOT_MINE

    @classmethod
    def matches_node(cls, value: int, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        return first and pass_index == value

    @classmethod
    def could_stop(cls, value: int, pass_index: int) -> bool:
        return value == pass_index

    @classmethod
    def warning(cls, value: int, graph: Any, pass_index: int) -> str | None:
        if value <= pass_index:
            return f"pass {value} has already begun; a pass breakpoint stops at the first node of its pass"
        return None


class Loss(Kind[float]):
    """A pass whose loss (a scalar root) is above X, at its first node."""

    name = "loss"
    stops = "at the first node of a pass whose loss, when `backward()` was called, is above X"
    form = "loss>X"
    role = Role.LOSS
    keyword = "loss"

    @classmethod
    def parse(cls, text: str) -> Any:
        if m := re.fullmatch(r"loss\s*>\s*(\S+)", text):
            return parse_float(m.group(1), "break loss>X")
        return NOT_MINE

    @classmethod
    def matches_losses(cls, value: float, losses: tuple[float | None, ...], nonfinite_root: bool) -> bool:
        return any(v is not None and v > value for v in losses)


class LossNan(Kind[None]):
    """A pass whose roots hold a NaN or an infinity, at its first node."""

    name = "lossnan"
    stops = "at the first node of a pass whose loss, when `backward()` was called, is not finite"
    form = "loss nan"
    role = Role.LOSS
    keyword = "loss"

    @classmethod
    def parse(cls, text: str) -> Any:
        return None if re.fullmatch(r"loss\s+nan", text) else NOT_MINE

    @classmethod
    def matches_losses(cls, value: None, losses: tuple[float | None, ...], nonfinite_root: bool) -> bool:
        return nonfinite_root


class Source(Kind[tuple[str, int]]):
    """The first node of a pass made at a line of the code (`FILE.py:LINE`, the file's whole
    path or a tail of it)."""

    name = "source"
    stops = "at the first node, per pass, made by that line (a longer path suffix works too)"
    form = "FILE.py:LINE"
    example = "model.py:42"
    once_per_pass = True

    @classmethod
    def parse(cls, text: str) -> Any:
        if m := re.fullmatch(r"(\S+\.py):(\d+)", text):
            return (m.group(1), int(m.group(2)))
        if re.search(r"\.py:", text):
            raise CommandError(f"bad break spec {text!r}: write {cls.help_form()}")
        return NOT_MINE

    @classmethod
    def matches_node(cls, value: tuple[str, int], node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        return node.line == value[1] and same_file(value[0], node.path)

    @classmethod
    def warning(cls, value: tuple[str, int], graph: Any, pass_index: int) -> str | None:
        if not _none_match(cls, value, graph, pass_index):
            return None
        file = value[0]
        if any(same_file(file, info.path) for _, info in graph.nodes(data=INFO)):
            return "no node of this pass was made at that line"
        return f"no node of this pass was made in {file}"


class Module(Kind[str]):
    """The first node of a pass made in an nn.Module whose path matches a glob
    (`module encoder.layers.*.attn`), or in a module inside it."""

    name = "module"
    stops = "at the first node, per pass, made inside that `nn.Module` or its children (globs: `encoder.layers.*.attn`)"
    form = "module PATH"
    example = "module encoder.layers.*.attn"
    once_per_pass = True
    keyword = "module"

    @classmethod
    def parse(cls, text: str) -> Any:
        return m.group(1) if (m := re.fullmatch(r"module\s+(\S+)", text)) else NOT_MINE

    @classmethod
    def matches_node(cls, value: str, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        return matches_module(value, node.module)

    @classmethod
    def warning(cls, value: str, graph: Any, pass_index: int) -> str | None:
        if _none_match(cls, value, graph, pass_index):
            return "no node of this pass ran in a module that matches it"
        return None


class Differs(Kind[float]):
    """In a run against a reference recording (`--against REF.db`): the first node of a pass
    where this run parts from the reference by more than R (relative; gradtui.record.against).
    It stops once per pass: downstream of a difference everything differs."""

    name = "differs"
    stops = "with `--against`: where this run and the reference part by more than R"
    form = "differs>R"
    example = "differs>0.05"
    role = Role.REFERENCE
    keyword = "differs"

    @classmethod
    def parse(cls, text: str) -> Any:
        if m := re.fullmatch(r"differs\s*>\s*(\S+)", text):
            return parse_float(m.group(1), "break differs>R")
        return NOT_MINE


class Diverge(Kind[None]):
    """In a torchrun job: after a pass, a parameter's gradient that differs across ranks after
    its all-reduce (they must be equal: a difference is a desync). The job's hub arms it on
    every rank; a single process has no ranks to compare."""

    name = "diverge"
    stops = "a torchrun job: after a pass whose parameter gradients differ across ranks"
    form = "diverge"
    role = Role.JOB

    @classmethod
    def parse(cls, text: str) -> Any:
        return None if text == "diverge" else NOT_MINE

    @classmethod
    def could_stop(cls, value: None, pass_index: int) -> bool:
        return False

    @classmethod
    def warning(cls, value: None, graph: Any, pass_index: int) -> str | None:
        return "it compares ranks: it stops only in a torchrun job"


class Label(Kind[str]):
    """A variable or parameter by name (`z`, `outs[1]`, `fc.weight`, `0.weight`): the nodes it
    labels. A bare name may also be an op without the usual shape (`CopySlices`)."""

    name = "label"
    stops = "at the node a variable or parameter name labels (`outputs[3]` too)"
    form = "NAME"
    example = "z, fc.weight"
    free_form = True

    @classmethod
    def parse(cls, text: str) -> Any:
        label = as_label(text)
        return NOT_MINE if label is None else label

    @classmethod
    def matches_node(cls, value: str, node: NodeInfo, node_id: int, pass_index: int, first: bool) -> bool:
        return value in node.labels or node.param == value or node.name == value

    @classmethod
    def warning(cls, value: str, graph: Any, pass_index: int) -> str | None:
        return _names_no_node(cls, value, graph, pass_index)


def _none_match(kind: type[Kind[Any]], value: Any, graph: Any, pass_index: int) -> bool:
    """Does no node of `graph` (a captured pass, each node's NodeInfo its "info") match?"""
    return not any(kind.matches_node(value, data, i, pass_index, False) for i, data in graph.nodes(data=INFO))


def _names_no_node(kind: type[Kind[Any]], value: Any, graph: Any, pass_index: int) -> str | None:
    """A spec that names nodes but matches none of this pass's is accepted, since a later pass
    may have such a node, but would silently never stop here: a typo (`break Addmm`) is found at once."""
    return "no node of this pass matches it" if _none_match(kind, value, graph, pass_index) else None


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
    return _BY_NAME[spec.kind].matches_node(spec.value, node, node_id, pass_index, first)


def matches_module(pattern: str, module: str | None) -> bool:
    """Does a `module PATTERN` breakpoint's pattern name `module` (a dotted path) or a module in it?"""
    return module is not None and (fnmatchcase(module, pattern) or fnmatchcase(module, pattern + ".*"))


def same_file(file: str, path: str | None) -> bool:
    """Is `path` (a node's source file) the `file` of a source spec (its whole path or a tail)?"""
    return path is not None and (
        path == file or path.endswith("/" + file.lstrip("/")) or path.replace("\\", "/").endswith("/" + file)
    )


def warning_for(spec: Spec, graph: Any, pass_index: int) -> str | None:
    """What to tell the user about a breakpoint just set while paused in pass `pass_index`,
    whose captured graph is `graph` (a networkx DiGraph, each node's NodeInfo its "info"), or None."""
    return _BY_NAME[spec.kind].warning(spec.value, graph, pass_index)


def matches_losses(spec: Spec, losses: tuple[float | None, ...], nonfinite_root: bool) -> bool:
    """Does a loss spec match the roots of a pass? (`losses`: root values, None if not scalar)."""
    return _BY_NAME[spec.kind].matches_losses(spec.value, losses, nonfinite_root)


def matches_grads(spec: Spec, grads: tuple[Stats | None, ...], nan_seen: bool = False) -> bool:
    """Does a value spec (`nan`, `norm>X`) match these gradient statistics?"""
    return _BY_NAME[spec.kind].matches_grads(spec.value, grads, nan_seen)


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
        self._split = (
            tuple(bp for bp in items if bp.spec.role is Role.PLACE),
            tuple(bp for bp in items if bp.spec.role is Role.VALUE),
        )

    def add(self, spec: Spec) -> Breakpoint:
        """Add a breakpoint for `spec` (parsed where its line entered: `parse_spec`)."""
        bp = Breakpoint(self._next, spec)
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

    def find(
        self,
        node: NodeInfo,
        node_id: int,
        pass_index: int,
        first: bool,
        grads: tuple[Stats | None, ...],
        nan_seen: bool = False,
        fired: Collection[int] = (),
    ) -> Breakpoint | None:
        """The first breakpoint that matches this node, or None.

        `fired` holds the numbers of breakpoints that already stopped in this pass: a module
        or place spec among them does not stop again.
        """
        for bp in self._items:
            if _BY_NAME[bp.spec.kind].once_per_pass and bp.number in fired:
                continue
            if matches_node(bp.spec, node, node_id, pass_index, first) or matches_grads(bp.spec, grads, nan_seen):
                return bp
        return None

    def find_place(
        self, node: NodeInfo, node_id: int, pass_index: int, first: bool, fired: Collection[int] = ()
    ) -> Breakpoint | None:
        """The first breakpoint that matches this node by where it is (not by gradient values),
        or None: what a hook can decide before any statistic is read back."""
        for bp in self._split[0]:
            if _BY_NAME[bp.spec.kind].once_per_pass and bp.number in fired:
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
        return all(Nan.of(bp.spec) for bp in self._split[1])

    def find_loss(self, losses: tuple[float | None, ...], nonfinite_root: bool) -> Breakpoint | None:
        """The first loss breakpoint the roots of a starting pass match, or None."""
        return next((bp for bp in self._items if matches_losses(bp.spec, losses, nonfinite_root)), None)

    def could_stop(self, pass_index: int) -> bool:
        """Could some breakpoint stop inside pass `pass_index` (loss specs aside)? If not, the
        pass may run unhooked."""
        return any(_BY_NAME[bp.spec.kind].could_stop(bp.spec.value, pass_index) for bp in self._items)

    def differs(self, fired: Collection[int] = ()) -> tuple[Breakpoint, ...]:
        """The `differs>R` breakpoints that have not stopped in this pass (`fired`)."""
        return tuple(bp for bp in self._items if bp.spec.role is Role.REFERENCE and bp.number not in fired)
