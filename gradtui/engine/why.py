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
from gradtui.protocol.nodes import node_info, node_title


def explain(name: str, scope: Mapping[str, Any], graph: nx.DiGraph, nodes: Sequence[Any],
            function: str = "<module>") -> str:
    """The answer to `why NAME` for a pass whose backward was called in `function`, with `scope`
    its variables (globals and locals), `graph`/`nodes` the pass's captured graph."""
    try:
        value = edits.safe_eval(name, dict(scope))  # what it raises, BaseException too, is an answer
    except edits.ExpressionError as exc:
        if issubclass(exc.error, NameError):
            return f"{name} is not defined where backward was called ({function})"
        return f"{name} failed: {exc.detail}"
    if not isinstance(value, torch.Tensor):
        kind = type(value).__name__
        return f"{name} is {'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}, not a tensor"
    off = f"{name} is not on this pass's graph, so {name}.grad stays None"
    if value.grad_fn is None:
        if not value.requires_grad:
            made = ("it is an inference tensor, made under torch.inference_mode()" if value.is_inference() else
                    f"it was created without requires_grad=True (then use requires_grad=True or "
                    f"{name}.requires_grad_()), or cut from the graph: made by .detach() or .data, "
                    "or computed under torch.no_grad()")
            return f"{off}: it does not require grad, so autograd never tracked it; {made}"
        for i, node in enumerate(nodes):
            if node_info(graph, i).kind == "accumulate" and node.variable is value:
                return f"yes: {name} is a leaf on this graph, accumulated at {node_title(graph, i)}"
        return (f"{off}: it requires grad but this pass's output does not depend on it: "
                "it was not used, or only through .detach(), .data, .item() or under no_grad")
    for i, node in enumerate(nodes):
        if node is value.grad_fn:
            made = f"yes: {name} is made by {node_title(graph, i)}; its gradient arrives at #{i}"
            if value.retains_grad:
                return f"{made}, and {name}.retain_grad() was called, so {name}.grad will hold it"
            return (f"{made}; it is not a leaf, so {name}.grad stays None unless {name}.retain_grad() "
                    "is called (or break on it here and print it)")
    return (f"{off}: it was made by {value.grad_fn.name()}, "
            "but the output of this backward call does not depend on it")
