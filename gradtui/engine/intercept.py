"""Patching torch's backward entry points, and routing each call to where it belongs.

While installed, `Tensor.backward`, `torch.autograd.backward` and `torch.autograd.grad` go
through an `Interceptor`, which decides for each call:

- left alone (torch's own function, untouched): calls from threads that existed before the
  session (the UI, a test runner), calls made inside a call that runs untouched, torch.func /
  vmap / torch.compile tracing / meta tensors (no values to read), and `Tensor.backward`
  handing over to `autograd.backward` inside one pass;
- nested: a backward that starts while a pass is in flight, from that pass's hooks (a user's
  hook, a reentrant checkpoint's recomputation) or from another thread: it runs unhooked and
  the owner is told (`PassOwner.nested`);
- the owner's own pass (`PassOwner.own_pass`): everything else, one at a time.

The owner (the Session) decides what a pass records and when it pauses; this module knows
nothing of either.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, ClassVar, Protocol

import torch

from gradtui.engine.compat import (
    GradientEdge,
    current_graph_task_id,
    functorch_level,
    get_gradient_edge,
    is_compiling,
    is_legacy_batched,
)
from gradtui.engine.hooks.plan import HOOK_MARK
from gradtui.engine.process.quitting import RunQuit
from gradtui.engine.provenance import forward as provenance
from gradtui.engine.provenance.forward import Provenance
from gradtui.protocol.events import Call


class GradtuiQuit(BaseException):
    """Raised in the script's thread to unwind it when the user quits.

    A BaseException, like KeyboardInterrupt, so a script's `except Exception` does not
    swallow it.
    """


class InFlight(Protocol):
    """What the interceptor reads of the pass in flight."""

    index: int
    task: int | None
    """Autograd's id of the pass's own engine call (None until its first hook ran)."""


class PassOwner(Protocol):
    """Where the interceptor hands the calls it does not leave alone (the Session)."""

    def own_pass(
        self, call: Call, frame: FrameType, roots: tuple[Any, ...], nodes: list[Any], run: Callable[[], Any]
    ) -> Any:
        """Run one pass of the owner's own: `nodes` are the roots' grad_fns, `run` the real call."""

    def nested(
        self, outer: InFlight, call: Call, frame: FrameType, roots: tuple[Any, ...], inside: bool = True
    ) -> None:
        """A backward is about to run unhooked inside pass `outer`'s engine call (`inside`) or
        beside it, on another thread."""

    def wants_provenance(self) -> bool:
        """Can a later pass still be captured (and its nodes' sources read)? Once not, forward
        provenance recording stops: the script's forward runs at plain speed."""


def as_roots(tensors: Any) -> tuple[Any, ...]:
    """Roots as torch reads them: a tensor or a GradientEdge, or any iterable of them (a list, a
    generator), as a tuple."""
    return (tensors,) if isinstance(tensors, (torch.Tensor, GradientEdge)) else tuple(tensors)


def root_nodes(roots: tuple[Any, ...]) -> list[Any]:
    """The graph node each root's gradient enters at: a tensor's grad_fn (a leaf's
    AccumulateGrad), a GradientEdge's node."""
    nodes = []
    for root in roots:
        if isinstance(root, GradientEdge):
            if root.node is not None:
                nodes.append(root.node)
        elif isinstance(root, torch.Tensor) and root.requires_grad:
            node = root.grad_fn  # a non-leaf's: what its gradient edge names, without building the edge
            nodes.append(node if node is not None else get_gradient_edge(root).node)
    return nodes


def _vmapped(arguments: tuple[Any, ...]) -> bool:
    """Is this backward call part of a torch.func transform (grad, vmap), or fed batched
    gradients (jacobian(vectorize=True))? Its gradients are then wrappers that statistics
    (`.item()`) cannot read."""
    if functorch_level() is not None:
        return True
    for value in arguments:  # a loop, not a generator per argument: every backward call pays for it
        if isinstance(value, torch.Tensor):
            if is_legacy_batched(value):
                return True
        elif isinstance(value, (tuple, list)):
            for item in value:
                if isinstance(item, torch.Tensor) and is_legacy_batched(item):
                    return True
    return False


class Route(Protocol):
    """The interceptor's router, as an entry point's wrapper calls it: the kind of call, the
    caller's frame, the roots, the real call, its other arguments (batched gradients among them
    make a pass gradtui leaves alone), and whether torch vmaps inside (is_grads_batched)."""

    def __call__(
        self,
        call: Call,
        frame: FrameType,
        roots: tuple[Any, ...],
        run: Callable[[], Any],
        arguments: tuple[Any, ...] = (),
        batched: bool = False,
    ) -> Any: ...


class EntryPoint:
    """One torch function that starts a backward pass, patched while a session is installed.

    A subclass says where the function lives (`owner`, `attribute`), which kind of call it makes
    (`call`, a row of `protocol.events.CALLS`: does it accumulate into `.grad`?) and how its
    arguments read as roots (`wrap`). A new entry point is one subclass, listed in
    `ENTRY_POINTS`; the interceptor patches and restores every row the same way.
    """

    owner: ClassVar[Any]
    """The object the function is an attribute of (`torch.Tensor`, the `torch.autograd` module)."""
    attribute: ClassVar[str]
    call: ClassVar[Call]

    @classmethod
    def original(cls) -> Callable[..., Any]:
        """The function installed now (torch's own, unless something else patched it)."""
        return getattr(cls.owner, cls.attribute)

    @classmethod
    def wrap(cls, original: Callable[..., Any], route: Route) -> Callable[..., Any]:
        """The patched function: reads the call's roots and hands `route` the real call. The
        wrapper itself must read `sys._getframe(1)`: that is the caller's frame, the call site."""
        raise NotImplementedError


class TensorBackward(EntryPoint):
    """`loss.backward(...)`: its roots are the tensor itself."""

    owner = torch.Tensor
    attribute = "backward"
    call = "backward"

    @classmethod
    def wrap(cls, original: Callable[..., Any], route: Route) -> Callable[..., Any]:
        """The wrapper keeps Tensor.backward's signature (positional arguments as torch takes them)."""

        @functools.wraps(original)
        def tensor_backward(tensor, gradient=None, retain_graph=None, create_graph=False, inputs=None):
            return route(
                cls.call,
                sys._getframe(1),
                (tensor,),
                lambda: original(tensor, gradient, retain_graph, create_graph, inputs),
                (gradient,),
            )

        return tensor_backward


class AutogradBackward(EntryPoint):
    """`torch.autograd.backward(tensors, ...)`: `tensors` may be a generator, read once."""

    owner: ClassVar[Any] = torch.autograd
    attribute = "backward"
    call = "backward"

    @classmethod
    def wrap(cls, original: Callable[..., Any], route: Route) -> Callable[..., Any]:
        """The wrapper hands torch the roots as a tuple, read once."""

        @functools.wraps(original)
        def backward(tensors, *args, **kwargs):
            roots = as_roots(tensors)
            return route(
                cls.call, sys._getframe(1), roots, lambda: original(roots, *args, **kwargs), (*args, *kwargs.values())
            )

        return backward


class AutogradGrad(EntryPoint):
    """`torch.autograd.grad(outputs, inputs, ...)`: gradients returned, not accumulated; with
    `is_grads_batched` torch vmaps inside, a pass gradtui leaves alone."""

    owner: ClassVar[Any] = torch.autograd
    attribute = "grad"
    call = "grad"

    @classmethod
    def wrap(cls, original: Callable[..., Any], route: Route) -> Callable[..., Any]:
        """The wrapper hands torch the outputs as a tuple, read once."""

        @functools.wraps(original)
        def grad(outputs, *args, **kwargs):
            roots = as_roots(outputs)
            batched = bool(kwargs.get("is_grads_batched") or (len(args) > 6 and args[6]))  # torch vmaps inside
            return route(
                cls.call,
                sys._getframe(1),
                roots,
                lambda: original(roots, *args, **kwargs),
                (*args, *kwargs.values()),
                batched=batched,
            )

        return grad


ENTRY_POINTS: tuple[type[EntryPoint], ...] = (TensorBackward, AutogradBackward, AutogradGrad)
"""Every torch function that starts a pass, patched on install and restored on uninstall."""


class Interceptor:
    """Patches torch's backward entry points (`ENTRY_POINTS`) and routes each call (see module doc)."""

    def __init__(self, owner: PassOwner, quitting: RunQuit, provenance: Provenance | None) -> None:
        self._owner = owner
        self._quitting = quitting
        self._provenance = provenance
        self._originals: dict[type[EntryPoint], Callable[..., Any]] | None = None
        """Torch's own function of each entry point, while patched."""
        self._register_hook: Callable[..., Any] | None = None
        self._local = threading.local()
        """Per thread: `state`, the pass whose engine call runs on it; `untouched`, inside a call
        left alone."""
        self._outside: frozenset[int | None] = frozenset()
        self._pass_lock = threading.Lock()
        """Held by the one pass in flight; a backward from another thread meanwhile runs unhooked."""
        self.in_flight: InFlight | None = None
        """The owner's hooked pass in flight (set by `begin`), for calls from other threads."""
        self.hooks_seen = False
        """Has the script registered a tensor hook while installed? (The hook plan keeps such nodes.)"""

    @property
    def installed(self) -> bool:
        """Are torch's functions patched now?"""
        return self._originals is not None

    def install(self) -> None:
        """Patch torch's entry points. Threads that exist now, other than the calling one, are not
        the script's (the UI, a test runner): their backward calls run untouched; threads the
        script starts later are routed like its main thread."""
        if self._originals is not None:
            return
        here = threading.current_thread()
        self._outside = frozenset(t.ident for t in threading.enumerate() if t is not here)
        self._originals = {entry: entry.original() for entry in ENTRY_POINTS}
        for entry, original in self._originals.items():
            setattr(entry.owner, entry.attribute, entry.wrap(original, self._route))
        register_hook = self._register_hook = torch.Tensor.register_hook

        @functools.wraps(register_hook)
        def register_tensor_hook(tensor, hook):
            handle = register_hook(tensor, hook)
            self.hooks_seen = True
            grad_fn = tensor.grad_fn
            if grad_fn is not None:  # a leaf's hooks are on the tensor itself (plan.user_hooked)
                grad_fn.metadata[HOOK_MARK] = True
            return handle

        torch.Tensor.register_hook = register_tensor_hook  # type: ignore[method-assign]  # the wrapper is the point

    def uninstall(self) -> None:
        """Restore torch's own functions."""
        if self._originals is None:
            return
        for entry, original in self._originals.items():
            setattr(entry.owner, entry.attribute, original)
        if self._register_hook is not None:
            torch.Tensor.register_hook = self._register_hook  # type: ignore[method-assign]  # torch's own back
            self._register_hook = None
        self._originals = None

    # ---- the owner's pass ------------------------------------------------------------------

    def begin(self, state: InFlight) -> None:
        """The owner's hooked pass `state` starts its engine call on this thread: a backward its
        hooks make is nested in it."""
        self.in_flight = state
        self._local.state = state

    def end(self) -> None:
        """The owner's hooked pass's engine call returned (or raised)."""
        self._local.state = None

    def untouched(self, run: Callable[[], Any], on_nested: Callable[[str, tuple[Any, ...]], None] | None = None) -> Any:
        """Run a backward call with every backward call it makes on this thread left alone
        (Tensor.backward calls autograd.backward, through our patch). `on_nested(call, roots)`
        hears of those made from inside its engine call (a reentrant checkpoint's)."""
        self._local.untouched = True
        self._local.on_nested = on_nested
        try:
            return run()
        finally:
            self._local.untouched = False
            self._local.on_nested = None

    # ---- routing ---------------------------------------------------------------------------

    def _route(
        self,
        call: Call,
        frame: FrameType,
        roots: tuple[Any, ...],
        run: Callable[[], Any],
        arguments: tuple[Any, ...] = (),
        batched: bool = False,
    ) -> Any:
        """Leave the call alone, run it nested, or hand it to the owner (see module doc).

        `arguments` are the call's other arguments: batched gradients among them (vmap), or
        `batched` (is_grads_batched=True), make the pass one gradtui leaves alone.
        """
        if threading.get_ident() in self._outside:
            return run()  # not the script's thread
        local = self._local
        if getattr(local, "untouched", False):  # inside a call that runs untouched
            if local.on_nested is not None and current_graph_task_id() != -1:
                local.on_nested(call, roots)
            return run()
        outer: InFlight | None = getattr(local, "state", None)
        if outer is not None:
            if current_graph_task_id() == -1:
                return run()  # the outer call handing over to torch (Tensor.backward calls autograd.backward)
            if outer.task is None:
                outer.task = current_graph_task_id()  # called from inside the outer pass's engine call
            self._owner.nested(outer, call, frame, roots)
            return run()  # a backward inside a backward (checkpointing, a user's hook)
        if batched or is_compiling() or self._provenance is None:
            return self._intercept(call, frame, roots, run, arguments, batched)
        # Provenance off the mode stack for the whole call: while it is on, every attribute
        # read of a tensor (`.grad`, `.dtype`) goes through its __torch_function__, and
        # gradtui's own work (checks, flow, leaf stats) makes no node worth a source. Inside the
        # engine, hooks see no mode anyway.
        try:
            with self._provenance.suspended():
                return self._intercept(call, frame, roots, run, arguments, batched)
        finally:
            if self._provenance is not None and not self._owner.wants_provenance():
                # On the script's thread, with the mode back on its stack: it can be popped now.
                self._provenance.uninstall()
                self._provenance = None

    def _intercept(
        self,
        call: Call,
        frame: FrameType,
        roots: tuple[Any, ...],
        run: Callable[[], Any],
        arguments: tuple[Any, ...],
        batched: bool,
    ) -> Any:
        """`_route` for a backward call that is not inside another: the owner's own pass, or one
        left alone (vmap, compile tracing, meta tensors, another thread's meanwhile)."""
        if (
            batched
            or _vmapped(arguments)
            or is_compiling()
            or any(isinstance(t, torch.Tensor) and t.is_meta for t in roots)
        ):
            return run()  # vmap, torch.func, torch.compile's tracing, meta: no values to read
        if self._quitting.asked:
            raise GradtuiQuit()
        nodes = root_nodes(roots)
        if not nodes:
            return run()  # torch raises its own clear error
        if not self._pass_lock.acquire(blocking=False):
            if (flight := self.in_flight) is not None:  # another thread's pass is in flight
                self._owner.nested(flight, call, frame, roots, inside=False)
            return self.untouched(run)  # Tensor.backward calls autograd.backward: announce it once
        try:
            frame = provenance.user_frame(frame) or frame  # jacobian() calls grad() from inside torch
            return self._owner.own_pass(call, frame, roots, nodes, run)
        finally:
            self.in_flight = None
            self._pass_lock.release()
