"""Every private (or recent) torch symbol gradtui uses, in one place, each with a fallback.

torch may rename or drop its private functions in any release. Other modules import them from
here, never from torch directly, so a torch that lacks one degrades one feature (named beside
each fallback) instead of failing at import. The floor declared in pyproject (torch 2.2) is the
first release with `torch.autograd.graph.GradientEdge` / `get_gradient_edge` (pytorch#110867);
everything else here has a fallback.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.overrides as _overrides

# (node, output_nr): a root or input torch accepts in place of a tensor (torch >= 2.2). Imported, not
# assigned from torch.autograd.graph: mypy reads such an alias of a NamedTuple as a parameterized generic.
from torch.autograd.graph import GradientEdge  # noqa: F401 - re-exported: gradtui imports it from here

_C: Any = torch._C

current_graph_task_id: Callable[[], int] = getattr(_C, "_current_graph_task_id", lambda: 0)
"""The id of the autograd engine call running on this thread, -1 outside one. Fallback: always 0,
so every hook call counts as the pass's own (a backward nested in a pass is hooked too)."""

_compiler = getattr(torch, "compiler", None)
is_compiling: Callable[[], bool] = cast(
    Callable[[], bool],
    getattr(_compiler, "is_compiling", None) or getattr(getattr(torch, "_dynamo", None), "is_compiling", lambda: False),
)
"""Is torch.compile tracing this call? Fallback: never (compiled code would be stepped eagerly)."""


_eval_frame = getattr(getattr(_C, "_dynamo", None), "eval_frame", None)


def dynamo_skips(code: Any, calls_too: bool = False) -> None:
    """Have Dynamo never compile a frame running `code` (it still traces into it when inlining),
    nor, with `calls_too`, the frames it calls: Dynamo compiles the first frame it may below a
    compiled module's `__call__`, and torch's own `Module` frames are skipped by file, gradtui's
    are not. So `torch.compile(model)` compiles the model's forward, not gradtui's wrapper of
    `__call__` around it, nor the bookkeeping the wrapper calls eagerly. Set in torch's C module,
    without importing Dynamo (seconds). Fallback: nothing (Dynamo compiles gradtui's frames,
    one code object for every module, and warns when it recompiles them too often)."""
    strategy = getattr(_eval_frame, "_FrameExecStrategy", None)
    action = getattr(_eval_frame, "_FrameAction", None)
    setter = getattr(_eval_frame, "set_code_exec_strategy", None)
    if strategy is not None and action is not None and setter is not None:
        setter(code, strategy(action.SKIP, action.SKIP if calls_too else action.DEFAULT))


def compiled_autograd_on() -> bool:
    """Is torch's compiled autograd on (`torch._dynamo.compiled_autograd.enable`)? It traces the
    hooks of a backward, and gradtui's compiled posthooks have no `compiled_args` to be traced
    by: they stay off then. Read without importing dynamo (seconds): never imported, never on.
    Fallback: off."""
    module = sys.modules.get("torch._dynamo.compiled_autograd")
    return bool(getattr(module, "compiled_autograd_enabled", False)) if module is not None else False


_functorch = getattr(_C, "_functorch", None)
functorch_level: Callable[[], int | None] = getattr(_functorch, "maybe_current_level", lambda: None)
"""The torch.func transform level in effect (None outside grad/vmap). Fallback: None."""
is_legacy_batched: Callable[[torch.Tensor], bool] = getattr(_functorch, "is_legacy_batchedtensor", lambda t: False)
"""Is `t` a batched tensor of `jacobian(vectorize=True)`? Fallback: no."""

_autograd_c = getattr(_C, "_autograd", None)
get_sequence_nr: Callable[[], int] = getattr(_autograd_c, "_get_sequence_nr", lambda: 0)
"""Autograd's next sequence number on this thread. Fallback: 0, so provenance finds only the node
a call returns, not the ones torch made inside it (those keep no source)."""


def _stack_fallback() -> list[Any]:
    length = getattr(_C, "_len_torch_function_stack", lambda: 0)()
    return [_C._get_function_stack_at(i) for i in range(length)]


push_mode: Callable[[Any], None] = cast(
    Callable[[Any], None], getattr(_overrides, "_push_mode", None) or getattr(_C, "_push_on_torch_function_stack", None)
)
"""Push a TorchFunctionMode on this thread's mode stack."""
pop_mode: Callable[[], Any] = cast(
    Callable[[], Any], getattr(_overrides, "_pop_mode", None) or getattr(_C, "_pop_torch_function_stack", None)
)
"""Pop the innermost TorchFunctionMode of this thread's mode stack and return it."""
get_function_mode_stack: Callable[[], list[Any]] = getattr(
    _overrides, "_get_current_function_mode_stack", _stack_fallback
)
"""This thread's TorchFunctionMode stack, outermost first."""

get_function_mode_stack_len: Callable[[], int] = getattr(
    _C, "_len_torch_function_stack", lambda: len(get_function_mode_stack())
)
"""How many TorchFunctionModes this thread's mode stack holds (without building a list)."""
get_function_mode_stack_at: Callable[[int], Any] = getattr(
    _C, "_get_function_stack_at", lambda i: get_function_mode_stack()[i]
)
"""The mode at index `i` of this thread's mode stack (0 is the outermost)."""


get_gradient_edge: Callable[[torch.Tensor], Any] = torch.autograd.graph.get_gradient_edge
"""The gradient edge of a tensor: its grad_fn, or for a leaf its AccumulateGrad node."""


is_zerotensor: Callable[[torch.Tensor], bool] = getattr(torch.Tensor, "_is_zerotensor", lambda t: False)
"""Is `t` a ZeroTensor (all zeros, no storage)? The method itself (hot paths call it per node).
Fallback: no (a torch without the method has no ZeroTensors)."""

set_grad_enabled: Callable[[bool], Any] = getattr(_C, "_set_grad_enabled", torch.set_grad_enabled)
"""Switch grad mode on this thread, without the context manager's cost. Fallback: the public one."""

sequence_nr: Callable[[Any], int] = operator.methodcaller("_sequence_nr")
"""An autograd node's sequence number (its creation order on its thread; `seq` in a captured graph)."""


SYMBOLS = (
    "current_graph_task_id",
    "dynamo_skips",
    "compiled_autograd_on",
    "is_compiling",
    "functorch_level",
    "is_legacy_batched",
    "get_sequence_nr",
    "push_mode",
    "pop_mode",
    "get_function_mode_stack",
    "get_function_mode_stack_len",
    "get_function_mode_stack_at",
    "GradientEdge",
    "get_gradient_edge",
    "is_zerotensor",
    "set_grad_enabled",
    "sequence_nr",
)
"""What this module exposes (a test checks each is present and callable on this torch)."""


def saved_argument(value: object) -> object:
    """A node's saved non-tensor argument as the script gave it. torch's getters read an int64
    saved argument back as unsigned (`EmbeddingBackward0._saved_padding_idx` is
    18446744073709551615 for the default -1), so an int at or above 2**63, and each such int in
    a tuple or list, is turned back into its signed value; anything else is returned as it is."""
    match value:
        case bool():
            return value
        case int() if 1 << 63 <= value < 1 << 64:
            return value - (1 << 64)
        case tuple() | list():
            return type(value)(saved_argument(v) for v in value)
    return value
