"""A gradient's statistics read there and then, in a planned hook (CPU: a read syncs nothing).

The planned hooks (gradtui.engine.hooks.planned) take each gradient's statistics as its node makes
it, so nothing is held past the hook; these are the same numbers the every-node hooks' bulk
reads make (gradtui.engine.stats.window), so the two kinds of pass agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from gradtui.engine.stats.measures import reduced
from gradtui.engine.stats.summary import CHUNK, dtype_name, summarize
from gradtui.protocol.stats import VALUES_LIMIT, Stats, light_stats, small_stats

BULK = {torch.float32: dtype_name(torch.float32), torch.float64: dtype_name(torch.float64)}
"""The dtypes read here (others go through `summarize`), with their names."""
_TENSOR, _STRIDED, _NORM = torch.Tensor, torch.strided, torch.linalg.vector_norm


def now_stats(grad: Any, full: bool) -> Stats | None:
    """A gradient's statistics, read now (CPU): as the window's bulk read makes them."""
    if grad is None:
        return None
    if (
        type(grad) is _TENSOR
        and (dtype := BULK.get(grad.dtype)) is not None
        and grad.layout is _STRIDED
        and 0 < (numel := grad.numel()) <= CHUNK
        and not grad.is_meta
        and not grad._is_zerotensor()
    ):
        if grad.requires_grad:
            grad = grad.detach()  # create_graph: gradtui's reductions record nothing
        if numel <= VALUES_LIMIT:  # a 1-d gradient lists itself; others are flattened first (a view: no copy)
            shape = tuple(grad.shape)
            return small_stats(
                shape, dtype, "cpu", tuple(grad.tolist() if len(shape) == 1 else grad.reshape(-1).tolist())
            )
        if (stats := _reduced(grad, dtype, numel, full)) is not None:
            return stats
    return summarize(grad, light=not full)  # also confirms a non-finite norm with isfinite


def _reduced(grad: torch.Tensor, dtype: str, numel: int, full: bool) -> Stats | None:
    """The Stats of a plain dense gradient too big to list, from its reductions (full: the norm and
    every measured statistic, gradtui.engine.stats.measures's `reduced`); None if one came back
    non-finite (`summarize` counts the non-finite values, or redoes an overflow in float64)."""
    if full:
        return reduced(grad, tuple(grad.shape), dtype, "cpu", numel)
    norm = _NORM(grad).item()
    return light_stats(tuple(grad.shape), dtype, "cpu", norm, 0) if math.isfinite(norm) else None


class Listed(NamedTuple):
    """A small gradient's values, listed in a posthook and found finite: its Stats (`resolved`)
    are made only if a batch with it is read. Read as Stats by the hooks' non-finite checks."""

    shape: tuple[int, ...]
    dtype: str
    values: tuple[float, ...]
    nonfinite: int = 0


class Normed(NamedTuple):
    """A big gradient's finite norm, taken in a posthook (light statistics): its Stats (`resolved`)
    are made only if a batch with it is read. `shape` is the tensor's `torch.Size` (a tuple; made a
    plain one then). Read as Stats by the hooks' non-finite checks."""

    shape: tuple[int, ...]
    dtype: str
    norm: float
    nonfinite: int = 0


def quick_stats(grad: Any, full: bool) -> Stats | Listed | Normed | None:
    """`now_stats`, but a small finite gradient only listed (`Listed`), a big finite one's norm only
    kept (`Normed`, light statistics): what a posthook keeps. Called for each gradient a hooked
    node sends on, so kept lean: a plain CPU float gradient of nobody's graph is checked once; a
    big one's light statistics take its norm first and return, its full ones its reductions
    (`measures.reduced`); a norm that is 0 (a ZeroTensor's is) or a reduction not finite (a float32 norm
    overflows on finite values) is decided by the full checks of `_quick_checked`, as is
    everything rare."""
    if (
        type(grad) is _TENSOR
        and grad.is_cpu
        and grad.layout is _STRIDED
        and not grad.requires_grad
        and (dtype := BULK.get(grad.dtype)) is not None
    ):  # is_cpu: not a meta tensor
        numel = grad.numel()
        if VALUES_LIMIT < numel <= CHUNK:
            if not full:
                norm = _NORM(grad).item()
                if norm - norm == 0.0 and norm != 0.0:
                    return _new(Normed, (grad.shape, dtype, norm, 0))
            elif (
                not grad._is_zerotensor()
                and (stats := reduced(grad, tuple(grad.shape), dtype, "cpu", numel)) is not None
            ):
                return stats
        elif 0 < numel <= VALUES_LIMIT and not grad._is_zerotensor():
            return _listed(grad, dtype)
    return _quick_checked(grad, full)


def _quick_checked(grad: Any, full: bool) -> Stats | Listed | Normed | None:
    """`quick_stats` with every check made (a rare gradient, a full read, a small one)."""
    if (
        type(grad) is _TENSOR
        and (dtype := BULK.get(grad.dtype)) is not None
        and grad.layout is _STRIDED
        and 0 < (numel := grad.numel()) <= CHUNK
        and not grad.is_meta
        and not grad._is_zerotensor()
    ):
        if grad.requires_grad:
            grad = grad.detach()  # create_graph: gradtui's reductions record nothing
        if numel > VALUES_LIMIT:
            if not full:
                norm = _NORM(grad).item()
                if norm - norm == 0.0:  # finite: else `summarize` counts, or redoes an overflow in float64
                    return _new(Normed, (grad.shape, dtype, norm, 0))
            elif (stats := _reduced(grad, dtype, numel, full)) is not None:
                return stats
            return summarize(grad, light=not full)
        return _listed(grad, dtype)
    return now_stats(grad, full)


def _listed(grad: Any, dtype: str) -> Stats | Listed:
    """A small CPU gradient's values, listed: a Listed when all are finite, else its Stats."""
    shape = tuple(grad.shape)
    values = tuple(grad.tolist() if len(shape) == 1 else grad.reshape(-1).tolist())
    total = sum(values)
    if total - total == 0.0:  # finite (an infinity or a NaN makes it NaN)
        return _new(Listed, (shape, dtype, values, 0))
    return small_stats(shape, dtype, "cpu", values)


_new = tuple.__new__  # a NamedTuple's own __new__ is a Python function


def resolved(stats: tuple[Any, ...]) -> tuple[Stats | None, ...]:
    """`stats` with each `Listed` or `Normed` made Stats (as `now_stats` makes them)."""
    for one in stats:
        kind = type(one)
        if kind is Listed or kind is Normed:
            return tuple([_stats(s) for s in stats])
    return stats


def _stats(one: Any) -> Stats | None:
    kind = type(one)
    if kind is Listed:
        return small_stats(one.shape, one.dtype, "cpu", one.values)
    if kind is Normed:
        return light_stats(tuple(one.shape), one.dtype, "cpu", one.norm, 0)
    return one


def measured(
    grads: tuple[Any, ...],
    full: bool,
    known: tuple[Any, ...] = (),
    stats: tuple[Stats | None, ...] = (),
    measure: Callable[[Any, bool], Any] = now_stats,
) -> tuple[Stats | None, ...]:
    """`measure` (`now_stats`) of each of `grads`, each tensor measured once: one that appears twice
    (both sides of an `x + x`), or is one of `known` (whose statistics are `stats`: a pass-through
    node sends on the very tensor it received), is not measured again."""
    out: list[Stats | None] = []
    for i, grad in enumerate(grads):
        if grad is not None:
            for j in range(i):
                if grads[j] is grad:
                    out.append(out[j])
                    break
            else:
                for j, other in enumerate(known):
                    if other is grad:
                        out.append(stats[j])
                        break
                else:
                    out.append(measure(grad, full))
        else:
            out.append(None)
    return tuple(out)
