"""Gradient edits as pure functions of a hook's gradient tuple.

Each returns a new tuple (never modifies the tensors it is given, which autograd may still
use) or raises EditError, in which case the caller keeps the gradient unchanged. Positions
holding None (no gradient) stay None.
"""

from __future__ import annotations

from typing import Any

import torch


class EditError(ValueError):
    """An edit that was refused; the message names the problem."""


Grads = tuple[torch.Tensor | None, ...]


def _require_some(grads: Grads) -> None:
    if not any(isinstance(g, torch.Tensor) for g in grads):
        raise EditError("this node receives no gradient to edit")


def scale(grads: Grads, factor: float) -> Grads:
    """Multiply every incoming gradient by `factor`."""
    _require_some(grads)
    return tuple(None if g is None else g * factor for g in grads)


def zero(grads: Grads) -> Grads:
    """Replace every incoming gradient by zeros of the same shape, dtype and device."""
    _require_some(grads)
    return tuple(None if g is None else torch.zeros_like(g) for g in grads)


@torch.no_grad()
def clip(grads: Grads, max_norm: float) -> Grads:
    """Scale the gradients down so that their joint L2 norm is at most `max_norm`."""
    _require_some(grads)
    norms = [torch.linalg.vector_norm(_wide(_stored_values(g))) for g in grads if g is not None]
    total = float(torch.linalg.vector_norm(torch.stack(norms)))
    if not total <= max_norm:  # also true for nan/inf norms: those cannot be clipped
        if not torch.isfinite(torch.tensor(total)):
            raise EditError(f"cannot clip: the gradient's norm is {total}; use zero or set")
        # Rounding g * factor (and measuring the result) may land a hair above max_norm: aim
        # a little lower, by the dtype's epsilon or one part in a million (torch adds 1e-6 too).
        eps = max(torch.finfo(g.dtype).eps for g in grads if g is not None)
        factor = max_norm / total * (1 - max(eps, 1e-6))
        return tuple(None if g is None else g * factor for g in grads)
    return grads


def _wide(v: torch.Tensor) -> torch.Tensor:
    """`v` in double precision, complex kept complex (its norm counts the imaginary part)."""
    return v.to(torch.complex128 if v.is_complex() else torch.float64)


def _stored_values(g: torch.Tensor) -> torch.Tensor:
    """The values a gradient stores, whatever its layout (nn.Embedding(sparse=True) sends a
    sparse one): the same norm, and no dense copy of a huge embedding table."""
    if g.layout == torch.sparse_coo:
        return g.coalesce().values()
    return g if g.layout == torch.strided else g.to_dense()


def single(grads: Grads) -> Any:
    """What `g` means in an expression: the one gradient, or the tuple when there are several."""
    present = [g for g in grads if g is not None]
    return present[0] if len(present) == 1 and len(grads) == 1 else grads


def evaluate(expr: str, grads: Grads, extra: dict[str, Any] | None = None) -> Any:
    """Evaluate a user expression with `g` (see `single`), `torch` and `extra` names; `g` and
    `torch` win over an `extra` name of theirs (a script's own variable `g`)."""
    scope = {**(extra or {}), "torch": torch, "g": single(grads)}
    try:
        with torch.no_grad():
            return eval(expr, scope)  # noqa: S307 - the user typing into their own debugger
    except (Exception, SystemExit) as exc:  # `exit()` in an expression must not end the script
        raise EditError(f"{expr!r} failed: {type(exc).__name__}: {exc}") from None


def replace(grads: Grads, expr: str, extra: dict[str, Any] | None = None) -> Grads:
    """Replace the gradient by the value of `expr`; it must match shape, dtype and device."""
    _require_some(grads)
    value = evaluate(expr, grads, extra)
    wanted = single(grads)
    if isinstance(wanted, torch.Tensor):
        return (_check_like(value, wanted, expr),)
    if not isinstance(value, (tuple, list)) or len(value) != len(grads):
        raise EditError(f"{expr!r} must give a tuple of {len(grads)} gradients (g is a tuple here)")
    return tuple(None if old is None else _check_like(new, old, expr) for new, old in zip(value, grads))


def _check_like(value: Any, like: torch.Tensor, expr: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise EditError(f"{expr!r} gave {type(value).__name__}, not a tensor")
    problems = []
    if value.shape != like.shape:
        problems.append(f"shape {list(value.shape)} instead of {list(like.shape)}")
    if value.dtype != like.dtype:
        problems.append(f"dtype {value.dtype} instead of {like.dtype}")
    if value.device != like.device:
        problems.append(f"device {value.device} instead of {like.device}")
    if problems:
        raise EditError(f"{expr!r} gave a tensor with " + ", ".join(problems))
    if value is like:
        return value
    return value.detach()
