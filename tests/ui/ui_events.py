"""Engine events built by hand, for model tests that need no torch run: graphs of any shape,
with module paths, and the new PassStarted / PassFinished fields."""

from __future__ import annotations

import networkx as nx

from gradtui.protocol import events as ev
from gradtui.protocol.nodes import NodeInfo
from gradtui.protocol.stats import Stats


def stats(norm: float, nonfinite: int = 0) -> Stats:
    """Light stats of a [1] float32 gradient with this norm."""
    return Stats(
        shape=(1,), dtype="float32", device="cpu", norm=norm, min=None, max=None, mean=None, nonfinite=nonfinite
    )


def graph_of(nodes: list[tuple[str, str | None, str | None, tuple[int | None, ...]]]) -> nx.DiGraph:
    """A pass graph from (op name, module, param, next ids) per node id; seq makes id order the engine order."""
    graph = nx.DiGraph()
    for i, (name, module, param, nxt) in enumerate(nodes):
        graph.add_node(
            i,
            info=NodeInfo(
                name,
                "accumulate" if name == "AccumulateGrad" else "op",
                10**6 - i,
                tuple(nxt),
                param=param,
                module=module,
            ),
        )
    for i, (_, _, _, nxt) in enumerate(nodes):
        for slot, target in enumerate(nxt):
            if target is not None:
                graph.add_edge(i, target, slot=slot)
    return graph


MLP = [
    ("MseLossBackward0", None, None, (1,)),  # 0
    ("AddmmBackward0", "fc2", None, (2, 3, 4)),  # 1
    ("AccumulateGrad", None, "fc2.bias", ()),  # 2
    ("TanhBackward0", "act", None, (5,)),  # 3
    ("TBackward0", "fc2", None, (6,)),  # 4
    ("AddmmBackward0", "fc1", None, (7, None, 8)),  # 5
    ("AccumulateGrad", None, "fc2.weight", ()),  # 6
    ("AccumulateGrad", None, "fc1.bias", ()),  # 7
    ("TBackward0", "fc1", None, (9,)),  # 8
    ("AccumulateGrad", None, "fc1.weight", ()),  # 9
]
"""A two-layer MLP's pass: loss <- fc2 <- act <- fc1."""


def started(index: int, nodes=MLP, losses=(1.5,), recorded: bool = True) -> ev.PassStarted:
    """PassStarted of a pass with this graph (an empty one when not recorded)."""
    graph = graph_of(nodes) if recorded else nx.DiGraph()
    return ev.PassStarted(
        index,
        "backward",
        "loss.backward()",
        "train.py:9",
        graph,
        roots=(0,) if recorded else (),
        losses=tuple(losses),
        recorded=recorded,
    )


def ran(
    index: int, node: int, order: int, incoming: float, outgoing: tuple[float | None, ...] = (), nonfinite: int = 0
) -> ev.NodeRan:
    """NodeRan with one incoming gradient of norm `incoming` and these outgoing norms."""
    return ev.NodeRan(
        index, node, order, (stats(incoming, nonfinite),), tuple(None if n is None else stats(n) for n in outgoing)
    )


def flow_row(name: str, grad: float | None, weight: float, nonfinite: int = 0) -> ev.ParamFlow:
    """A ParamFlow row."""
    ratio = None if grad is None else (grad / weight if weight else float("inf"))
    return ev.ParamFlow(name, None, (4,), grad, weight, ratio, nonfinite)


def finished(index: int, total: int = len(MLP), flow: tuple[ev.ParamFlow, ...] = ()) -> ev.PassFinished:
    """PassFinished with this flow."""
    return ev.PassFinished(index, total, total, flow=flow)


def run_mlp_pass(index: int, scale: float = 1.0, flow: tuple[ev.ParamFlow, ...] = ()) -> list[ev.Event]:
    """Every event of one MLP pass; incoming norm of node i is `scale * (i + 1)`."""
    out: list[ev.Event] = [started(index, losses=(scale,))]
    for order, (i, (_, _, _, nxt)) in enumerate(enumerate(MLP), 1):
        out.append(ran(index, i, order, scale * (i + 1), tuple(None if t is None else scale for t in nxt)))
    out.append(finished(index, flow=flow))
    return out
