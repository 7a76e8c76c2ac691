"""The variables where backward was called (pudb's locals pane): the tensors and modules in the
calling frame's locals, each with its shape, dtype, `requires_grad` and its nodes on the pass's
graph, as plain data (`CallSiteVariables`).

Read once per pass, at its first pause: a pass in `continue` never pauses and pays nothing. The
frame's locals are read then, so a variable bound after backward was called is not there (the
call has not returned), and one rebound by a hook would show its new value, as pudb shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

from gradtui.engine.capture.graph import Capture
from gradtui.protocol import events as ev

LIMIT = 200
"""At most this many variables are listed (a notebook's globals can hold thousands)."""


def variables(index: int, call_site: str, scope: Mapping[str, Any], cap: Capture) -> ev.CallSiteVariables:
    """The tensors and modules of `scope` (the calling frame's locals) for pass `index`."""
    ids = {node: i for i, node in enumerate(cap.nodes)}
    leaves = {id(getattr(cap.nodes[i], "variable", None)): i for i in cap.accumulators}
    found: list[ev.Variable] = []
    more = 0
    for name, value in list(scope.items()):
        if name.startswith("_") or not isinstance(value, (torch.Tensor, torch.nn.Module)):
            continue
        if len(found) == LIMIT:
            more += 1
            continue
        if isinstance(value, torch.Tensor):
            found.append(_tensor(name, value, ids, leaves))
        else:
            found.append(_module(name, value, leaves))
    return ev.CallSiteVariables(index, call_site, tuple(found), more)


def _tensor(name: str, t: torch.Tensor, ids: dict[Any, int], leaves: dict[int, int]) -> ev.Variable:
    """A tensor: on the graph through its grad_fn (non-leaf) or its accumulator (a leaf)."""
    kind: Literal["parameter", "tensor"] = "parameter" if isinstance(t, torch.nn.Parameter) else "tensor"
    fn = t.grad_fn
    node = ids.get(fn) if fn is not None else leaves.get(id(t))
    return ev.Variable(
        name,
        kind,
        tuple(t.shape),
        str(t.dtype).removeprefix("torch."),
        t.requires_grad,
        () if node is None else (node,),
        t.output_nr if fn is not None else 0,
    )


def _module(name: str, module: torch.nn.Module, leaves: dict[int, int]) -> ev.Variable:
    """A module: on the graph through its parameters' accumulators."""
    params = list(module.parameters())
    nodes = tuple(node for p in params if (node := leaves.get(id(p))) is not None)
    return ev.Variable(
        name,
        "module",
        requires_grad=any(p.requires_grad for p in params),
        nodes=nodes,
        parameters=sum(p.numel() for p in params),
    )
