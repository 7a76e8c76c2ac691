"""What a pass records: the per-pass state, the statistics in and out of every node (with the
reuse that halves their cost), the leaves' gradients and the gradient flow.

The functions here run per node from the session's hooks; they are plain functions of a
`PassRecord` so the hot path pays one call each, no more.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import torch

from gradtui.engine.capture.graph import Capture, Names
from gradtui.engine.compat import GradientEdge, is_zerotensor
from gradtui.engine.provenance import forward as provenance
from gradtui.engine.stats.flow import LeafNames, gradient_flow
from gradtui.engine.stats.leaves import LeafRead, flow_norms
from gradtui.engine.stats.window import StatsWindow
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, LossNan, Module, matches_module
from gradtui.protocol.stats import VALUES_LIMIT, Stats

if TYPE_CHECKING:
    from gradtui.engine.fingerprints.values import PassPrints


class PassRecord(msgspec.Struct):
    """What the session knows of the hooked pass in flight; dropped when the pass ends."""

    index: int
    capture: Capture
    frame: FrameType | None
    names: Names | None = None
    """What the calling frame named: for the leaves of nested passes, which are not on the graph."""
    done: int = 0
    running: int | None = None
    nan_seen: bool = False
    check_every: int = 1
    """With a value breakpoint armed, statistics are read back every this many nodes."""
    task: int | None = None
    """Autograd's id of the pass's own engine call, so hooks ignore a backward nested in it (a
    user's hook calling torch.autograd.grad through nodes of this graph)."""
    grad_outputs: dict[int, tuple[Stats | None, ...]] = msgspec.field(default_factory=dict)
    """Per node whose prehook ran and posthook has not: handles of its `grad_outputs` (what arrived)."""
    handoff: dict[tuple[int, int], tuple[torch.Tensor, int, Stats | int | None]] = msgspec.field(default_factory=dict)
    """Gradients a node just sent to a sole receiver, with their version counter and stats, so
    the receiver's prehook need not summarize the same, unmodified tensor again."""
    last_progress: float = 0.0
    pending: Breakpoint | None = None
    """A loss breakpoint that matched the roots: stop at the pass's first node."""
    pending_reason: str = ""
    arrived: dict[int, tuple[tuple[Any, ...], tuple[int, ...]]] = msgspec.field(default_factory=dict)
    """Node id -> the gradients its prehook let through unedited, with their version counters."""
    fired: set[int] = msgspec.field(default_factory=set)
    """Breakpoints that stopped in this pass (module and place specs stop once per pass)."""
    nested_leaves: list[tuple[str, torch.Tensor]] = msgspec.field(default_factory=list)
    """Named leaves that nested backward calls (a reentrant checkpoint) accumulate into during
    this pass: they are not on its graph, but their `.grad` changes with it."""
    window: StatsWindow = msgspec.field(default_factory=StatsWindow)
    """The gradients whose statistics are not read back yet (gradtui.engine.stats.window)."""
    ran: list[Ran] = msgspec.field(default_factory=list)
    """Nodes that ran since the window was last read, in the order they ran."""
    prints: PassPrints | None = None
    """The pass's fingerprints, when a recording wants them (gradtui.engine.fingerprints.values)."""
    completed: bytearray = msgspec.field(default_factory=bytearray)
    """Per node id, 1 once its posthook ran (so a failure outside every node's hooks is placed)."""
    call: str = "backward"
    on_cpu: bool = True
    """Are the pass's roots on the CPU (reading statistics back syncs nothing)?"""
    hand_over_at: int | None = None
    """The node after whose posthook the every-node hooks hand the rest of the pass to a hook plan
    (it was paused at and continued; gradtui.engine.session)."""
    planned: Any = None
    """The planned hooks (gradtui.engine.hooks.planned.PlannedPass) that run the rest of the pass, once handed over:
    the every-node hooks are inert from then on."""


class Ran(NamedTuple):
    """A node that ran, with handles (gradtui.engine.stats.window) of what flowed in and out."""

    node: int
    order: int
    grad_outputs: tuple[Any, ...]
    """What arrived (torch's `grad_outputs` of the node)."""
    grad_inputs: tuple[Any, ...]
    """What it sent on (its `grad_inputs`)."""


def root_values(roots: tuple[Any, ...]) -> tuple[float | None, ...]:
    """Each root's value if it has one element (the loss, usually), else None."""
    out: list[float | None] = []
    for t in roots:
        value = None
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            try:  # float() reads a one-element tensor of any shape (detached: else torch warns)
                t = t.detach()
                value = float(t.real if t.is_complex() else t)
            except (RuntimeError, TypeError, ValueError):
                value = None
        out.append(value)
    return tuple(out)


def nonfinite_roots(
    roots: tuple[Any, ...], losses: tuple[float | None, ...], breakpoints: Iterable[Breakpoint]
) -> bool:
    """Does a root hold a non-finite value? Non-scalar roots are only read for a `loss nan` spec."""
    if any(v is not None and not math.isfinite(v) for v in losses):
        return True
    if not any(LossNan.of(bp.spec) for bp in breakpoints):
        return False
    return any(
        v is None and isinstance(t, torch.Tensor) and not bool(torch.isfinite(t.detach()).all())
        for t, v in zip(roots, losses)
    )


def walk(nodes: list[Any]) -> tuple[int, list[Any]]:
    """(number of nodes, leaf accumulators) of the graph below `nodes`: the least a pass that
    runs unhooked needs to know (gradient flow)."""
    seen = set(nodes)
    todo = list(nodes)
    leaves = []
    while todo:
        node = todo.pop()
        if hasattr(node, "variable"):
            leaves.append(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)
    return len(seen), leaves


def _dense(t: torch.Tensor) -> bool:
    """Do `t`'s elements fill its memory span, each once (any order of dims)? Two such tensors
    that start at the same address with as many elements hold the same elements."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def grad_outputs_handles(state: PassRecord, node: int, grads: tuple[Any, ...], light: bool) -> tuple[Any, ...]:
    """Handles of what flows into `node` (gradtui.engine.stats.window), reusing its sender's when the
    tensor is the same."""
    window = state.window
    handoff = state.handoff
    out: list[Any] = []
    for nr, grad in enumerate(grads):
        sent = handoff.pop((node, nr), None) if handoff else None
        if grad is None:
            out.append(None)
        elif sent is not None and sent[0] is grad and sent[1] == grad._version:  # not changed in place
            handle = sent[2]
            if type(handle) is int:
                if not light:
                    window.want_full(handle)
                out.append(handle)
            elif light or handle.mean is not None:  # type: ignore[union-attr]  # a Stats: ints went above, a sent grad has stats
                out.append(handle)
            else:
                out.append(window.add(grad, light))
        else:
            out.append(window.add(grad, light))
    return tuple(out)


def grad_inputs_handles(
    state: PassRecord, node: int, grads: tuple[Any, ...], grad_outputs: tuple[Any, ...], light: bool
) -> tuple[Any, ...]:
    """Handles of what `node` sent on. A view, transpose or pass-through (`ViewBackward0`,
    `TBackward0`, the two sides of `AddBackward0`...) sends the very elements it received,
    so their stats are those of its `grad_outputs` in a new shape: half the reductions of a pass."""
    arrived, versions = state.arrived.pop(node, ((), ()))
    window = state.window
    out: list[Any] = []
    for grad in grads:
        if grad is None:
            out.append(None)
            continue
        same = None
        if arrived and grad.layout is torch.strided and not is_zerotensor(grad):  # sparse: no data pointer
            ptr = grad.data_ptr()
            for source, version, handle in zip(arrived, versions, grad_outputs):
                # Small ones list their values in order, so only bigger ones are shared.
                if (
                    source is not None
                    and handle is not None
                    and source.layout is torch.strided
                    and not is_zerotensor(source)
                    and source.data_ptr() == ptr
                    and source._version == version
                    and (numel := grad.numel()) > VALUES_LIMIT
                    and source.numel() == numel
                    and source.dtype == grad.dtype
                    and _dense(grad)
                    and _dense(source)
                ):
                    if type(handle) is int:
                        if not light:
                            window.want_full(handle)
                        same = window.alias(handle, tuple(grad.shape))
                    elif light or handle.mean is not None:
                        same = handle.reshaped(tuple(grad.shape))
                    break
        out.append(window.add(grad, light) if same is None else same)
    return tuple(out)


def hand_off(state: PassRecord, node: int, grads: tuple[Any, ...], stats: tuple[Stats | None, ...]) -> None:
    """Remember what `node` sent to a sole receiver, for that receiver's `grad_outputs_handles`."""
    for target, grad, s in zip(state.capture.sole_inputs[node], grads, stats):
        if target is not None and grad is not None:
            state.handoff[target] = (grad, grad._version, s)


class FlowRecorder:
    """The leaves' gradients and the gradient flow of every pass, and the names of leaves seen in
    recorded passes (for passes that run unhooked, which capture no names)."""

    def __init__(self) -> None:
        self._leaf_names = LeafNames()
        self.flow: tuple[ev.ParamFlow, ...] = ()
        """The flow of the last pass that had one, for the `flow` command."""
        self.flow_pass = -1
        """Which pass `flow` is of."""
        self._nested_modules: dict[str, int] = {}
        """Module path -> the first pass in which a nested pass (reentrant checkpoint) updated its
        parameters."""

    def keep(self, event: ev.PassFinished) -> None:
        """Remember a finished pass's flow, if it has one."""
        if event.flow:
            self.flow, self.flow_pass = event.flow, event.pass_index

    @staticmethod
    def leaves(capture: Capture) -> list[tuple[int, torch.Tensor]]:
        """(accumulator id, leaf tensor) of every leaf on a captured pass's graph."""
        return [
            (i, capture.nodes[i].variable)  # type: ignore[attr-defined]  # AccumulateGrad's; torch's Node type lacks it
            for i in sorted(capture.accumulators)
        ]

    def recorded_flow(
        self,
        name_of: Callable[[int], str | None],
        leaves: list[tuple[int, torch.Tensor]],
        nested: list[tuple[str, torch.Tensor]],
        norms: Callable[[list[torch.Tensor], list[torch.Tensor]], list[float]],
    ) -> tuple[ev.ParamFlow, ...]:
        """Gradient flow of a captured pass's leaves (accumulator id, leaf), named as the graph
        names them (`name_of(id)`: gradtui.engine.capture.graph.Capture.leaf_name), and of the leaves nested
        passes updated (node None: not on the graph); `norms` as `gradient_flow` takes it (a
        `LeafRead`'s: with the leaves' statistics)."""
        named: list[tuple[str, int | None, torch.Tensor]] = []
        for i, leaf in leaves:
            name = name_of(i)
            if name is not None:
                self._leaf_names.remember(leaf, name)
            named.append((name or self._leaf_names.get(leaf) or f"#{i}", i, leaf))
        named += self._new_leaves(nested, {id(leaf) for _, _, leaf in named})
        return gradient_flow(named, norms)

    def unhooked_flow(
        self, variables: list[torch.Tensor], nested: Sequence[tuple[str, torch.Tensor]] = ()
    ) -> tuple[ev.ParamFlow, ...]:
        """Gradient flow of a pass that ran unhooked: its leaves named as recorded passes named
        them, and the leaves nested passes updated."""
        named: list[tuple[str, int | None, torch.Tensor]] = [
            (self._leaf_names.get(v) or f"leaf {list(v.shape)}", None, v) for v in variables
        ]
        named += self._new_leaves(nested, {id(v) for v in variables})
        return gradient_flow(named)

    def _new_leaves(
        self, nested: Sequence[tuple[str, torch.Tensor]], seen: set[int]
    ) -> list[tuple[str, int | None, torch.Tensor]]:
        """Nested passes' leaves not already listed, each once, remembered by name."""
        out: list[tuple[str, int | None, torch.Tensor]] = []
        for name, leaf in nested:
            if id(leaf) not in seen:
                seen.add(id(leaf))
                self._leaf_names.remember(leaf, name)
                out.append((name, None, leaf))
        return out

    def named_leaves(self, accumulators: list[Any], names: Names | None) -> list[tuple[str, torch.Tensor]]:
        """The named leaves of `accumulators` (a nested backward's, from `walk`): parameters, and
        leaves a name is known for. Unnamed plain leaves (a reentrant checkpoint's detached
        inputs) are the nested pass's own business."""
        out = []
        for acc in accumulators:
            leaf = acc.variable
            name = None
            if names is not None:
                name = names.leaf_name(id(leaf))
            name = name or self._leaf_names.get(leaf)
            if name is None and isinstance(leaf, torch.nn.Parameter):
                name = f"leaf {list(leaf.shape)}"
            if name is not None:
                out.append((name, leaf))
        return out

    def finished(
        self,
        state: PassRecord,
        call: str,
        error: str | None,
        light: bool,
        flow_wanted: bool = True,
        leaves_wanted: bool = True,
    ) -> ev.PassFinished:
        """The end of hooked pass `state`: its leaves' gradients (if `leaves_wanted`) and flow (if
        `flow_wanted`: a listener reads them; the flow alone takes only its norms, no Stats per
        leaf). Lets go of its graph, frame and leaves, so nothing of the pass outlives it."""
        cap = state.capture
        flow: tuple[ev.ParamFlow, ...] = ()
        leaf_grads: tuple[tuple[int, Stats | None], ...] = ()
        if leaves_wanted or flow_wanted:
            leaves = self.leaves(cap)
            # the leaves' statistics and the flow's norms: one read (the norms alone if nobody reads the leaves)
            read = LeafRead(leaves, light) if leaves_wanted else None
            if flow_wanted and ev.accumulates(call):
                norms = read.norms if read is not None else flow_norms
                flow = self.recorded_flow(cap.leaf_name, leaves, state.nested_leaves, norms)
            if read is not None:
                leaf_grads = read.stats()
            del leaves, read
        total = len(cap.nodes)
        cap.release()
        del cap
        state.capture = None  # type: ignore[assignment]
        state.frame = state.names = None
        state.nested_leaves = []
        failed = error is not None
        return ev.PassFinished(
            state.index,
            state.done,
            total,
            error,
            state.running if failed else None,
            state.grad_outputs.get(state.running, ()) if failed and state.running is not None else (),
            leaf_grads,
            flow,
        )

    def nested_pass(
        self,
        outer: Any,
        call: str,
        frame: FrameType,
        roots: tuple[Any, ...],
        inside: bool,
        breakpoints: Iterable[Breakpoint],
    ) -> ev.NestedPass:
        """What to announce of a backward that runs unhooked inside pass `outer` (`inside`: from its
        engine call, e.g. a reentrant checkpoint) or beside it (another thread). One inside a
        hooked pass that accumulates into named leaves adds them to `outer`'s flow, and names the
        module breakpoints that cannot stop in it."""
        nodes = [
            r.node if isinstance(r, GradientEdge) else r.grad_fn
            for r in roots
            if isinstance(r, (torch.Tensor, GradientEdge))
        ]
        nodes = [n for n in nodes if n is not None]
        count, accumulators = walk(nodes) if nodes else (0, [])
        missed: tuple[str, ...] = ()
        if inside and ev.accumulates(call) and isinstance(outer, PassRecord) and accumulators:
            leaves = self.named_leaves(accumulators, outer.names)
            outer.nested_leaves += leaves
            modules = {name.rpartition(".")[0] for name, _ in leaves if "." in name}
            for module in modules:
                self._nested_modules.setdefault(module, outer.index)
            missed = tuple(
                bp.spec.text
                for bp in breakpoints
                if Module.of(bp.spec) and any(matches_module(Module.value_of(bp.spec), m) for m in modules)
            )
        del accumulators
        frame = provenance.user_frame(frame) or frame
        return ev.NestedPass(
            outer.index,
            call,
            f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}",
            count,
            threading.current_thread().name,
            missed,
        )

    def checkpointed(self, bp: Breakpoint) -> str | None:
        """Why module breakpoint `bp` cannot stop where it names, if its module ran inside a
        reentrant checkpoint, else None."""
        for module, index in self._nested_modules.items():
            if Module.of(bp.spec) and matches_module(Module.value_of(bp.spec), module):
                return (
                    f"{module} ran inside a reentrant checkpoint in pass {index}: its nodes run in a nested "
                    "pass that gradtui does not hook, so it cannot stop there; "
                    "checkpoint(..., use_reentrant=False) can"
                )
        return None


class UnhookedFlow:
    """The gradient flow of a pass that runs unhooked: its leaves, found by one walk of its graph
    before it runs, and the leaves its nested backward calls (a reentrant checkpoint's)
    accumulate into (`on_nested`). `wanted=False`: no walk, no flow."""

    def __init__(self, recorder: FlowRecorder, nodes: list[Any], call: str, wanted: bool) -> None:
        self._recorder = recorder
        self.total, leaves = walk(nodes) if wanted else (0, [])
        self.wanted = wanted and ev.accumulates(call)
        self._variables = [leaf.variable for leaf in leaves] if self.wanted else []
        self._nested: list[tuple[str, torch.Tensor]] = []

    def on_nested(self, call: str, roots: tuple[Any, ...]) -> None:
        """A backward called from inside the pass's engine call: note the named leaves it updates."""
        if ev.accumulates(call):
            inner = [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]
            self._nested += self._recorder.named_leaves(walk(inner)[1], None)

    def rows(self) -> tuple[ev.ParamFlow, ...]:
        """The flow after the pass ran; lets go of its leaves."""
        flow = self._recorder.unhooked_flow(self._variables, self._nested) if self.wanted else ()
        self._variables, self._nested = [], []
        return flow
