"""The labels provenance puts on autograd nodes, in each node's own `metadata` dict (so they
live and die with the graph), and reading them: the nodes a labelled node stands for are
labelled from it when it is first read, parents first, as a capture reads a graph.

Two kinds of node stand for others. A node a call returned while the mode was on carries the
call's first sequence number (`FIRST_KEY`): the nodes below it numbered from there on are the
call's interior (`F.linear` makes `TBackward0` under `AddmmBackward0`). A node a stretch of
torch's module code returned carries the stretch's `Span` (`SPAN_KEY`, see modulecalls.py): the
nodes below it numbered inside the span get the labels of the innermost module call that was
running when they were made.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from gradtui.engine.compat import sequence_nr

SOURCE_KEY = "gradtui.source"
MODULE_KEY = "gradtui.module"
FIRST_KEY = "gradtui.first"  # on a call's returned node: the call's first sequence number
SPAN_KEY = "gradtui.span"  # on a stretch's output nodes: the stretch's Span

Where = tuple[tuple[str, int] | None, str | None]
"""(source, module path) labels of a node."""


class Span(NamedTuple):
    """A stretch of torch's module code: nodes numbered in [start, end) were made in it, with
    `labels[i]` from `seqs[i]` on."""

    start: int
    end: int
    seqs: list[int]
    labels: list[Where]

    def labels_of(self, seq: int) -> Where:
        """The labels of the node numbered `seq` (inside the span)."""
        return self.labels[bisect_right(self.seqs, seq) - 1]


def _tensors(output: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors of a module's output: a tensor, or inside tuples, lists and dicts (an
    LSTM's `(out, (h, c))`, a ModelOutput), three levels deep."""
    if isinstance(output, torch.Tensor):
        yield output
    elif depth < 3 and isinstance(output, (tuple, list)):
        for item in output:
            yield from _tensors(item, depth + 1)
    elif depth < 3 and isinstance(output, dict):
        for item in output.values():
            yield from _tensors(item, depth + 1)


def label_outputs(output: Any, span: Span) -> None:
    """Label the stretch's output nodes now, and hand them the span for the nodes below."""
    if span.end == span.start:
        return
    for t in (output,) if isinstance(output, torch.Tensor) else _tensors(output):
        fn = t.grad_fn
        if fn is None:
            continue
        seq = sequence_nr(fn)
        if span.start <= seq < span.end:  # not an input passed through
            md: dict[str, Any] = fn.metadata  # type: ignore[assignment]  # torch declares Node.metadata a method; it is a property
            if SOURCE_KEY not in md:
                md[SOURCE_KEY], md[MODULE_KEY] = span.labels_of(seq)
            md[SPAN_KEY] = span


def recorded(node: Any, key: str) -> Any:
    """What was recorded under `key` on `node` (labelling the nodes below it first, once)."""
    md = getattr(node, "metadata", None)
    if md is None:
        return None
    if FIRST_KEY in md:
        label_interior(node, md)
    if SPAN_KEY in md:
        label_span(node, md)
    return md.get(key)


def label_interior(node: Any, md: dict) -> None:
    """Give the unlabelled nodes `node`'s call made below it `node`'s labels (once)."""
    first = md.pop(FIRST_KEY)
    where = md.get(SOURCE_KEY), md.get(MODULE_KEY)
    end = sequence_nr(node)
    todo = [node]
    while todo:
        for fn, _ in todo.pop().next_functions:
            # Leaves (AccumulateGrad) are numbered UINT64_MAX, so `< end` skips them.
            if fn is not None and first <= sequence_nr(fn) < end:
                child = fn.metadata
                if SOURCE_KEY not in child:
                    child[SOURCE_KEY], child[MODULE_KEY] = where
                    todo.append(fn)


def label_span(node: Any, md: dict) -> None:
    """Give the unlabelled nodes of `node`'s span below it their labels (once). A node the mode
    labelled inside the span (a user module's op) labels its call's interior first."""
    span = md.pop(SPAN_KEY)
    start, end = span.start, span.end
    seen = {node}
    todo = [node]
    while todo:
        for fn, _ in todo.pop().next_functions:
            # Leaves (AccumulateGrad) are numbered UINT64_MAX, so `< end` skips them.
            if fn is None or fn in seen:
                continue
            seq = sequence_nr(fn)
            if start <= seq < end:
                seen.add(fn)
                child = fn.metadata
                child.pop(SPAN_KEY, None)  # another output of the span: walked from here
                if FIRST_KEY in child:
                    label_interior(fn, child)
                if SOURCE_KEY not in child:
                    child[SOURCE_KEY], child[MODULE_KEY] = span.labels_of(seq)
                todo.append(fn)
