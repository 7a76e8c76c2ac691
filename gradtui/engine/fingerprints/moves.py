"""Which autograd ops only move the elements they receive, and when a sketch carries over.

gradtui.engine.fingerprints.values sketches each value of a pass once: what an op that only moves
elements (a view, a transpose, a select) sends on is fingerprinted as what it received, and
what a consumer receives reuses the sender's print only where that print is the sketch of the
very tensor it got (the rules of gradtui.engine.fingerprints.sketch: a view keeping the 2-D form, a matrix's
transpose). The tables and tests of those rules live here, apart from the pass's bookkeeping.
"""

from __future__ import annotations

from typing import Any

import torch

from gradtui.engine.fingerprints.sketch import shape2d

KEEPS_ORDER = frozenset(
    {
        "ViewBackward0",
        "UnsafeViewBackward0",
        "ReshapeAliasBackward0",
        "UnsqueezeBackward0",
        "UnsqueezeBackward1",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "SqueezeBackward3",
        "SqueezeBackward4",
        "CloneBackward0",
        "AliasBackward0",
    }
)
"""Ops whose backward sends on the elements it received in the same row-major order (in another
shape): where the 2-D form the sketch takes (gradtui.engine.fingerprints.sketch.shape2d: the last dimension
kept) is the same, the sketch of what they send is that of what they received, exactly."""

TRANSPOSES = frozenset({"TBackward0", "TransposeBackward0", "TransposeBackward1", "PermuteBackward0"})
"""Ops whose backward transposes what it received: of a matrix, the sketch of what they send is
that of what they received (a matrix and its transpose have one sketch), so the weight's
accumulator reuses the sketch of the gradient mm sent, not a second read of it."""

MOVES_VALUES = KEEPS_ORDER | TRANSPOSES | {"SelectBackward0", "SelectBackward1", "SliceBackward0", "NarrowBackward0"}
"""Ops whose backward only moves the elements it received (reshaped, reordered, or placed among
zeros at places its forward arguments fix): what such a node sends is fingerprinted as what it
received (its norm, and its sketch in the order received), so the sketch is not taken again.
Two runs compare alike: same elements, same arguments, same fingerprint; differing ones
differ as much. Only where that is the sketch of the tensor sent (`keeps_sketch`) may its
consumer reuse it: a consumer's received print must not depend on which ops made its gradient
(an autocast run puts a cast between a transpose and a weight)."""

_moves: dict[type, int] = {}


def moves_values(fn: Any) -> int:
    """0: `fn` is not a node of an op in MOVES_VALUES; 1: it is; 2: it keeps the order too; 3:
    it transposes (cached per node type)."""
    kind = type(fn)
    found = _moves.get(kind)
    if found is None:
        name = fn.name()
        found = _moves[kind] = (
            2 if name in KEEPS_ORDER else 3 if name in TRANSPOSES else 1 if name in MOVES_VALUES else 0
        )
    return found


_CASTS = frozenset({"ToCopyBackward0"})


def leafish(fn: Any, depth: int = 4) -> bool:
    """Is `fn` a leaf's accumulator, or an op that only moves or casts the elements of one
    (`w.t()`, autocast's copy of a weight)? Its output is a parameter's value seen another way."""
    for _ in range(depth):
        if hasattr(fn, "variable"):
            return True
        if not moves_values(fn) and fn.name() not in _CASTS:
            return False
        inputs = [f for f, _ in fn.next_functions if f is not None]
        if len(inputs) != 1:
            return False
        fn = inputs[0]
    return False


def unmoved(t: torch.Tensor) -> torch.Tensor:
    """The value fingerprinted as `t`, a forward output: the same elements before they were moved,
    where an op that only moves elements made `t` as a view of them (`w.t()`: `w`, read in
    order rather than across its rows)."""
    base = t._base
    if base is not None and t.grad_fn is not None and moves_values(t.grad_fn) and base.numel() == t.numel():
        return base
    return t


def plain(t: Any) -> bool:
    """Can `t`'s values be read (a strided tensor with storage, not a ZeroTensor or meta)?"""
    return (
        isinstance(t, torch.Tensor)
        and t.layout is torch.strided
        and not t.is_meta
        and not t._is_zerotensor()
        and t.numel() > 0
    )


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do two live tensors hold the same values with one sketch (the same memory at the same
    version, laid out alike, both contiguous with one 2-D form, or two matrices one the other's
    transpose)? Both alive, memory is not reused."""
    if a is b:
        return True
    if (
        a.data_ptr() != b.data_ptr()
        or a.dtype != b.dtype
        or a.device != b.device
        or a.numel() != b.numel()
        or a._version != b._version
    ):
        return False
    if a.shape == b.shape and a.stride() == b.stride():
        return True
    if a.dim() == 2 and b.dim() == 2 and a.shape == b.shape[::-1] and a.stride() == b.stride()[::-1]:
        return True
    return a.is_contiguous() and b.is_contiguous() and shape2d(tuple(a.shape)) == shape2d(tuple(b.shape))


def keeps_sketch(moves: int, received: tuple[int, ...], sent: tuple[int, ...]) -> bool:
    """Is the print a node of an op that only moves elements sends on (its received one) the
    sketch of the tensor it sent (`moves`: `moves_values`; the two tensors' shapes)?"""
    if moves == 2:
        return shape2d(received) == shape2d(sent)
    return moves == 3 and len(received) == 2 and len(sent) == 2
