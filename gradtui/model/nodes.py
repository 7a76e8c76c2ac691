"""Plain-data helpers over a captured graph's node attributes: how nodes are named, and the
order the engine runs them in. No torch here: clients (the UI, `gradtui attach`) use them on
the graph they received over the wire.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import networkx as nx


def engine_order(graph: nx.DiGraph) -> list[int]:
    """Predict the order in which the CPU engine runs the nodes.

    The engine runs a node once all its consumers have run; among ready nodes it takes the
    highest sequence number first (accumulators have the largest), as this simulation does.
    """
    waiting = dict(graph.in_degree())
    ready = [(-graph.nodes[n]["seq"], n) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for nxt in graph.successors(node):
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, (-graph.nodes[nxt]["seq"], nxt))
    return order


def node_tags(data: Mapping[str, Any]) -> list[str]:
    """The names a node goes by: its variable labels, then its parameter name (from its attributes)."""
    return [*data["labels"], *([data["param"]] if data["param"] else [])]


def node_title(graph: nx.DiGraph, node: int) -> str:
    """`#17 AddmmBackward0 (h, fc2)`: how a node is named in messages."""
    data = graph.nodes[node]
    tags = node_tags(data)
    suffix = f" ({', '.join(tags)})" if tags else ""
    return f"#{node} {data['name']}{suffix}"
