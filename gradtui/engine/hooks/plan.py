"""The hook plan of a pass: from the captured walk alone, which nodes need a hook at all.

Hooking every node costs a Python call per node and direction (~5 µs on tiny tensors), more
than the statistics themselves. In `continue` with statistics or a `nan` watch, most nodes
cannot matter: a view, transpose, `.T`, select, clone, permute, squeeze or unsqueeze with
one producer sends on the very elements it received (rearranged, or with zeros around them),
so it can never be the first to make a non-finite value, and its statistics follow from its
producer's; an `AccumulateGrad` with one producer receives exactly its producer's output; an
add, sub or rsub with alpha 1 whose operands are not broadcast, cast nor moved, a neg and an
alias send on each input what they received or its negation (`SIGNS`, `passes_through`: the
residual adds of a network). Those are *derived*. Everything else gets a posthook: ops that
compute (an add with a broadcast operand too: the engine sums its gradient down to the operand's
shape), nodes with several producers (the engine sums what they
send), custom Functions and opaque nodes, the roots, and any node carrying a user hook (its
gradient may change between the producer and the node). Nodes whose own code can raise or
whose input a user hook can change also get a prehook, so a failure is marked where it
happened and a NaN a user hook makes is caught before the node, editable.

`derive_from` turns the statistics of what arrived at a derived node into those of what it sent on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec
import torch

from gradtui.protocol.stats import VALUES_LIMIT, Stats, empty_stats, full_stats, light_stats, small_stats

SAME_ORDER = frozenset(
    {
        "ViewBackward0",
        "UnsafeViewBackward0",
        "CloneBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "UnsqueezeBackward0",
    }
)
"""Nodes that send the elements they received in the same order, in another shape."""
PERMUTED = frozenset({"TransposeBackward0", "TransposeBackward1", "TBackward0", "PermuteBackward0"})
"""Nodes that send the elements they received rearranged."""
SELECTED = frozenset({"SelectBackward0", "SelectBackward1"})
"""Nodes that send what they received embedded in zeros."""
ACCUMULATOR = "AccumulateGrad"
"""A leaf's accumulator: it receives its producer's output and sends nothing on."""
DERIVABLE = SAME_ORDER | PERMUTED | SELECTED | {ACCUMULATOR}
SIGNS = {
    "AddBackward0": (1, 1),
    "AddBackward1": (1,),
    "SubBackward0": (1, -1),
    "SubBackward1": (1,),
    "RsubBackward0": (-1, 1),
    "NegBackward0": (-1,),
    "AliasBackward0": (1,),
}
"""Nodes whose backward (torch's derivatives.yaml) sends on each input the gradient it received or
its negation, per `next_functions` slot: `add`/`sub`/`rsub` with alpha 1 (`maybe_multiply` leaves
the gradient as it is; `handle_r_to_c` only for a complex result of a real input), `neg`, `alias`.
They *pass through*: never the first to make a non-finite value, and their statistics follow
exactly (a norm of -x is the norm of x), unless the engine changes what they send on its way out
(`validate_outputs` sums a broadcast operand to its shape, casts to its dtype, moves it to its
device): `passes_through` checks that on the live node."""
ALPHA = frozenset({"AddBackward0", "SubBackward0", "RsubBackward0"})
"""Pass-through nodes that save an alpha (the other operand's gradient is scaled by it)."""


class Walked(Protocol):
    """What a plan reads of a pass's walk (gradtui.engine.capture.graph.Walk): per node id its name, kind
    and sole sender."""

    @property
    def names(self) -> list[str]: ...
    @property
    def kinds(self) -> list[str]: ...
    @property
    def producer(self) -> list[tuple[int, int] | None]:
        """Per node with exactly one sender: (sender id, its output slot), else None."""


NONE, POST, BOTH = 0, 1, 2
"""Per node: no hook (derived), a posthook, a prehook and a posthook."""


class HookPlan(msgspec.Struct):
    """Per node of a captured pass: which hooks it gets, and for a derived node where its
    gradient comes from."""

    hooks: bytearray
    """NONE, POST or BOTH per node id."""
    producer: list[tuple[int, int] | None]
    """Per node with exactly one producer: (producer id, output slot of the producer)."""
    derived: dict[int, list[int]]
    """Producer id -> the derived nodes it feeds directly (their statistics follow from its)."""
    fed: dict[int, int] = msgspec.field(default_factory=dict)
    """Producer id -> how many nodes it feeds, directly or not (`fed_counts` of `derived`; whoever
    changes `derived` counts again)."""


def user_hooked(node: Any) -> bool:
    """Did the script register a tensor hook that runs on this node's incoming gradient? (The
    interceptor marks a non-leaf tensor's grad_fn when a hook is registered on it; a leaf's hooks
    are on the tensor.)"""
    variable = getattr(node, "variable", None)
    if variable is not None:
        return bool(variable._backward_hooks)
    return bool(node.metadata.get(HOOK_MARK))


HOOK_MARK = "gradtui.user_hook"
"""The key the interceptor sets in a node's `metadata` when a tensor hook is registered on its output."""


def make_plan(walk: Walked, nodes: list[Any], roots: tuple[int, ...], hooks_seen: bool) -> HookPlan:
    """The plan of a pass (see module doc) from its walk (gradtui.engine.capture.graph.Walk): `hooks_seen`
    says whether the script has registered any tensor hook since the session was installed (if
    not, no node needs looking at for one). Once per pass, over every node: kept lean (the walk
    found each node's sole sender)."""
    names, kinds = walk.names, walk.kinds
    producer = list(walk.producer)
    count = len(names)
    hooks = bytearray((POST,)) * count
    if hooks_seen:
        for i, node in enumerate(nodes):
            if user_hooked(node):
                hooks[i] = BOTH
    derived: dict[int, list[int]] = {}
    sources: list[int] = []
    """The producers of derived nodes, in the order their first derived node was found."""
    root_set, derivable, signs = set(roots), DERIVABLE, SIGNS
    for i, (name, kind) in enumerate(zip(names, kinds)):
        if kind == "custom" or kind == "opaque":
            hooks[i] = BOTH
        elif (
            (name in derivable or name in signs)
            and hooks[i] == POST
            and (sender := producer[i]) is not None
            and i not in root_set
            and (name in derivable or passes_through(nodes[i], name))
        ):
            hooks[i] = NONE
            source = sender[0]
            fed = derived.get(source)
            if fed is None:
                derived[source] = [i]
                sources.append(source)
            else:
                fed.append(i)
    return HookPlan(hooks, producer, derived, _counted(derived, reversed(sources)))


def passes_through(node: Any, name: str) -> bool:
    """Does pass-through node `node` (SIGNS) send on exactly what it received (or its negation) at
    every slot: alpha 1, and each receiver expecting the shape, dtype and device it received (no
    broadcast reduced, no cast, no move on the way out)? Read once, at the plan."""
    try:
        if name in ALPHA and node._saved_alpha != 1:
            return False
        metadata = node._input_metadata
        if len(metadata) != 1 or len(node.next_functions) != len(SIGNS[name]):
            return False
        own = metadata[0]
        if own.is_nested_tensor:
            return False
        shape, dtype, device = own.shape, own.dtype, own.device
        for target, slot in node.next_functions:
            if target is not None:
                there = target._input_metadata[slot]
                if there.shape != shape or there.dtype != dtype or there.device != device or there.is_nested_tensor:
                    return False
    except (AttributeError, IndexError, RuntimeError):  # not as torch 2.13 has it: hook it
        return False
    return True


def fed_counts(derived: dict[int, list[int]]) -> dict[int, int]:
    """Producer id -> how many nodes it feeds, directly or through other derived nodes (what a
    batch counts for it). A derived node has one producer, which the walk reached first, so its
    id is above its producer's: counting from the highest producer down sees a child's count
    before its producer needs it."""
    return _counted(derived, sorted(derived, reverse=True))


def _counted(derived: dict[int, list[int]], producers: Iterable[int]) -> dict[int, int]:
    """`fed_counts`, counting `producers` in that order (each after the derived producers it feeds)."""
    counts: dict[int, int] = {}
    get = counts.get
    for producer in producers:
        total = 0
        for child in derived[producer]:
            total += 1 + get(child, 0)
        counts[producer] = total
    return counts


def hook_chains(plan: HookPlan, names: list[str], completed: bytearray) -> None:
    """Fingerprints: a derived node fed by another derived node (a view after a 3-D transpose)
    gets a posthook, since what arrives there is a gradient no hook sees whose print the one
    that moved it cannot give (gradtui.engine.fingerprints.values: only a matrix's transpose and a
    view keeping the last dimension keep their sketch). Not after a `TBackward0` (a matrix's
    transpose: a weight's accumulator stays derived). A pass-through node (SIGNS) is hooked
    wherever it is: the prints derive only one-receiver nodes that move values. `completed`:
    the nodes that ran already (a pass handed over) stay as they are."""
    for source, fed in list(plan.derived.items()):
        if plan.hooks[source] != NONE or names[source] == "TBackward0":
            fed_here = [child for child in fed if names[child] in SIGNS]  # the prints move no pass-through node
        else:
            fed_here = list(fed)
        for child in fed_here:
            if completed[child]:
                continue
            fed.remove(child)
            plan.hooks[child] = POST
            plan.producer[child] = None  # what it receives is measured in its own hook
        if not fed:
            del plan.derived[source]


def resume(plan: HookPlan, completed: bytearray) -> HookPlan:
    """`plan` for the rest of a pass whose `completed` nodes ran under the every-node hooks (it
    stepped, then continued): those get no hook, and a node that `plan` derives from one of them
    gets a posthook instead (its producer's statistics are not the planned hooks')."""
    for producer, fed in list(plan.derived.items()):
        if completed[producer]:
            for child in fed:
                if not completed[child]:
                    plan.hooks[child] = POST
            del plan.derived[producer]
    for i, done in enumerate(completed):
        if done:
            plan.hooks[i] = NONE
        elif (source := plan.producer[i]) is not None and completed[source[0]]:
            plan.producer[i] = None  # what it receives is read in its own hook
    plan.fed = fed_counts(plan.derived)
    return plan


SIZED = frozenset(
    {
        "ViewBackward0",
        "UnsafeViewBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "SelectBackward0",
        "SelectBackward1",
    }
)
"""Derived nodes that save their input's sizes: the shape of what they send on. The others' follows
from the shape they receive (a transpose's, a permute's, an unsqueeze's dims; a clone's is it)."""


def shape_and_saved(node: Any, name: str) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    """What `derive_from` needs of a live derived node: the shape it sends on, where it saved it
    (None: it follows from what arrives), and the dims a rearrangement of its values takes (a
    permute's dims, a transpose's two, an unsqueeze's, a select's dim and index)."""
    shape = tuple(node._saved_self_sym_sizes) if name in SIZED else None
    match name:
        case "PermuteBackward0":
            return shape, tuple(map(_signed, node._saved_dims))
        case "TransposeBackward0" | "TransposeBackward1":
            return shape, (_signed(node._saved_dim0), _signed(node._saved_dim1))
        case "SelectBackward0" | "SelectBackward1":
            return shape, (node._saved_dim, node._saved_index)
        case "UnsqueezeBackward0":
            return shape, (_signed(node._saved_dim),)
    return shape, ()


def _signed(dim: int) -> int:
    """A saved dim as given: a negative one (`.mT`, `permute(-1, ...)`) reads back as its unsigned
    64-bit form."""
    return dim - (1 << 64) if dim >= 1 << 63 else dim


def sent_shape(name: str, saved: tuple[int, ...], received: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a transpose, `.T`, permute, unsqueeze or clone sends on, given the shape it received."""
    match name:
        case "TBackward0":
            return received[::-1] if len(received) == 2 else received
        case "PermuteBackward0":
            out = [0] * len(received)
            for i, d in enumerate(saved):
                out[d % len(received)] = received[i]
            return tuple(out)
        case "TransposeBackward0" | "TransposeBackward1":
            out = list(received)
            a, b = (d % len(received) for d in saved)
            out[a], out[b] = out[b], out[a]
            return tuple(out)
        case "UnsqueezeBackward0":
            dim = saved[0] % len(received)
            return received[:dim] + received[dim + 1 :]
    return received


def derive_from(
    name: str,
    shape: tuple[int, ...] | None,
    saved: tuple[int, ...],
    grad_output: Stats | None,
    full: bool,
    sends: bool = True,
) -> tuple[Stats | None, ...]:
    """What derived node `name` sent on, from what it received (`grad_output`, see module doc), from
    plain data (`shape_and_saved` of the node; `sends`: its input slot has a receiver): no node
    needed, so it can run after the pass. `full`: min, max and mean of big gradients too (else
    only their norm, as a light read has)."""
    if name == ACCUMULATOR:
        return ()
    if name in SIGNS:
        return _passed(SIGNS[name], saved, grad_output)
    if grad_output is None or not sends:
        return (None,)
    if shape is None:
        shape = sent_shape(name, saved, grad_output.shape)
    if grad_output.unreadable is not None:
        return (grad_output.reshaped(shape),)
    if 0 in shape or 0 in grad_output.shape:  # no elements (sizes are never negative): as summarize has it
        return (empty_stats(shape, grad_output.dtype, grad_output.device),)
    if name in SAME_ORDER:
        return (grad_output.reshaped(shape),)
    values = grad_output.values
    if name in PERMUTED:
        if values is not None and len(grad_output.shape) > 1:
            values = tuple(_rearranged(name, saved, values, grad_output.shape).tolist())
            return (small_stats(shape, grad_output.dtype, grad_output.device, values),)
        return (
            full_stats(
                shape,
                grad_output.dtype,
                grad_output.device,
                grad_output.norm,
                grad_output.min,
                grad_output.max,
                grad_output.mean,
                grad_output.nonfinite,
            ),
        )
    return (_selected(saved, grad_output, shape, full),)


def _passed(signs: tuple[int, ...], sends: tuple[int, ...], grad_output: Stats | None) -> tuple[Stats | None, ...]:
    """What a pass-through node sent on each slot (`sends`: 1 where the slot has a receiver, as
    DerivedSteps reads it): what it received, or its negation."""
    if grad_output is None:
        return (None,) * len(signs)
    negated = negative(grad_output) if -1 in signs else None
    return tuple((grad_output if sign > 0 else negated) if send else None for sign, send in zip(signs, sends))


def negative(stats: Stats) -> Stats:
    """The statistics of -x from those of x, exactly: the same norm and non-finite count, min and
    max swapped and negated, the mean and values negated (IEEE negation is exact, and a sum of
    negated values is the negated sum). An empty or unreadable gradient's stay as they are (a
    hook reads 0.0, not -0.0, of an empty one). No histogram: its bin edges would not follow
    exactly (a planned pass takes none)."""
    return stats.negated()


def _rearranged(name: str, saved: tuple[int, ...], values: tuple[float, ...], shape: tuple[int, ...]) -> torch.Tensor:
    """A small gradient's values as the node sends them on (a tiny float64 tensor, flat)."""
    grad = torch.tensor(values, dtype=torch.float64).reshape(shape)
    match name:
        case "TBackward0":
            grad = grad.t() if grad.dim() == 2 else grad
        case "PermuteBackward0":
            inverse = [0] * len(saved)
            for i, d in enumerate(saved):
                inverse[d % len(saved)] = i
            grad = grad.permute(inverse)
        case _:
            grad = grad.transpose(*saved)
    return grad.reshape(-1)


def _selected(saved: tuple[int, ...], grad_output: Stats, shape: tuple[int, ...], full: bool) -> Stats:
    """SelectBackward's output: the incoming gradient at one index of `shape`, zeros elsewhere."""
    numel = math.prod(shape)
    if grad_output.values is not None and numel <= VALUES_LIMIT:
        grad = torch.zeros(shape, dtype=torch.float64)
        grad.select(saved[0], saved[1]).copy_(
            torch.tensor(grad_output.values, dtype=torch.float64).reshape(grad_output.shape)
        )
        return small_stats(shape, grad_output.dtype, grad_output.device, tuple(grad.reshape(-1).tolist()))
    if not full:
        return light_stats(shape, grad_output.dtype, grad_output.device, grad_output.norm, grad_output.nonfinite)
    lo, hi, mean = grad_output.min, grad_output.max, grad_output.mean
    if numel > grad_output.numel and lo is not None and hi is not None and not math.isnan(lo):
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if mean is not None and numel:
        mean = mean * grad_output.numel / numel
    return full_stats(
        shape, grad_output.dtype, grad_output.device, grad_output.norm, lo, hi, mean, grad_output.nonfinite
    )
