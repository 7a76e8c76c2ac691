"""Forward-time provenance: which user line and which nn.Module made each autograd node.

While user code runs, a `TorchFunctionMode` sees every Python-level torch call of the thread
that installed it. After a call that created autograd nodes it labels the nodes of the tensors
the call returned with the user's `(filename, lineno)` and the path of the innermost running
`nn.Module`, in the node's own `metadata` dict, so the labels live and die with the graph.
Nothing here holds a node, a tensor or a module.

While torch's own module code runs (the forward of nn.Linear, nn.TransformerEncoder ...), the
mode is off the thread's mode stack and its ops run at plain speed: their nodes are labelled
from the sequence numbers of the module calls, lazily (modulecalls.py). What that gives up:
nodes made by user code that such a module calls as a plain callable (an activation function)
get the module's path and call site, not the user's own line.

Custom `autograd.Function`s do not go through `__torch_function__`: while installed,
`Function.apply` is wrapped to label their nodes the same way (and so the node of a
reentrant `torch.utils.checkpoint`, which is one).

Nodes a call creates without returning them (`F.linear` makes `TBackward0` under
`AddmmBackward0`) are labelled later, when `source_of` or `module_of` first reads a node the
call returned: autograd numbers nodes per thread, so the call's other nodes are the ones below
it numbered from the call's first number on. Walking them during the forward would cost about
as much as the rest of the recording, and a pass usually reads few graphs of the many a
training loop makes.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradtui.engine.capture.labels import FIRST_KEY, MODULE_KEY, SOURCE_KEY, recorded
from gradtui.engine.compat import get_function_mode_stack, pop_mode
from gradtui.engine.compat import get_sequence_nr as _get_sequence_nr
from gradtui.engine.compat import is_compiling as _is_compiling
from gradtui.engine.compat import push_mode as _push_mode
from gradtui.engine.provenance import blame
from gradtui.engine.provenance.modulecalls import ModuleCalls
from gradtui.engine.provenance.modulecalls import forward_roots as forward_roots
from gradtui.protocol import places
from gradtui.protocol.events import SourceText

__all__ = [
    "FIRST_KEY",
    "MODULE_KEY",
    "SOURCE_KEY",
    "Provenance",
    "UnsavedSources",
    "forward_roots",
    "module_of",
    "source_of",
    "user_frame",
]

_Tensor = torch.Tensor
_Module = torch.nn.Module
_get_ident = threading.get_ident


# Which code is the user's (names kept short here: the forward's hot path reads them).
_is_user_file_cached = places.is_user_file
_started_by_user = places.started_by_user
_innermost_user = places.innermost_user
_SKIP_CODE_NAMES = places.SKIP_CODE_NAMES
user_frame = places.user_frame


def source_of(node: Any) -> tuple[str, int] | None:
    """The `(filename, lineno)` of the user's call that created `node`, if it was recorded."""
    return recorded(node, SOURCE_KEY)


def module_of(node: Any) -> str | None:
    """The qualified name of the nn.Module whose forward created `node`, if it was recorded,
    led by its root module's variable name (`model.fc1`; `model` for the root's own ops)."""
    return recorded(node, MODULE_KEY)


class UnsavedSources:
    """The source text of the files nodes were made in that exist only in this process: a
    notebook cell (IPython puts its text in `linecache.cache` under a file name that is not on
    disk), code exec'd from a string with its lines registered there. A client runs in another
    process and reads sources with its own `linecache`, so without this a cell's node shows
    `at 3049230926.py:1` and no line. Each file is looked at once (`linecache.getlines`, which
    serves files and cells alike) and its text sent once, as a `SourceText` event."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def new(self, paths: Iterable[str | None]) -> list[SourceText]:
        """The texts of those of `paths` not looked at before that are readable here but not
        files on disk (a client reads a file on disk itself)."""
        out = []
        for path in set(paths) - self._seen:
            if path is None:
                continue
            self._seen.add(path)
            if not os.path.isfile(path):
                lines = linecache.getlines(path)
                if lines:
                    out.append(SourceText(path, tuple(lines)))
        return out


class Provenance(TorchFunctionMode):
    """Records source line and module path on grad_fns created while installed.

    Only the installing thread and the threads started after install are recorded: torch
    keeps the function-mode stack per thread (a new thread starts with an empty stack), so
    `Thread.start` is wrapped to push the mode in each new thread; the wrapper of
    `nn.Module.__call__`, which is process-wide, ignores other threads. So install() and
    uninstall() must run on the thread that runs the forward pass. Nothing is recorded while grad mode is off, and
    a user's own TorchFunctionMode or `torch.no_grad()` inside the script keeps working.
    """

    def __init__(self) -> None:
        super().__init__()
        self._thread: int | None = None
        self._call: Any = None
        """`nn.Module.__call__` as it was before install."""
        self._wrapped_call: Any = None
        self._mode_pushed = False
        self._apply: Any = None
        """`Function.apply` as it was before install (a classmethod object)."""
        self.module_calls = ModuleCalls(self)
        """The running module calls of each recorded thread (the installing one and those it
        starts), and the stretches of torch's module code the mode is off for."""
        self._start: Any = None
        """`threading.Thread.start` as it was before install."""

    # -- install / uninstall -------------------------------------------------------------

    def install(self) -> None:
        """Start recording on the calling thread; a second call does nothing."""
        if self._thread is not None:
            return
        self._thread = _get_ident()
        self.module_calls.reset()
        self.module_calls.record_thread(self._thread)
        try:
            self._wrap_module_call()
            _push_mode(self)
            self._mode_pushed = True
            self._wrap_function_apply()
            self._wrap_thread_start()
            blame.install(
                frozenset({Provenance.__torch_function__.__code__, self._wrapped_apply.__func__.__code__}),
                __file__,
                globals(),
            )
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        """Stop recording and put back what it wrapped; safe to call twice or after a failed install."""
        blame.uninstall()
        if self._call is not None:
            if _Module.__dict__.get("__call__") is self._wrapped_call:
                _Module.__call__ = self._call  # type: ignore[method-assign]  # putting torch's own back
            self._call = None
        if self._apply is not None:
            if torch.autograd.Function.__dict__.get("apply") is self._wrapped_apply:
                torch.autograd.Function.apply = self._apply  # type: ignore[method-assign]  # torch's own back
            self._apply = None
        if self._start is not None:
            if threading.Thread.start is self._wrapped_start:
                threading.Thread.start = self._start  # type: ignore[method-assign]  # the original back
            self._start = None
        if self._mode_pushed and self._thread == _get_ident():
            self._pop_self()
            self._mode_pushed = False
        # From another thread the mode cannot be popped; _thread = None makes it inert.
        self._thread = None
        self.module_calls.reset()

    def _wrap_module_call(self) -> None:
        """Keep the recorded threads' module stacks in `nn.Module.__call__` (`ModuleCalls.wrap`).
        If someone wraps `__call__` over ours meanwhile, uninstall leaves theirs in place: ours
        inside it is then inert (it records no thread)."""
        self._call = _Module.__dict__["__call__"]
        self._wrapped_call = self.module_calls.wrap(self._call)
        _Module.__call__ = self._wrapped_call  # type: ignore[method-assign]  # the wrapper is the point

    def _pop_self(self) -> bool:
        """Take this mode off the calling thread's mode stack (`remove_mode`)."""
        return remove_mode(self)

    def suspended(self) -> contextlib.AbstractContextManager[None]:
        """Record nothing on this thread meanwhile, at no cost per op: the mode is off the stack
        (`suspended_mode`). For a backward pass: its hooks' reductions (gradtui's and the
        user's) make no node worth a source, yet each would go through `__torch_function__`."""
        return suspended_mode(self)

    def _wrap_thread_start(self) -> None:
        """Record the threads the script starts too: push this mode at the start of their run
        (torch keeps function modes per thread, and a new thread starts with none)."""
        original = threading.Thread.start
        mode = self

        def start(thread: threading.Thread) -> None:
            if not _started_by_user(sys._getframe(1)):  # torch's compile workers and the like
                return original(thread)
            run = thread.run

            def recorded_run() -> None:
                ident = _get_ident()
                if mode._thread is None:  # uninstalled before the thread got going
                    return run()
                mode.module_calls.record_thread(ident)
                _push_mode(mode)
                try:
                    return run()
                finally:
                    mode._pop_self()
                    mode.module_calls.forget_thread(ident)

            thread.run = recorded_run  # type: ignore[method-assign]
            return original(thread)

        start.__doc__ = original.__doc__
        self._start = original
        self._wrapped_start = start
        threading.Thread.start = start  # type: ignore[method-assign, assignment]  # the wrapper is the point

    def __enter__(self) -> Provenance:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- recording -----------------------------------------------------------------------

    def _wrap_function_apply(self) -> None:
        """Label the nodes custom autograd.Functions make, as __torch_function__ does for ops."""
        original = torch.autograd.Function.__dict__["apply"]
        call = original.__func__
        mode = self

        def apply(cls, *args, **kwargs):
            if _is_compiling() or _get_ident() not in mode.module_calls.threads:
                return call(cls, *args, **kwargs)
            start = _get_sequence_nr()
            out = call(cls, *args, **kwargs)
            created = _get_sequence_nr() - start
            if created:
                mode._label(out, start, created)
            return out

        apply.__doc__ = call.__doc__
        self._apply = original
        self._wrapped_apply = classmethod(apply)
        torch.autograd.Function.apply = self._wrapped_apply  # type: ignore[method-assign, assignment]  # the wrapper is the point

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if _is_compiling():  # torch.compile traces this method: record nothing, break no graph
            return func(*args, **kwargs) if kwargs else func(*args)
        # Autograd numbers the nodes it makes per thread: an unchanged counter means the
        # call made none (grad mode off, no input requiring grad, `x.shape`): nothing to do.
        start = _get_sequence_nr()
        out = func(*args, **kwargs) if kwargs else func(*args)
        created = _get_sequence_nr() - start
        if created and self._thread is not None:
            self._label(out, start, created)
        return out

    def _label(self, out: Any, start: int, created: int) -> None:
        """Label the nodes of the tensors in `out` (a tensor, or a tuple/list of them)."""
        where = None
        labelled = []
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, _Tensor):
                fn = t.grad_fn
                if fn is not None:
                    md: dict[str, Any] = fn.metadata  # type: ignore[assignment]  # torch declares Node.metadata a method; it is a property
                    if SOURCE_KEY not in md:
                        if where is None:
                            where = self._where(sys._getframe(2))
                        md[SOURCE_KEY], md[MODULE_KEY] = where
                        labelled.append(md)
        if len(labelled) < created:  # the call made nodes it did not return
            for md in labelled:
                md[FIRST_KEY] = start

    def _where(self, caller: Any) -> tuple[tuple[str, int] | None, str | None]:
        """(source, module) of an op whose __torch_function__ was called from `caller`."""
        source: tuple[str, int] | None
        state = self.module_calls.threads.get(_get_ident())
        top = state.stack[-1] if state is not None and state.stack else None
        code = caller.f_code
        if _is_user_file_cached(code.co_filename) and code.co_name not in _SKIP_CODE_NAMES:
            source = (code.co_filename, caller.f_lineno)
        elif top is not None and top.where is not None:
            # Inside a torch module's forward with the mode still on (a mode of the script's
            # was above it): the line that called the module.
            source = top.where[0]
        else:
            source = _innermost_user(caller)
        return source, None if top is None else top.name


# ---- a TorchFunctionMode taken off the calling thread's mode stack and put back, under whatever
# modes the script pushed above it meanwhile. torch keeps function modes per thread as a stack,
# and a script (or torch itself: `FakeTensorMode`, `torch.compile`'s tracing) may push its own
# modes above provenance's: popping it must keep those, in their order; putting it back must not
# bury them.


def remove_mode(mode: Any) -> bool:
    """Take `mode` off the calling thread's mode stack, keeping any mode pushed above it;
    False if it was not there."""
    if not any(m is mode for m in get_function_mode_stack()):
        return False
    above = []
    while (popped := pop_mode()) is not mode:
        above.append(popped)
    for m in reversed(above):
        _push_mode(m)
    return True


@contextlib.contextmanager
def suspended_mode(mode: Any) -> Iterator[None]:
    """`mode` off this thread's stack meanwhile (nothing reaches it, at no cost per op), then
    back where it was: under the modes that were above it, or on top if the script changed the
    stack in between."""
    stack = get_function_mode_stack()
    where = next((i for i, m in enumerate(stack) if m is mode), None)
    if where is None:
        yield
        return
    above = stack[where + 1 :]
    remove_mode(mode)
    try:
        yield
    finally:
        now = get_function_mode_stack()
        count = len(above)
        if count <= len(now) and all(a is b for a, b in zip(now[len(now) - count :], above)):
            for _ in range(count):
                pop_mode()
            _push_mode(mode)
            for m in above:
                _push_mode(m)
        else:
            _push_mode(mode)
