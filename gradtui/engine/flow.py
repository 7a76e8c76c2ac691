"""Gradient flow: per leaf, the norm of its gradient next to the norm of its weight.

The classic check for vanishing and exploding layers (`grad_norm / weight_norm` far below
or above its neighbours). Norms are taken with two `torch._foreach_norm` calls for all
leaves at once, so a pass that runs unhooked pays a few microseconds per parameter.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence

import torch

from gradtui.model.events import ParamFlow
from gradtui.model.flowtext import flow_order
from gradtui.engine.summary import freed, local_shard


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


def gradient_flow(leaves: Sequence[tuple[str, int | None, torch.Tensor]]) -> tuple[ParamFlow, ...]:
    """ParamFlow rows for `(name, node id, leaf tensor)` items, sorted vanishing to exploding.

    Leaves without a `.grad` come first (ratio None), leaves with a non-finite gradient last.
    """
    leaves = [item for item in leaves if not freed(item[2])]  # FSDP2's resharded parameters: nothing to read
    with torch.no_grad():
        grads = [None if leaf.grad is None or freed(leaf.grad) else local_shard(leaf.grad) for _, _, leaf in leaves]
        have = [i for i, g in enumerate(grads) if g is not None]
        both = _norms([_dense(local_shard(leaf)) for _, _, leaf in leaves] + [_dense(grads[i]) for i in have])  # one fused call
        weight_norms = both[:len(leaves)]
        grad_norms: list[float | None] = [None] * len(leaves)
        for i, norm in zip(have, both[len(leaves):]):
            grad_norms[i] = norm
        rows = []
        for (name, node, leaf), grad, gnorm, wnorm in zip(leaves, grads, grad_norms, weight_norms):
            nonfinite = 0
            if gnorm is not None and not math.isfinite(gnorm):
                dense = _dense(grad)
                nonfinite = int((~torch.isfinite(dense)).sum())
            if gnorm is None:
                ratio = None
            elif wnorm > 0 or math.isnan(gnorm):
                ratio = gnorm / wnorm if wnorm > 0 else math.nan
            else:
                ratio = math.inf if gnorm > 0 else 0.0
            rows.append(ParamFlow(name, node, tuple(leaf.shape), gnorm, wnorm, ratio, nonfinite))
    return tuple(sorted(rows, key=flow_order))
