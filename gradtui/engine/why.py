"""`why NAME`: is NAME's tensor on this pass's graph, and if not, why its `.grad` stays None.

A pure function of the name, the calling frame's scope, and the pass's graph and nodes, so it
can be tested without a session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import torch

from gradtui.engine import edits
from gradtui.protocol.breakpoints import as_label
from gradtui.protocol.nodes import node_info, node_title


def explain(
    name: str,
    scope: Mapping[str, Any],
    graph: nx.DiGraph,
    nodes: Sequence[Any],
    function: str = "<module>",
    roots: Mapping[torch.nn.Module, str] | None = None,
) -> str:
    """The answer to `why NAME` for a pass whose backward was called in `function`, with `scope`
    its variables (globals and locals), `graph`/`nodes` the pass's captured graph, `roots` the
    modules whose forward ran (with the names leading their module paths).

    NAME is a Python expression of the scope's variables, or a name gradtui prints and `break`
    takes: a node's label or a parameter's name in its model (`0.weight` is no Python; nor is
    `transformer.h.1.mlp.c_fc.weight`, and it may name a model no variable holds)."""
    try:
        value = edits.safe_eval(name, dict(scope))  # what it raises, BaseException too, is an answer
    except edits.ExpressionError as exc:
        label = as_label(name)
        value = None if label is None else _labelled(label, scope, graph, nodes, roots or {})
        if value is None:
            if issubclass(exc.error, SyntaxError):
                return (
                    f"{name} is no variable where backward was called ({function}), no leaf of this "
                    "pass and no parameter of a model in scope or whose forward ran"
                )
            if issubclass(exc.error, NameError):
                return f"{name} is not defined where backward was called ({function})"
            return f"{name} failed: {exc.detail}"
    if not isinstance(value, torch.Tensor):
        kind = type(value).__name__
        return f"{name} is {'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}, not a tensor"
    off = f"{name} is not on this pass's graph, so {name}.grad stays None"
    if value.grad_fn is None:
        if not value.requires_grad:
            made = (
                "it is an inference tensor, made under torch.inference_mode()"
                if value.is_inference()
                else f"it was created without requires_grad=True (then use requires_grad=True or "
                f"{name}.requires_grad_()), or cut from the graph: made by .detach() or .data, "
                "or computed under torch.no_grad()"
            )
            return f"{off}: it does not require grad, so autograd never tracked it; {made}"
        for i, node in enumerate(nodes):
            if node_info(graph, i).kind == "accumulate" and node.variable is value:
                return f"yes: {name} is a leaf on this graph, accumulated at {node_title(graph, i)}"
        return (
            f"{off}: it requires grad but this pass's output does not depend on it: "
            "it was not used, or only through .detach(), .data, .item() or under no_grad"
        )
    for i, node in enumerate(nodes):
        if node is value.grad_fn:
            made = f"yes: {name} is made by {node_title(graph, i)}; its gradient arrives at #{i}"
            if value.retains_grad:
                return f"{made}, and {name}.retain_grad() was called, so {name}.grad will hold it"
            return (
                f"{made}; it is not a leaf, so {name}.grad stays None unless {name}.retain_grad() "
                "is called (or break on it here and print it)"
            )
    return f"{off}: it was made by {value.grad_fn.name()}, but the output of this backward call does not depend on it"


def _labelled(
    label: str, scope: Mapping[str, Any], graph: nx.DiGraph, nodes: Sequence[Any], roots: Mapping[torch.nn.Module, str]
) -> Any:
    """The tensor that `label` names as gradtui shows it (None: none): a leaf of this pass whose
    label or parameter name it is, else the parameter of that name in a model in `scope` or in
    `roots` (its name within the model, or led by the model's variable: `model.0.weight`)."""
    for i, node in enumerate(nodes):
        info = node_info(graph, i)
        if info.kind == "accumulate" and (info.param == label or label in info.labels):
            return node.variable
    models = [(var, value) for var, value in scope.items() if isinstance(value, torch.nn.Module)]
    models += [(lead, module) for module, lead in list(roots.items())]
    for lead, model in models:
        for pname, param in model.named_parameters():
            if label in (pname, f"{lead}.{pname}"):
                return param
    return None
