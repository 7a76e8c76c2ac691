"""Events the engine emits: plain data (numbers, strings, Stats, a networkx graph of plain
attributes), never tensors, so any listener (headless printer, report, Textual UI, a
socket one day) can hold them without keeping a graph alive.

Listeners are called on the script's thread, synchronously; they must be quick and must
not block (the UI posts a message, the report appends to a list).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import msgspec

from gradtui.protocol.breakpoints import Spec
from gradtui.protocol.stats import Stats

if TYPE_CHECKING:  # networkx costs ~50 ms to import: a run loads it only once it builds a graph
    import networkx as nx

    from gradtui.protocol.errors import ErrorInfo


QUIT_STATUS = 130
"""The exit status of a run the user quit before the script ended (as after Ctrl-C)."""


Call = Literal["backward", "grad"]
"""The kind of torch entry point that made a pass (`Tensor.backward` and `torch.autograd.backward`
are both "backward"). A new entry point is a row here and a class in `gradtui.engine.intercept`."""

CALLS: dict[str, bool] = {"backward": True, "grad": False}
"""Each kind of call, and whether its gradients accumulate into the leaves' `.grad` (backward) or are
returned to the caller (grad): a pass that does not accumulate has no AccumulateGrad to derive
statistics from, and the flow reads no `.grad`."""


def accumulates(call: str) -> bool:
    """Do the gradients of a pass made by `call` accumulate into the leaves' `.grad`?"""
    return CALLS[call]


class Event:
    """Base class of everything a session or runner emits: frozen msgspec Structs (a Struct class
    is made in ~30 us, a slotted dataclass in ~1 ms: every gradtui run imports these), but for
    PassStarted, a dataclass whose graph takes no part in `==` or `repr`."""

    __slots__ = ()


class ScriptStarted(Event, msgspec.Struct, frozen=True):
    """The user's script is about to run with this argv (argv[0] is the script path)."""

    path: str
    argv: tuple[str, ...]


Stream = Literal["stdout", "stderr"]
"""The script's two output streams."""


class Output(Event, msgspec.Struct, frozen=True):
    """Text the script wrote to stdout or stderr."""

    stream: Stream
    text: str


@dataclass(frozen=True, slots=True)
class PassStarted(Event):
    """A backward call was intercepted and its graph captured.

    `graph` nodes carry the attributes documented in `gradtui.engine.capture.graph`; edges go from a
    node to the nodes it sends gradient to (its inputs), in the direction gradient flows.
    """

    pass_index: int
    call: Call
    call_text: str
    call_site: str
    graph: nx.DiGraph = field(repr=False, compare=False)
    roots: tuple[int, ...] = ()
    losses: tuple[float | None, ...] = ()
    """Per root, its value when backward was called if it has one element (the loss), else None."""
    recorded: bool = True
    """False: no breakpoint could stop in this pass and nobody asked for per-node statistics, so it
    runs unhooked at plain speed (`graph` is empty; no NodeRan or Paused events follow)."""
    nodes: int | None = None
    """How many nodes the pass had when `graph` does not hold them: a recording's pass told
    without its graph (None: `graph` is the whole graph)."""
    kept: bool = True
    """False: a recording's pass that ran hooked but whose per-node statistics were not kept
    (outside a `--flight` window): its graph cannot be shown."""
    described: bool = True
    """False: an agent's client was still drawing an earlier pass as this one started, so the
    pass was sent without its graph (`nodes` says its size) and without its node events, its
    end without its leaves' statistics unless the client shows the flow (gradtui.agent.server).
    If it pauses, it is sent again, described, with the node events so far, before the pause."""


class SourceText(Event, msgspec.Struct, frozen=True):
    """The text of a source file the script's process reads but a client's may not: a notebook
    cell (IPython keeps its text in `linecache` only, under a name like
    `/tmp/ipykernel_1234/3049230926.py`) or code compiled from a string. Sent once per file,
    before the first PassStarted whose graph names it; a client puts it in its own `linecache`."""

    path: str
    lines: tuple[str, ...]
    """The file's lines as `linecache.getlines` gives them (each with its newline)."""


class Variable(msgspec.Struct, frozen=True):
    """One tensor or module in scope where backward was called (pudb's locals pane)."""

    name: str
    kind: Literal["tensor", "parameter", "module"]
    shape: tuple[int, ...] = ()
    dtype: str = ""
    requires_grad: bool = False
    nodes: tuple[int, ...] = ()
    """Its nodes on the pass's graph: a non-leaf tensor's grad_fn, a leaf's AccumulateGrad, a
    module's parameters' AccumulateGrads; empty when it is not on the graph."""
    slot: int = 0
    """A non-leaf tensor's output number at its grad_fn (its gradient is that node's incoming
    gradient in this slot)."""
    parameters: int = 0
    """A module's number of parameters."""


class CallSiteVariables(Event, msgspec.Struct, frozen=True):
    """The tensors and modules in scope in the frame that called backward (its locals), read
    once, at the pass's first pause: sent then, never in a pass that does not pause."""

    pass_index: int
    call_site: str
    variables: tuple[Variable, ...]
    more: int = 0
    """How many more there were than are listed (a bound keeps the event small)."""


class ParamFlow(msgspec.Struct, frozen=True, gc=False):
    """How the gradient of one leaf (a parameter, usually) compares with the leaf after a pass (a
    msgspec Struct: a pass makes one per leaf).

    A tiny `ratio` (grad norm / weight norm) marks a vanishing layer, a huge one an exploding
    layer; `PassFinished.flow` is sorted by it.
    """

    name: str
    """The parameter's name (`fc2.weight`), else a variable's, else `#ID`."""
    node: int | None
    """The leaf's accumulator node id in the pass graph (None on an unrecorded pass)."""
    shape: tuple[int, ...]
    grad_norm: float | None
    """L2 norm of `.grad` after the pass; None when `.grad` is None."""
    weight_norm: float
    ratio: float | None
    """grad_norm / weight_norm (inf when the weight is all zeros); None without a gradient."""
    nonfinite: int
    """Non-finite elements in `.grad`."""


class NestedPass(Event, msgspec.Struct, frozen=True):
    """A backward ran while pass `pass_index` was in flight (from one of its hooks, a reentrant
    checkpoint's recomputation, or another thread): gradtui lets it run unhooked, never pausing."""

    pass_index: int
    call: str
    call_site: str
    nodes: int
    """How many nodes its graph has."""
    thread: str
    """The name of the thread that called it."""
    missed: tuple[str, ...] = ()
    """Specs of `module` breakpoints naming a module whose parameters this pass updates (a
    reentrant checkpoint's): it runs unhooked, so they cannot stop in it."""


class NodeRan(Event, msgspec.Struct, frozen=True, gc=False):
    """A node finished: what flowed into it (after edits) and what it sent on. A msgspec Struct,
    as Stats is: a pass makes one per node (0.12 us each, a slotted dataclass's takes 0.6 us)."""

    pass_index: int
    node: int
    order: int
    grad_outputs: tuple[Stats | None, ...]
    grad_inputs: tuple[Stats | None, ...]


class NodesRan(Event):
    """Nodes that finished, in the order they ran: a planned pass's NodeRan events as one batch,
    made only when someone reads them (`ran`).

    A pass in `continue` on the hook plan (gradtui.engine.hooks.planned) keeps what its hooks measured
    as numbers and hands them over once per batch (at a pause, every so many hooked nodes, at
    the pass's end) instead of one event per node: a listener that does not look at per-node
    statistics pays nothing for them, and one that does gets exactly the NodeRan events the
    every-node hooks would have sent (a session expands the batch for listeners that did not ask
    for batches: `Session.add_listener(batches=...)`). Plain data once made: the maker holds
    numbers, shapes and Stats, never a tensor or a node.

    Making the events has two parts: what must be read from the pass's live autograd nodes (the
    shapes and saved values of the nodes derived from a hooked one), which only the pass's own
    thread may read while the engine runs, and plain arithmetic on numbers. `expand` does the
    first part now, on the caller's (the pass's) thread; `ran` then needs no live node, so a
    listener may read it on another thread (the agent's writer), off the script's."""

    __slots__ = ("pass_index", "count", "_make", "_ran", "_expand", "__weakref__")
    pass_index: int
    count: int
    _make: Callable[[], tuple[NodeRan, ...]]
    _ran: tuple[NodeRan, ...] | None
    _expand: Callable[[], None] | None

    def __init__(
        self,
        pass_index: int,
        count: int,
        make: Callable[[], tuple[NodeRan, ...]],
        expand: Callable[[], None] | None = None,
    ) -> None:
        set_slot = object.__setattr__
        set_slot(self, "pass_index", pass_index)
        set_slot(self, "count", count)
        """How many NodeRan events the batch holds."""
        set_slot(self, "_make", make)
        set_slot(self, "_ran", None)
        set_slot(self, "_expand", expand)

    def expand(self) -> None:
        """Read now, on the pass's thread, whatever making the events needs of the live autograd
        nodes (see the class doc), so that `ran` may be read later on any thread. Nothing to do
        for a batch made already or one with nothing live behind it (a decoded frame)."""
        expand = self._expand
        if expand is not None and self._ran is None:
            object.__setattr__(self, "_expand", None)
            expand()

    @classmethod
    def of(cls, pass_index: int, ran: tuple[NodeRan, ...]) -> NodesRan:
        """A batch of events already made (a decoded frame, a test)."""
        ran = tuple(ran)
        return cls(pass_index, len(ran), lambda: ran)

    @property
    def ran(self) -> tuple[NodeRan, ...]:
        """The NodeRan events, in the order the nodes ran (made at the first read, then kept)."""
        ran = self._ran
        if ran is None:
            ran = self._make()  # the maker keeps them (`keep`) and returns them
            if self._ran is None:  # a maker that does not keep them (`of`)
                self.keep(ran)
        return ran

    def keep(self, ran: tuple[NodeRan, ...]) -> None:
        """Hold `ran` as the batch's events (its maker made them while making a later batch)."""
        object.__setattr__(self, "_ran", ran)

    def __repr__(self) -> str:
        return f"NodesRan(pass_index={self.pass_index}, count={self.count})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodesRan) and (self.pass_index, self.ran) == (other.pass_index, other.ran)

    def __hash__(self) -> int:
        return hash((self.pass_index, self.count))


class Paused(Event, msgspec.Struct, frozen=True):
    """The engine is blocked before (`phase="before"`) or just after a node, awaiting commands.

    `grads` are the node's incoming gradients (with histograms) before it runs, or its
    outgoing gradients when `phase="after"` (a `nan` breakpoint found the node that made one).
    `done` is how many nodes of the pass have run.
    """

    pass_index: int
    node: int
    name: str
    phase: Literal["before", "after"]
    reason: str
    grads: tuple[Stats | None, ...]
    done: int
    total: int


class Resumed(Event, msgspec.Struct, frozen=True):
    """The engine runs again after a pause, in this mode (`step`, `continue`, `finish`)."""

    pass_index: int
    mode: str


class Progress(Event, msgspec.Struct, frozen=True):
    """Nodes done of total while the engine runs between pauses; emitted at most every ~50 ms."""

    pass_index: int
    done: int
    total: int


class CommandResult(Event, msgspec.Struct, frozen=True):
    """The answer to a command: `ok=False` means it was refused and nothing changed."""

    command: str
    text: str
    ok: bool = True
    request: int | None = None
    """The id the command was submitted with (`Session.submit(..., request=N)`), so a client
    can tell which of its commands this answers; None for commands given without one."""


class Notice(Event, msgspec.Struct, frozen=True):
    """A line of gradtui's own about the run, answering no command: a reference recording that
    cannot be compared with this run (`--against`), what a client that fell behind missed."""

    text: str


class GradEdited(Event, msgspec.Struct, frozen=True):
    """An edit replaced the paused node's incoming gradient."""

    pass_index: int
    node: int
    command: str
    before: tuple[Stats | None, ...]
    after: tuple[Stats | None, ...]


class BreakpointHit(Event, msgspec.Struct, frozen=True):
    """Breakpoint `number` (spec `spec`) stopped the engine at a node."""

    number: int
    spec: str
    pass_index: int
    node: int


class BreakpointInfo(msgspec.Struct, frozen=True):
    """One breakpoint as clients see it: its number, its spec as parsed where it was typed (its
    `text` as typed), and how often it hit. The parsed spec travels whole, so a client marks rows
    and source lines by it without parsing the text again."""

    number: int
    spec: Spec
    hits: int = 0


class BreakpointsChanged(Event, msgspec.Struct, frozen=True):
    """The breakpoints now (after `break`, `delete`, or a hit): clients never read the session."""

    breakpoints: tuple[BreakpointInfo, ...]


class PassFinished(Event, msgspec.Struct, frozen=True):
    """A backward call returned (`error` is None) or raised (`error` is its message)."""

    pass_index: int
    done: int
    total: int
    error: str | None = None
    node: int | None = None
    """The node whose hook or backward raised, when known (post-mortem)."""
    failed_grads: tuple[Stats | None, ...] = ()
    """What flowed into `node` before it raised (post-mortem); empty when not known."""
    leaf_grads: tuple[tuple[int, Stats | None], ...] = ()
    """(accumulator node id, stats of its leaf's `.grad` after the pass) for every leaf."""
    flow: tuple[ParamFlow, ...] = ()
    """Gradient flow per leaf, sorted by ratio from vanishing to exploding (leaves with no
    gradient first, non-finite ones last)."""


SKETCH_VERSION = 3
"""Which sketch `Print.sketch` holds (gradtui.engine.fingerprints.sketch; a recording stores it): 1, the
row-major sign sketch (schema 2); 2, the 2-D one, the same for a matrix and its transpose, summed
in float32 by torch calls in a fixed order; 3, the same linear map summed in float64 and rounded
at the end (one read in the compiled posthooks; the Python code agrees to rounding). Fingerprints
of two versions are never compared."""


class Print(msgspec.Struct, frozen=True):
    """One value's fingerprint (gradtui.engine.fingerprints.values): `dir` 0 received, 1 sent, 2 the
    node's forward output, 3 a saved leaf value (slot -1: its saved arguments, as `what`).
    `sketch` holds the value's K projections, or its values when `exact`."""

    node: int
    dir: int
    slot: int
    norm: float | None
    sketch: tuple[float, ...]
    exact: bool
    what: str = ""


class PassPrints(Event, msgspec.Struct, frozen=True):
    """The fingerprints of a recorded pass's nodes, sent just before its PassFinished (a
    recording compares runs with them)."""

    pass_index: int
    prints: tuple[Print, ...]


class NodeDifference(msgspec.Struct, frozen=True):
    """How far one node of a pass is from its match in the reference (`--against`): the largest
    relative difference (‖a − b‖ / the larger norm, estimated from the fingerprints unless exact)
    of its forward values (output, saved values) and of its gradients (received, sent); None
    where no value of that kind was known on both sides."""

    node: int
    forward: float | None
    gradient: float | None

    @property
    def largest(self) -> float | None:
        """The larger of the two (None when neither is known): the node list's difference column."""
        known = [d for d in (self.forward, self.gradient) if d is not None]
        return max(known) if known else None


class PassDifferences(Event, msgspec.Struct, frozen=True):
    """A pass against the reference recording (`--against REF.db`), sent before its PassFinished:
    each matched node's difference (nodes with no match in the reference are left out) and the
    pass's largest; what the UI's difference column, sort and passes view show."""

    pass_index: int
    reference: str
    nodes: tuple[NodeDifference, ...]
    largest: float | None
    only_here: int = 0
    """Nodes of this pass with no match in the reference (a graph change)."""


class ScriptFinished(Event, msgspec.Struct, frozen=True):
    """The script ended: exit status (0 ok, 1 exception, n from sys.exit, `runner.QUIT_STATUS`
    (130) when the user quit; None: not known, a replayed run whose recording does not say how
    it ended, `how` then says why), traceback if any."""

    exit_status: int | None
    traceback: str | None = None
    quit: bool = False
    """True when the user quit the debugger before the script ended."""
    passes: int = 0
    how: str | None = None
    """Set by a client when the script's process ended without saying so itself (`os._exit`,
    a signal): e.g. "killed by SIGSEGV (Segmentation fault)"; set by the runner when it had to
    end a script that went on after quit ("hard exit ...")."""
    error: ErrorInfo | None = None
    """The exception the script ended with, structured (None when it did not raise)."""
