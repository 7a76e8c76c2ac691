"""Gradient edits as pure functions of a hook's gradient tuple, and the evaluation of the
expressions `set`, `print` and `why` type.

Each edit returns a new tuple (never modifies the tensors it is given, which autograd may still
use) or raises EditError, in which case the caller keeps the gradient unchanged. Positions
holding None (no gradient) stay None.

A replacement is checked for everything torch's hook check refuses (a non-tensor, another
shape, dtype, device or layout: `g.to_sparse()` was accepted and then aborted the pass), so a
refused edit leaves the pass unharmed.

Expressions run in `safe_eval`: whatever they raise, BaseExceptions included (a generator's
`.throw(KeyboardInterrupt)`, `exit()`), is an ExpressionError, never the end of the run; only
gradtui's own control exceptions (its quit) pass. `g` in an expression is a copy of the
gradient, so `print g.mul_(0)` cannot change the pass behind the user's back, and `set
g.mul_(2)` changes only the copy it hands back as the edit (not a tensor that autograd also
sent elsewhere, as AddBackward0 sends one gradient to both its inputs).
"""

from __future__ import annotations

import ast
import contextlib
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from gradtui.engine.process.quitting import failure_text, raised_by_user
from gradtui.engine.stats.summary import no_values


class EditError(ValueError):
    """An edit that was refused; the message names the problem."""


class ExpressionError(EditError):
    """A user's expression raised; the message names the expression and what it raised.

    Only the exception's class (`error`) and `Type: message` (`detail`) are kept, not the
    exception: its traceback would hold the evaluation's frames, and with them the gradients.
    """

    def __init__(self, message: str, error: type[BaseException], detail: str) -> None:
        super().__init__(message)
        self.error = error
        self.detail = detail


Grads = tuple[torch.Tensor | None, ...]


@contextmanager
def _guarded(expr: str, doing: str = "failed") -> Iterator[None]:
    """Turn whatever user code raises in the block into an ExpressionError about `expr`."""
    try:
        yield
    except EditError:
        raise
    except BaseException as exc:
        if not raised_by_user(exc):
            raise
        kind, detail = type(exc), failure_text(exc)
        del exc  # drop the traceback (and the frames and tensors it holds) now
        raise ExpressionError(f"{_shown(expr)} {doing}: {detail}", kind, detail) from None


def _shown(expr: str, limit: int = 80) -> str:
    return repr(expr) if len(expr) <= limit else repr(expr[:limit]) + "..."


def safe_eval(expr: str, scope: dict[str, Any]) -> Any:
    """`eval(expr, scope)` without autograd recording; anything it raises (BaseException too,
    gradtui's quit aside) comes back as an ExpressionError whose `error` is the class raised."""
    with _guarded(expr), torch.no_grad():
        return eval(expr, scope)  # noqa: S307 - the user typing into their own debugger


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


def _copies(grads: Grads) -> tuple[Grads, tuple[int, ...]]:
    """Copies of the gradients for an expression to use as `g`, and their version counters
    right after copying (a ZeroTensor's copy is real zeros: an expression may write to it)."""
    with torch.no_grad():
        copies = tuple(None if g is None else g.clone() for g in grads)
    return copies, tuple(-1 if c is None else c._version for c in copies)


def evaluate(expr: str, grads: Grads, extra: dict[str, Any] | None = None) -> Any:
    """Evaluate a user expression with `g` (copies of the gradients, see `single`), `torch` and
    `extra` names; `g` and `torch` win over an `extra` name of theirs (a script's own `g`)."""
    return _evaluate(expr, _copies(grads)[0], extra)


def _evaluate(expr: str, grads: Grads, extra: dict[str, Any] | None) -> Any:
    return safe_eval(expr, {**(extra or {}), "torch": torch, "g": single(grads)})


def replace(grads: Grads, expr: str, extra: dict[str, Any] | None = None) -> Grads:
    """Replace the gradient by the value of `expr`; it must be what torch's hook check accepts
    in its place: a tensor of the same shape, dtype, device and layout (see `check_like`)."""
    _require_some(grads)
    copies, versions = _copies(grads)
    return _accepted(_evaluate(expr, copies, extra), grads, copies, versions, expr)


def _accepted(value: Any, grads: Grads, copies: Grads, versions: tuple[int, ...], expr: str) -> Grads:
    """`value` (what `expr` made of the copies `copies` of `grads`) as the replacement gradients,
    checked as torch's hook check would (see `check_like`), or an EditError."""

    def untouched(item: Any) -> Any:
        """The gradient itself for a copy of it that came back unchanged (`set g`): the same
        values, and no copy kept."""
        for original, copy, version in zip(grads, copies, versions):
            if copy is not None and item is copy and copy._version == version:
                return original
        return item

    with _guarded(expr, "gave a value that could not be checked"):  # a user object's __len__ may raise
        wanted = single(grads)
        if isinstance(wanted, torch.Tensor):
            return (check_like(untouched(value), wanted, expr),)
        if not isinstance(value, (tuple, list)) or len(value) != len(grads):
            raise EditError(f"{_shown(expr)} must give a tuple of {len(grads)} gradients (g is a tuple here)")
        new: list[torch.Tensor | None] = []
        for i, (item, old) in enumerate(zip(value, grads)):
            if old is None:
                if item is not None:
                    raise EditError(
                        f"{_shown(expr)} gave a value at [{i}], where the node receives no gradient:"
                        " give None there (torch cannot replace a None gradient)"
                    )
                new.append(None)
            else:
                new.append(check_like(untouched(item), old, expr))
        return tuple(new)


class Shell:
    """The names `!STATEMENT` runs in at one pause (pdb's `!`): `g` (a copy of the incoming
    gradient, as in `set`), `torch` and the caller's `names` (the node, its module, the call-site
    variables), kept from one statement to the next until the engine moves on. A statement that
    rebinds `g`, or writes into it, edits the gradient: `edited` says to what, checked as `set`'s
    value is."""

    def __init__(self, grads: Grads, names: dict[str, Any]) -> None:
        self.names: dict[str, Any] = {**names, "torch": torch}
        """The namespace, its globals: what a statement binds stays for the next one."""
        self._copies: Grads = ()
        self._versions: tuple[int, ...] = ()
        self.took(grads)

    def took(self, grads: Grads) -> None:
        """The pause's gradients are `grads` now (at the start, after an edit): `g` is a copy of them."""
        self._copies, self._versions = _copies(grads)
        self.names["g"] = single(self._copies)

    def run(self, source: str) -> str:
        """Run `source` (a bare expression's value echoed, as pdb's `!` and the REPL do) without
        autograd recording; what it prints comes back as text, not on the script's stdout. An
        error is an ExpressionError whose message follows what was printed before it."""
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), _guarded(source), torch.no_grad():
                for code in _compiled(source):
                    exec(code, self.names)  # noqa: S102 - the user typing into their own debugger
        except ExpressionError as exc:
            printed = out.getvalue()
            raise ExpressionError(printed + str(exc), exc.error, exc.detail) from None
        return out.getvalue()

    def edited(self, grads: Grads, text: str) -> Grads | None:
        """What the statements made of `g`, if they rebound it or wrote into its copy: the new
        gradients (checked, an EditError if torch would refuse them); None if `g` is as it was."""
        value = self.names.get("g")
        same = value is single(self._copies) and all(
            c is None or c._version == v for c, v in zip(self._copies, self._versions)
        )
        if same:
            return None
        _require_some(grads)
        return _accepted(value, grads, self._copies, self._versions, text)


def _compiled(source: str) -> list[Any]:
    """`source` as code objects: its statements, the last one (a bare expression) in the REPL's
    'single' mode, which prints its value (pdb's `!x` prints x)."""
    tree = ast.parse(source, "<gradtui>", "exec")
    body, last = tree.body[:-1], tree.body[-1:]
    codes = []
    if body:
        codes.append(compile(ast.Module(body, []), "<gradtui>", "exec"))
    if last:
        codes.append(compile(ast.Interactive(last), "<gradtui>", "single"))
    return codes


def check_like(value: Any, like: torch.Tensor, expr: str) -> torch.Tensor:
    """`value` (detached) if torch's hook check would let it replace the gradient `like`, else
    an EditError naming every difference.

    Torch's check (check_variable_result) compares the tensor type (backend and dtype: a sparse,
    mkldnn or nested tensor is another backend), the device type and the sizes; the device
    index is compared too, since a gradient on another GPU would fail the node.
    """
    if not isinstance(value, torch.Tensor):
        raise EditError(f"{_shown(expr)} gave {type(value).__name__}, not a tensor")
    if value.is_nested != like.is_nested:  # before the shape: a nested tensor has none
        raise EditError(f"{_shown(expr)} gave {'a' if value.is_nested else 'not a'} nested tensor")
    problems = []
    if value.shape != like.shape:
        problems.append(f"shape {list(value.shape)} instead of {list(like.shape)}")
    if value.dtype != like.dtype:
        problems.append(f"dtype {value.dtype} instead of {like.dtype}")
    if value.device != like.device:
        problems.append(f"device {value.device} instead of {like.device}")
    if value.layout != like.layout:
        problems.append(f"layout {value.layout} instead of {like.layout}")
    if problems:
        raise EditError(f"{_shown(expr)} gave a tensor with " + ", ".join(problems))
    if (why := no_values(value)) is not None and no_values(like) is None:
        raise EditError(f"{_shown(expr)} gave a tensor with no values ({why})")
    return value if value is like else value.detach()
