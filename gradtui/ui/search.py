"""Finding nodes: the command palette's node Provider (ctrl+p, and `/` with this provider
alone), scored by Textual's fuzzy matcher over each node's op, labels, module and source line.

`NodeIndex` is the searchable text of a pass's nodes, built once per pass (the source line
is read from linecache then, not per keystroke). The app keeps the ranked matches of the
last search a user picked from, so `N` steps to the next of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content

from gradtui.protocol.nodes import node_info
from gradtui.ui import fmt
from gradtui.ui.state import PassView

DISCOVER_SHOWN = 12
"""Nodes offered before anything is typed (the palette's discovery list)."""


SOURCE_WEIGHT = 0.8
"""A match in the module or source line counts this much of one in the op or labels, so
`prediction` finds the node labelled so before the nodes whose source line mentions it."""


def node_head(view: PassView, node: int) -> str:
    """`#3 TanhBackward0 h`: the node's id, op and labels."""
    data = node_info(view.graph, node)
    tags = " ".join(data.tags)
    return f"#{node} {data.name}" + (f" {tags}" if tags else "")


def node_text(view: PassView, node: int) -> str:
    """`#3 TanhBackward0 h · fc1 · demo.py:24 h = torch.tanh(self.fc1(x))`: what a query matches."""
    data = node_info(view.graph, node)
    parts = [node_head(view, node)]
    if data.module:
        parts.append(data.module)
    if data.source:
        code = [text.strip() for _, text, here in fmt.source_lines(data.path, data.line, 0) if here]
        parts.append(data.source + (" " + code[0] if code and code[0] else ""))
    return " · ".join(parts)


@dataclass
class NodeIndex:
    """The search text of every node of one pass, in engine order."""

    view: PassView
    texts: list[tuple[int, str]] = field(default_factory=list)
    """(node, its whole search text) in engine order."""
    heads: list[str] = field(default_factory=list)
    """Each node's id, op and labels (the part that scores fully)."""

    def __post_init__(self) -> None:
        self.texts = [(node, node_text(self.view, node)) for node in self.view.order]
        self.heads = [node_head(self.view, node) for node in self.view.order]


class FindHost(Protocol):
    """What the provider needs of the app's navigator (gradtui.ui.navigation)."""

    def node_index(self) -> NodeIndex | None: ...
    def found(self, query: str, ranked: list[int], node: int) -> None: ...


def ranked_matches(index: NodeIndex, score: Callable[[str], float]) -> list[tuple[float, int, str]]:
    """(score, node, text) of every node that matches, best first, engine order among equals."""
    found = [
        (s, row, node, text)
        for row, ((node, text), head) in enumerate(zip(index.texts, index.heads))
        if (s := max(score(head), SOURCE_WEIGHT * score(text))) > 0
    ]
    found.sort(key=lambda item: (-item[0], item[1]))
    return [(s, node, text) for s, _, node, text in found]


class NodeProvider(Provider):
    """Palette hits for the nodes of the pass on screen; choosing one selects it."""

    async def search(self, query: str) -> Hits:
        """Every node whose text fuzzily matches `query`."""
        host: FindHost = self.app.nav  # type: ignore[attr-defined]  # GradtuiApp.nav
        index = host.node_index()
        if index is None or not query.strip():
            return
        matcher = self.matcher(query)
        ranked = ranked_matches(index, matcher.match)
        order = [node for _, node, _ in ranked]
        for score, node, text in ranked:
            yield Hit(
                score,
                matcher.highlight(text),
                functools.partial(host.found, query, order, node),
                text=text,
                help="select this node",
            )

    async def discover(self) -> Hits:
        """Before typing: the first nodes of the pass (the paused one first)."""
        host: FindHost = self.app.nav  # type: ignore[attr-defined]  # GradtuiApp.nav
        index = host.node_index()
        if index is None:
            return
        order = [node for node, _ in index.texts]
        for node, text in index.texts[:DISCOVER_SHOWN]:
            yield DiscoveryHit(
                Content(text), functools.partial(host.found, "", order, node), text=text, help="select this node"
            )
