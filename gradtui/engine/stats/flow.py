"""Gradient flow: per leaf, the norm of its gradient next to the norm of its weight.

The classic check for vanishing and exploding layers (`grad_norm / weight_norm` far below
or above its neighbours). Norms are taken with two `torch._foreach_norm` calls for all
leaves at once, so a pass that runs unhooked pays a few microseconds per parameter.
"""

from __future__ import annotations

import gc
import math
import sys
import weakref
from collections.abc import Callable, Sequence

import torch

from gradtui.engine.stats.summary import freed, local_shard
from gradtui.protocol.events import ParamFlow
from gradtui.protocol.flowtext import flow_order


class LeafNames:
    """Names of leaf tensors seen in recorded passes, held weakly (a dict by id: tensors compare
    elementwise, so a WeakKeyDictionary cannot hold them)."""

    def __init__(self) -> None:
        self._names: dict[int, tuple[weakref.ref, str]] = {}

    def remember(self, leaf: torch.Tensor, name: str) -> None:
        """Name `leaf` until it dies."""
        key = id(leaf)
        names = self._names
        known = names.get(key)
        if known is not None and known[1] == name and known[0]() is leaf:
            return  # named so already (every pass names its parameters again)

        def forget(ref: weakref.ref, key: int = key) -> None:
            if names.get(key, (None,))[0] is ref:
                del names[key]

        self._names[key] = (weakref.ref(leaf, forget), name)

    def get(self, leaf: torch.Tensor) -> str | None:
        """The name `leaf` was given, if any."""
        entry = self._names.get(id(leaf))
        return entry[1] if entry is not None and entry[0]() is leaf else None


SHARD_LABEL = " (local shard)"
"""Added to the name of a parameter whose flow is of this rank's shard (FSDP2)."""


class Shards:
    """FSDP2's unsharded parameters -> their sharded DTensor parameters, held weakly.

    Under `fully_shard` the graph's leaves are the unsharded parameters, whose storage FSDP2 frees
    after the pass (and after the forward); the gradient lives on the sharded parameter (a
    DTensor: this rank's shard). FSDP2's per-parameter record (`FSDPParam`) holds both
    (`_unsharded_param`, `sharded_param`, and the name from the root module, `_param_fqn`, which
    the graph cannot give the leaf) and nothing points back from the leaf, so it is found
    once per leaf among the leaf's referrers (one walk of the heap, at the first pass that has
    such leaves; a leaf with no shard is remembered too, so it costs nothing after).
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[weakref.ref, weakref.ref | None, str | None]] = {}

    def of(self, leaves: list[torch.Tensor]) -> list[tuple[torch.Tensor, str | None] | None]:
        """The sharded parameter of each freed leaf and FSDP2's name for it, or None."""
        missing = [leaf for leaf in leaves if self._entry(leaf) is None]
        if missing:
            self._find(missing)
        out: list[tuple[torch.Tensor, str | None] | None] = []
        for leaf in leaves:
            entry = self._entry(leaf)
            shard = entry[1]() if entry is not None and entry[1] is not None else None
            out.append(None if shard is None or entry is None else (shard, entry[2]))
        return out

    def _entry(self, leaf: torch.Tensor) -> tuple[weakref.ref, weakref.ref | None, str | None] | None:
        entry = self._known.get(id(leaf))
        return entry if entry is not None and entry[0]() is leaf else None

    def _find(self, leaves: list[torch.Tensor]) -> None:
        wanted = {id(leaf): leaf for leaf in leaves}
        found: dict[int, tuple[torch.Tensor, str | None]] = {}
        for holder in gc.get_referrers(*leaves):
            record = holder if isinstance(holder, dict) else getattr(holder, "__dict__", None)
            if not isinstance(record, dict):
                continue
            unsharded, sharded = record.get("_unsharded_param"), record.get("sharded_param")
            if id(unsharded) in wanted and unsharded is wanted[id(unsharded)] and isinstance(sharded, torch.Tensor):
                fqn = record.get("_param_fqn")
                found[id(unsharded)] = (sharded, fqn if isinstance(fqn, str) and fqn else None)
        known = self._known
        for key, leaf in wanted.items():

            def forget(ref: weakref.ref, key: int = key) -> None:
                if known.get(key, (None,))[0] is ref:
                    del known[key]

            shard, fqn = found.get(key, (None, None))
            known[key] = (weakref.ref(leaf, forget), weakref.ref(shard) if shard is not None else None, fqn)


_SHARDS = Shards()

_FSDP = "torch.distributed.fsdp"
"""FSDP (1 and 2) frees the storage of tensors it keeps (an unsharded parameter after backward);
until a script imports it, no leaf of a pass is looked at for that."""


def _sharded(leaves: Sequence[tuple[str, int | None, torch.Tensor]]) -> list[tuple[str, int | None, torch.Tensor]]:
    """The leaves to read: a freed one (FSDP2's unsharded parameter) as its sharded parameter,
    named as FSDP2 names it and as this rank's shard, or left out if it has none (nothing to read)."""
    gone = [freed(leaf) for _, _, leaf in leaves]
    if not any(gone):
        return list(leaves)
    shards = iter(_SHARDS.of([leaf for (_, _, leaf), g in zip(leaves, gone) if g]))
    out = []
    for (name, node, leaf), g in zip(leaves, gone):
        if not g:
            out.append((name, node, leaf))
        elif (found := next(shards)) is not None:
            shard, fqn = found
            out.append(((fqn or name) + SHARD_LABEL, node, shard))
    return out


def _norms(tensors: list[torch.Tensor]) -> list[float]:
    """L2 norms of dense floating tensors, in one fused call when torch allows it."""
    if not tensors:
        return []
    try:
        return [float(n) for n in torch.stack(torch._foreach_norm(tensors)).tolist()]
    except (RuntimeError, TypeError):  # mixed devices or dtypes _foreach_norm refuses
        return [float(torch.linalg.vector_norm(t.detach().to(torch.float64))) for t in tensors]


_PLAIN_FLOATS = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})


def _dense(t: torch.Tensor) -> torch.Tensor:
    """`t` as a dense real floating tensor for a norm (its caller holds `torch.no_grad()`)."""
    if t.dtype in _PLAIN_FLOATS and t.layout == torch.strided:
        return t  # the common case, in one test: no_grad records nothing, so no detached copy is needed
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_complex():
        t = t.abs()
    if not t.is_floating_point():
        t = t.to(torch.float32)
    return t


def both_norms(weights: list[torch.Tensor], grads: list[torch.Tensor]) -> list[float]:
    """The L2 norms of `weights`, then of `grads`, in one fused call (`gradient_flow`'s default)."""
    return _norms(weights + grads)


def gradient_flow(
    leaves: Sequence[tuple[str, int | None, torch.Tensor]],
    norms: Callable[[list[torch.Tensor], list[torch.Tensor]], list[float]] = both_norms,
) -> tuple[ParamFlow, ...]:
    """ParamFlow rows for `(name, node id, leaf tensor)` items, sorted vanishing to exploding.

    Leaves without a `.grad` come first (ratio None), leaves with a non-finite gradient last.
    `norms(weights, grads)`: the L2 norms of both lists, weights first (one fused
    `torch._foreach_norm`; a pass's end reads them with its leaves' gradient statistics,
    gradtui.engine.stats.leaves).
    """
    sharding = _FSDP in sys.modules
    if sharding:
        leaves = _sharded(leaves)
    with torch.no_grad():
        if sharding:
            grads = [None if leaf.grad is None or freed(leaf.grad) else local_shard(leaf.grad) for _, _, leaf in leaves]
        else:  # nothing frees a storage: the common case, without a storage look-up per leaf
            grads = [None if (g := leaf.grad) is None else local_shard(g) for _, _, leaf in leaves]
        have = [i for i, g in enumerate(grads) if g is not None]
        both = norms([_dense(local_shard(leaf)) for _, _, leaf in leaves], [_dense(g) for g in grads if g is not None])
        weight_norms = both[: len(leaves)]
        grad_norms: list[float | None] = [None] * len(leaves)
        for i, norm in zip(have, both[len(leaves) :]):
            grad_norms[i] = norm
        rows = []
        for (name, node, leaf), grad, gnorm, wnorm in zip(leaves, grads, grad_norms, weight_norms):
            nonfinite = 0
            if gnorm is not None and grad is not None and not math.isfinite(gnorm):
                dense = _dense(grad)
                nonfinite = int((~torch.isfinite(dense)).sum())
            if gnorm is None:
                ratio = None
            elif wnorm > 0 or math.isnan(gnorm):
                ratio = gnorm / wnorm if wnorm > 0 else math.nan
            else:
                ratio = math.inf if gnorm > 0 else 0.0
            rows.append(ParamFlow(name, node, tuple(local_shard(leaf).shape), gnorm, wnorm, ratio, nonfinite))
    return tuple(sorted(rows, key=flow_order))
