"""Forward-time provenance: which user line and which nn.Module made each autograd node.

While installed, a `TorchFunctionMode` sees every Python-level torch call of the thread that
installed it. After a call that created autograd nodes it labels the nodes of the tensors
the call returned with the user's `(filename, lineno)` and the qualified name of the
innermost running `nn.Module`, in the node's own `metadata` dict, so the labels live and die
with the graph. Nothing here holds a node, a tensor or a module.

Custom `autograd.Function`s do not go through `__torch_function__`: while installed,
`Function.apply` is wrapped to label their nodes the same way (and so the node of a
reentrant `torch.utils.checkpoint`, which is one).

Nodes a call creates without returning them (`F.linear` makes `TBackward0` under
`AddmmBackward0`; `F.multi_head_attention_forward` makes dozens) are labelled later, when
`source_of` or `module_of` first reads a node the call returned: autograd numbers nodes per
thread, so the call's other nodes are the ones below it numbered from the call's first
number on. Walking them during the forward would cost about as much as the rest of the
recording, and a pass usually reads few graphs of the many a training loop makes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from typing import Any

import torch
from torch.nn.modules import module as _nn_module
from torch.overrides import TorchFunctionMode

from gradtui.engine.compat import get_sequence_nr as _get_sequence_nr
from gradtui.engine.compat import is_compiling as _is_compiling
from gradtui.engine.compat import push_mode as _push_mode

from gradtui.engine import blame, modestack
from gradtui.model import userfiles

SOURCE_KEY = "gradtui.source"
MODULE_KEY = "gradtui.module"
FIRST_KEY = "gradtui.first"  # on a call's returned node: the call's first sequence number

forward_roots: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
"""Modules whose forward has run at the top of a recorded module stack (a model, a GAN's `netG`
and `netD`; not a template layer that was only copied): the roots that name things."""

_Tensor = torch.Tensor
_get_ident = threading.get_ident


# Which code is the user's (names kept short here: the forward's hot path reads them).
_is_user_file_cached = userfiles.is_user_file
_started_by_user = userfiles.started_by_user
_innermost_user = userfiles.innermost_user
_SKIP_CODE_NAMES = userfiles.SKIP_CODE_NAMES
user_frame = userfiles.user_frame


def source_of(node: Any) -> tuple[str, int] | None:
    """The `(filename, lineno)` of the user's call that created `node`, if it was recorded."""
    return _recorded(node, SOURCE_KEY)


def module_of(node: Any) -> str | None:
    """The qualified name of the nn.Module whose forward created `node`, if it was recorded,
    led by its root module's variable name (`model.fc1`; `model` for the root's own ops)."""
    return _recorded(node, MODULE_KEY)


def _recorded(node: Any, key: str) -> Any:
    """What was recorded under `key` on `node` (labelling its call's interior nodes first)."""
    md = getattr(node, "metadata", None)
    if md is None:
        return None
    if FIRST_KEY in md:
        _label_interior(node, md)
    return md.get(key)


def _label_interior(node: Any, md: dict) -> None:
    """Give the unlabelled nodes `node`'s call made below it `node`'s labels (once)."""
    first = md.pop(FIRST_KEY)
    where = md.get(SOURCE_KEY), md.get(MODULE_KEY)
    end = node._sequence_nr()
    todo = [node]
    while todo:
        for fn, _ in todo.pop().next_functions:
            # Leaves (AccumulateGrad) are numbered UINT64_MAX, so `< end` skips them.
            if fn is not None and first <= fn._sequence_nr() < end:
                child = fn.metadata
                if SOURCE_KEY not in child:
                    child[SOURCE_KEY], child[MODULE_KEY] = where
                    todo.append(fn)


class Provenance(TorchFunctionMode):
    """Records source line and module path on grad_fns created while installed.

    Only the installing thread and the threads started after install are recorded: torch
    keeps the function-mode stack per thread (a new thread starts with an empty stack), so
    `Thread.start` is wrapped to push the mode in each new thread; the module hooks, which
    are process-wide, ignore other threads. So install() and uninstall() must run on the
    thread that runs the forward pass. Nothing is recorded while grad mode is off, and
    a user's own TorchFunctionMode or `torch.no_grad()` inside the script keeps working.
    """

    def __init__(self) -> None:
        super().__init__()
        self._thread: int | None = None
        self._handles: list[Any] = []
        self._mode_pushed = False
        self._apply: Any = None
        """`Function.apply` as it was before install (a classmethod object)."""
        # Per recorded thread (the installing one and those it starts), one entry per
        # running module forward: (id(module), its name, its root's entry, prefix for names
        # from that root's map, path for unregistered modules it calls, the user line of its
        # ops if its forward is torch's own code, else None).
        self._stacks: dict[int, list[tuple[int, str, list, str, str, tuple[str, int] | None]]] = {}
        self._has_hook: Any = None
        """`torch.nn.modules.module._has_any_global_hook` as it was before install."""
        self._has_other_hook: Any = None
        self._start: Any = None
        """`threading.Thread.start` as it was before install."""
        # id(root module) -> its entry, see _root_entry; dropped when the module dies.
        self._roots: dict[int, list] = {}

    # -- install / uninstall -------------------------------------------------------------

    def install(self) -> None:
        """Start recording on the calling thread; a second call does nothing."""
        if self._thread is not None:
            return
        self._thread = _get_ident()
        self._stacks = {self._thread: []}
        try:
            self._handles.append(_nn_module.register_module_forward_pre_hook(self._pre_hook))
            self._handles.append(
                _nn_module.register_module_forward_hook(self._post_hook, always_call=True)
            )
            _push_mode(self)
            self._mode_pushed = True
            self._wrap_function_apply()
            self._wrap_thread_start()
            self._hide_global_hooks()
            blame.install(frozenset({Provenance.__torch_function__.__code__, self._wrapped_apply.__func__.__code__}),
                          __file__, globals())
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self) -> None:
        """Stop recording and remove the hooks; safe to call twice or after a failed install."""
        blame.uninstall()
        if self._has_hook is not None:
            if _nn_module._has_any_global_hook is self._has_other_hook:
                _nn_module._has_any_global_hook = self._has_hook
            self._has_hook = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._apply is not None:
            if torch.autograd.Function.__dict__.get("apply") is self._wrapped_apply:
                torch.autograd.Function.apply = self._apply
            self._apply = None
        if self._start is not None:
            if threading.Thread.start is self._wrapped_start:
                threading.Thread.start = self._start
            self._start = None
        if self._mode_pushed and self._thread == _get_ident():
            self._pop_self()
            self._mode_pushed = False
        # From another thread the mode cannot be popped; _thread = None makes it inert.
        self._thread = None
        self._stacks = {}

    def _hide_global_hooks(self) -> None:
        """`torch.compile(model)` warns when any global module hook exists (it would fire an extra
        time for the OptimizedModule); a plain run has none, so ours are not counted."""
        original = getattr(_nn_module, "_has_any_global_hook", None)
        if original is None:
            return
        ours = frozenset(h.id for h in self._handles)
        m = _nn_module

        def has_other_hook() -> bool:
            return bool(m._global_backward_pre_hooks or m._global_backward_hooks or m._global_forward_hooks_with_kwargs
                        or any(k not in ours for k in m._global_forward_pre_hooks)
                        or any(k not in ours for k in m._global_forward_hooks)
                        or any(k not in ours for k in m._global_forward_hooks_always_called))

        self._has_hook, self._has_other_hook = original, has_other_hook
        _nn_module._has_any_global_hook = has_other_hook

    def _pop_self(self) -> bool:
        """Take this mode off the calling thread's mode stack (`modestack.remove`)."""
        return modestack.remove(self)

    def suspended(self) -> contextlib.AbstractContextManager[None]:
        """Record nothing on this thread meanwhile, at no cost per op: the mode is off the stack
        (`modestack.suspended`). For a backward pass: its hooks' reductions (gradtui's and the
        user's) make no node worth a source, yet each would go through `__torch_function__`."""
        return modestack.suspended(self)

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
                mode._stacks[ident] = []
                _push_mode(mode)
                try:
                    return run()
                finally:
                    mode._pop_self()
                    mode._stacks.pop(ident, None)

            thread.run = recorded_run  # type: ignore[method-assign]
            return original(thread)

        start.__doc__ = original.__doc__
        self._start = original
        self._wrapped_start = start
        threading.Thread.start = start  # type: ignore[method-assign]

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
            if _is_compiling() or _get_ident() not in mode._stacks:
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
        torch.autograd.Function.apply = self._wrapped_apply

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
                    md = fn.metadata
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
        stack = self._stacks.get(_get_ident())
        top = stack[-1] if stack else None
        code = caller.f_code
        if _is_user_file_cached(code.co_filename) and code.co_name not in _SKIP_CODE_NAMES:
            source = (code.co_filename, caller.f_lineno)
        elif top is not None and top[5] is not None:
            source = top[5]  # inside a torch module's forward: the line that called it
        else:
            source = _innermost_user(caller)
        return source, None if top is None else top[1]

    # -- module stack --------------------------------------------------------------------

    def _pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        if _is_compiling():  # first: Dynamo traces module hooks, and folds this to True
            return
        stack = self._stacks.get(_get_ident())
        if stack is None:
            return
        key = id(module)
        top = stack[-1] if stack else None
        if top is None:
            root = self._root_entry(module)
            if root[2] is None:
                root[2] = _variable_name(module)
                forward_roots.add(module)
            # Names are led by the root's variable (`netG.0`); a capture drops the lead when only
            # one root module is in scope, so one model's paths read `encoder.layers.3`.
            name = root[2]
            prefix, path = name + ".", name
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
        # While a forward written in torch (nn.Linear, nn.TransformerEncoderLayer, ...) runs,
        # its ops' user line is the one that called it: found once here, not per op. An op
        # its forward makes through user code called directly (an activation function, a
        # hook) still gets that code's own line, from _where's look at the op's caller.
        forward = getattr(type(module).forward, "__code__", None)
        if forward is None or _is_user_file_cached(forward.co_filename):
            fixed = None
        elif top is not None and top[5] is not None:
            fixed = top[5]
        else:
            fixed = _innermost_user(sys._getframe(1))
        stack.append((key, name, root, prefix, path, fixed))

    def _post_hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if _is_compiling():  # first: Dynamo traces module hooks, and folds this to True
            return
        stack = self._stacks.get(_get_ident())
        if stack is None:
            return
        key = id(module)
        # Pop down to this module's entry (entries above it missed their post hook).
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == key:
                del stack[i:]
                return

    @staticmethod
    def _refresh(root: list, key: int) -> None:
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


def _variable_name(module: torch.nn.Module) -> str:
    """The name the calling user code has for `module`, else its class name (once per root)."""
    frame = sys._getframe(1)
    while frame is not None and not _is_user_file_cached(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is not None:
        # On Python < 3.13 reading a function frame's f_locals leaves a snapshot of its locals
        # on the frame until it is read again or returns; this runs once per root module.
        for scope in (frame.f_locals, frame.f_globals):
            for var, value in scope.items():
                if value is module and not var.startswith("_"):
                    return var
    return type(module).__name__
