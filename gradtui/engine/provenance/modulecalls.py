"""Which nn.Module calls are running on a recorded thread, and which nodes each made.

Provenance's wrapper of `nn.Module.__call__` keeps a stack of running module calls per recorded
thread. A call's path is relative to the outermost module that is running: its forward, or a
method called on it from outside (Lightning's `training_step` calling `self.net(x)`, a trainer's
loop calling `model.compute_loss`): the same root parameter names are relative to (`net.2.bias`
is made in module `net.2`).

While torch's own module code runs (nn.Linear, nn.LayerNorm, nn.TransformerEncoder ...) no
user line can be the source of a node, so provenance's mode is taken off the thread's mode
stack for that stretch: torch's ops run at plain speed. The stretch's module calls are recorded
as marks instead, (sequence number, labels): autograd numbers nodes per thread, so a node made
in the stretch belongs to the innermost call whose mark is the last at or below its number. The
stretch's outputs carry the marks (a `Span`); the nodes below them are labelled from it when
provenance is first read. User code called from inside a stretch as a module (a user block in
an nn.Sequential) gets the mode back while its forward runs; user code called as a plain
callable (an activation function given to a torch layer) does not: its nodes get the stretch's
labels, the torch module's path and call site.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.nn.modules import module as _nn_module

from gradtui.engine.capture.labels import Span, Where, label_outputs
from gradtui.engine.compat import dynamo_skips as _dynamo_skips
from gradtui.engine.compat import get_function_mode_stack_at, get_function_mode_stack_len
from gradtui.engine.compat import get_sequence_nr as _get_sequence_nr
from gradtui.engine.compat import is_compiling as _is_compiling
from gradtui.engine.compat import pop_mode as _pop_mode
from gradtui.engine.compat import push_mode as _push_mode
from gradtui.protocol import places

forward_roots: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
"""Modules at the top of a recorded module stack (a model, a GAN's `netG` and `netD`, a
LightningModule whose `training_step` ran; not a template layer that was only copied): the roots
that name things, each with the name that leads its module paths (its variable where it was
called, else its class). Set once per root, never per call."""

_Module = torch.nn.Module
_CALL_FILE = _nn_module.__file__
_new_tuple = tuple.__new__
"""Makes a Call or Span without the NamedTuple's Python-level __new__ (the hooks' hot path)."""
_get_ident = threading.get_ident
_is_user_file = places.is_user_file
_innermost_user = places.innermost_user
_stack_len = get_function_mode_stack_len
_stack_at = get_function_mode_stack_at


class Call(NamedTuple):
    """One running module call on a recorded thread's stack."""

    key: int
    """id() of the module."""
    name: str
    """Its path, led by its root's variable (`model.net.2`)."""
    root: list
    """Its root's entry (see `ModuleCalls._root_entry`)."""
    prefix: str
    """What leads the names of the root's map (`model.`)."""
    path: str
    """What leads the names of unregistered modules it calls."""
    where: Where | None
    """If its forward is torch's own code: the labels of the nodes it makes (its caller's user
    line, its path); None for user code, whose ops the mode labels as they are made."""


class ThreadCalls:
    """One recorded thread's running module calls, its open stretch of torch's module code, and
    whether the mode is off."""

    __slots__ = ("stack", "depth", "start", "seqs", "labels", "popped")

    def __init__(self) -> None:
        self.stack: list[Call] = []
        self.depth = -1
        """Where the stretch's outermost call sits on the stack; -1: no stretch is open."""
        self.start = 0
        """The stretch's first sequence number."""
        self.seqs: list[int] = []
        """The stretch's marks: nodes numbered from `seqs[i]` on have `labels[i]`."""
        self.labels: list[Where] = []
        self.popped = False

    def open(self, start: int, where: Where) -> None:
        """Open a stretch whose outermost call is the next on the stack."""
        self.depth, self.start, self.seqs, self.labels = len(self.stack), start, [start], [where]

    def close(self) -> Span:
        """Close the open stretch: its span."""
        self.depth = -1
        return _new_tuple(Span, (self.start, _get_sequence_nr(), self.seqs, self.labels))


class ModuleCalls:
    """The module stacks of the threads `mode` records (see the module doc). `threads` maps a
    recorded thread's ident to its ThreadCalls; other threads are ignored."""

    def __init__(self, mode: Any) -> None:
        self._mode = mode
        self.threads: dict[int, ThreadCalls] = {}
        # id(root module) -> its entry, see _root_entry; dropped when the module dies.
        self._roots: dict[int, list] = {}
        self._torch_owned: dict[type, bool] = {}
        """Per module class: is its forward torch's own code?"""
        self._methods: dict[Any, bool] = {}
        """Per code object taking `self`: was `self` an nn.Module when last seen?"""

    # -- the mode ------------------------------------------------------------------------

    def _mode_off(self, state: ThreadCalls) -> None:
        """Take the mode off this thread's stack, if it is on top (a mode the script pushed
        above it stays, and so does ours: its ops are then labelled as they are made)."""
        if not state.popped:
            depth = _stack_len()
            if depth and _stack_at(depth - 1) is self._mode:
                _pop_mode()
                state.popped = True

    def _mode_on(self, state: ThreadCalls) -> None:
        if state.popped:
            _push_mode(self._mode)
            state.popped = False

    # -- the calls ----------------------------------------------------------------------

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """`call` (torch's `nn.Module.__call__`) made to keep the recorded threads' module stacks.

        A wrapper of `__call__` instead of global module hooks: any global hook sends every
        module call down torch's hooked path (a closure, the hook dicts walked), which costs more
        than this wrapper does in all; and it sees a BaseException leave the call, where torch's
        always-called hooks see only an Exception."""
        threads, enter, leave = self.threads, self._enter, self._leave

        def __call__(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if _is_compiling():  # first: Dynamo inlines this, and folds it to True
                return call(self, *args, **kwargs)
            state = threads.get(_get_ident())
            if state is None:
                return call(self, *args, **kwargs)
            enter(state, self)
            try:
                output = call(self, *args, **kwargs)
            except BaseException:
                leave(state, self, None)
                raise
            leave(state, self, output)
            return output

        __call__.__doc__ = call.__doc__
        _dynamo_skips(__call__.__code__)
        for method in (ModuleCalls._enter, ModuleCalls._leave):
            _dynamo_skips(method.__code__, calls_too=True)
        return __call__

    def _enter(self, state: ThreadCalls, module: torch.nn.Module) -> None:
        """A module call starts: push it; start or extend the stretch."""
        stack = state.stack
        top = stack[-1] if stack else None
        key = id(module)
        if top is None:
            name, root, prefix, path = self._enter_root(module, sys._getframe(2))
        else:
            _, parent, root, prefix, path, _ = top
            names = root[1]
            if key not in names:
                self._refresh(root, key)
            rel = names[key]
            if rel is not None:
                # rel == "" is the root's own forward running again inside itself.
                name = prefix + rel if rel else parent
                path = name if rel else path
            else:
                # A module not registered under the running root (a plain list, a
                # temporary): name it by class under its caller, its submodules from there.
                name = f"{path}.{type(module).__name__}" if path else type(module).__name__
                root, prefix, path = self._root_entry(module), name + ".", name
        owned = self._torch_owned.get(type(module))
        if owned is None:
            owned = self._torch_owned[type(module)] = _forward_is_torchs(type(module))
        if owned:
            # Its nodes' user line is the one that called it: found once here, not per op.
            where = (top.where[0] if top is not None and top.where is not None else _call_site(sys._getframe(2)), name)
            if state.depth < 0:
                state.open(_get_sequence_nr(), where)
                self._mode_off(state)
            else:
                state.seqs.append(_get_sequence_nr())
                state.labels.append(where)
                # (a stretch is open: a module runs, the stack has a top)
                if top.where is None:  # type: ignore[union-attr]  # user code inside the stretch called torch's module
                    self._mode_off(state)
        else:
            where = None
            if state.depth >= 0:  # a user module inside the stretch: the mode labels its ops
                state.seqs.append(_get_sequence_nr())
                state.labels.append((state.labels[0][0], name))
                self._mode_on(state)
        stack.append(_new_tuple(Call, (key, name, root, prefix, path, where)))

    def _leave(self, state: ThreadCalls, module: torch.nn.Module, output: Any) -> None:
        """A module call ends (`output` None if it raised): pop it; end the stretch or mark its
        caller."""
        stack = state.stack
        if stack and stack[-1].key == id(module):
            stack.pop()
            i = len(stack)
        else:  # pop down to this module's entry (entries above it never returned through us)
            key = id(module)
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].key == key:
                    del stack[i:]
                    break
            else:
                return
        if state.depth < 0:
            return
        if i <= state.depth:
            label_outputs(output, state.close())
            self._mode_on(state)
            return
        top = stack[-1]
        state.seqs.append(_get_sequence_nr())
        if top.where is None:
            state.labels.append((state.labels[0][0], top.name))
            self._mode_on(state)
        else:
            state.labels.append(top.where)
            if not state.popped:
                self._mode_off(state)

    def running(self, ident: int | None = None) -> list[str] | None:
        """Paths of the module calls running on thread `ident` (the calling one by default),
        outermost first; None for a thread not recorded."""
        state = self.threads.get(_get_ident() if ident is None else ident)
        return None if state is None else [call.name for call in state.stack]

    def record_thread(self, ident: int) -> None:
        """Record thread `ident` from now on (its mode is pushed by the caller)."""
        self.threads[ident] = ThreadCalls()

    def reset(self) -> None:
        """Record no thread (the root entries are kept: they die with their modules)."""
        self.threads.clear()  # in place: the wrapper holds this dict

    def forget_thread(self, ident: int) -> None:
        """Stop recording thread `ident` (its mode is popped by its owner)."""
        self.threads.pop(ident, None)

    # -- names ---------------------------------------------------------------------------

    def _enter_root(self, module: torch.nn.Module, frame: Any) -> tuple[str, list, str, str]:
        """(name, root entry, prefix, path) of a module called from `frame` while no module runs:
        relative to the outermost module one of whose methods is running (walking the frames
        once)."""
        while frame is not None and frame.f_code.co_filename == _CALL_FILE:  # torch's _call_impl
            frame = frame.f_back
        owner, outside = self._outermost_owner(module, frame)
        root = self._root_entry(owner)
        if root[2] is None:
            named = root[2] = _variable_name(owner, outside)
            forward_roots[owner] = named
        lead = root[2]
        rel = root[1].get(id(module)) if owner is not module else ""
        name = f"{lead}.{rel}" if rel else lead
        return name, root, lead + ".", name

    def _outermost_owner(self, module: torch.nn.Module, frame: Any) -> tuple[torch.nn.Module, Any]:
        """The outermost module whose method (`training_step`, `compute_loss`) is running
        with `module` among its submodules, else `module`; and the frame that called it.

        Only frames of code whose first argument is `self` are looked into (once per code
        object when `self` is no module): reading a frame's locals on Python < 3.13 leaves a
        snapshot of them on the frame until they are read again or it returns."""
        owner, outside, key = module, frame, id(module)
        methods = self._methods
        while frame is not None:
            code = frame.f_code
            method = methods.get(code)
            if method is None:
                method = methods[code] = bool(code.co_argcount) and code.co_varnames[0] == "self"
            if method:
                this = frame.f_locals.get("self")
                if not isinstance(this, _Module):
                    methods[code] = False
                elif this is not owner and self._contains(this, key):
                    owner, outside = this, frame.f_back
            frame = frame.f_back
        return owner, outside

    def _contains(self, module: torch.nn.Module, key: int) -> bool:
        names = self._root_entry(module)[1]
        if key not in names:
            self._refresh(self._roots[id(module)], key)
        return names[key] is not None

    def _refresh(self, root: list, key: int) -> None:
        """Rebuild a root's name map once (submodules added since); remember a miss as None."""
        module = root[0]()
        names = root[1]
        if module is not None:
            names.update((id(m), n) for n, m in module.named_modules())
        names.setdefault(key, None)

    def _root_entry(self, module: torch.nn.Module) -> list:
        """[weakref, {id(submodule): relative name}, top-level name] of a root, built once."""
        key = id(module)
        entry = self._roots.get(key)
        if entry is not None and entry[0]() is module:
            return entry
        roots = self._roots

        def forget(ref: weakref.ref, key: int = key) -> None:
            if roots.get(key, (None,))[0] is ref:
                del roots[key]

        names: dict[int, str | None] = {id(m): n for n, m in module.named_modules()}
        entry = [weakref.ref(module, forget), names, None]
        roots[key] = entry
        return entry

    @property
    def roots(self) -> dict[int, list]:
        """The root entries kept (a test checks they die with their modules)."""
        return self._roots


def _forward_is_torchs(cls: type) -> bool:
    """Is `cls.forward` torch's (or other non-user) code? Not when it is no Python function."""
    code = getattr(getattr(cls, "forward", None), "__code__", None)
    return code is not None and not _is_user_file(code.co_filename)


def _call_site(frame: Any) -> tuple[str, int] | None:
    """The user line at or outside `frame`, which called a module (torch's `Module` frames
    skipped)."""
    while frame is not None and frame.f_code.co_filename == _CALL_FILE:
        frame = frame.f_back
    return _innermost_user(frame)


def _variable_name(module: torch.nn.Module, frame: Any) -> str:
    """The name the user code at or outside `frame` has for `module`, else its class name
    (once per root)."""
    while frame is not None and not _is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is not None:
        # On Python < 3.13 reading a function frame's f_locals leaves a snapshot of its locals
        # on the frame until it is read again or returns; this runs once per root module.
        for scope in (frame.f_locals, frame.f_globals):
            for var, value in scope.items():
                if value is module and not var.startswith("_"):
                    return var
    return type(module).__name__
