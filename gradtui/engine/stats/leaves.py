"""A hooked pass's end: its leaves' gradient statistics and the gradient flow's norms, read together.

The leaves' `.grad`s go into one `StatsWindow`; the gradient flow (gradtui.engine.stats.flow) asks for
the norms of every weight and every gradient, and gets them from the same fused
`torch._foreach_norm` and the same host read as the statistics: a big gradient's norm is taken
once, for its Stats and its flow row (the very number a separate fused call gives: the same
reduction of the same tensor), and the weights' norms come with it. A small gradient's Stats
norm is taken from its listed values, so its flow row keeps torch's norm, read beside.

A pass whose flow is read but whose leaves' statistics nobody reads (a recording, a report) takes
the flow's norms alone (`flow_norms`): the same read of the same tensors, with no Stats per leaf.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gradtui.engine.stats.flow import both_norms
from gradtui.engine.stats.window import Read, StatsWindow, read_by_norm, resolve
from gradtui.protocol.stats import Stats


class _Held(NamedTuple):
    """A big gradient the window holds: its entry there (its norm's place in a read), and it."""

    entry: int
    grad: torch.Tensor


class LeafRead:
    """The leaves `(accumulator id, leaf)` of a pass, their `.grad`s held for one read: `norms` is
    `gradient_flow`'s norms (that read), `stats` the leaves' gradient statistics (read then if
    the flow did not)."""

    def __init__(self, leaves: list[tuple[int, torch.Tensor]], light: bool) -> None:
        self._leaves = leaves
        self._light = light
        self._window = window = StatsWindow()
        self._held: dict[int, _Held] = {}
        """id(gradient) -> it and its entry, for those the window holds as big (their norm is read)."""
        handles: list[int | Stats | None] = []
        self._handles = handles
        for _, leaf in leaves:
            grad = leaf.grad
            handle = window.add(grad, light)
            handles.append(handle)
            if type(handle) is int and grad is not None and read_by_norm(grad.numel()):
                self._held[id(grad)] = _Held(handle, grad)
        self._read: Read | None = None

    def norms(self, weights: list[torch.Tensor], grads: list[torch.Tensor]) -> list[float]:
        """The L2 norms of `weights`, then of `grads`, in the leaves' read: a gradient the window
        holds as big is not normed a second time."""
        held = self._held
        entries = [h.entry if (h := held.get(id(g))) is not None and h.grad is g else None for g in grads]
        others = weights + [g for g, e in zip(grads, entries) if e is None]
        try:
            read = self._read = self._window.read_with(others)
        except (RuntimeError, TypeError):  # mixed devices or dtypes one fused call refuses
            self._read = self._separately()
            return both_norms(weights, grads)
        rest = iter(read.others[len(weights) :])
        return read.others[: len(weights)] + [next(rest) if e is None else read.norms[e] for e in entries]

    def stats(self) -> tuple[tuple[int, Stats | None], ...]:
        """(accumulator id, Stats of the leaf's `.grad`) for each leaf."""
        read = self._read
        if read is None:
            read = self._read = self._window.read_with([])
        stats = resolve(self._handles, read.stats)
        return tuple((i, s) for (i, _), s in zip(self._leaves, stats))

    def _separately(self) -> Read:
        """The leaves' statistics read on their own (after a fused read failed)."""
        window = StatsWindow()
        self._handles = [window.add(leaf.grad, self._light) for _, leaf in self._leaves]
        return window.read_with([])


def flow_norms(weights: list[torch.Tensor], grads: list[torch.Tensor]) -> list[float]:
    """`gradient_flow`'s norms where no listener reads the leaves' statistics: the L2 norms of
    `weights`, then of `grads`, in one fused call and host read, as `LeafRead.norms` reads them
    (the same numbers), but no gradient's values are listed and no Stats is made."""
    try:
        return StatsWindow().read_with(weights + grads).others
    except (RuntimeError, TypeError):  # mixed devices or dtypes one fused call refuses
        return both_norms(weights, grads)
