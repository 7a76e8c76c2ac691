"""A planned pass's compiled posthooks, where they are built (gradtui.engine.hooks.native).

The planned pass (gradtui.engine.hooks.planned) hands its plain posthooks (POST on the plan, on a C++
node) to these: each measures what its node sent on, and what arrived where no single producer
says, as `nowstats.quick_stats` does, and keeps the numbers; Python runs only where the planned
pass's own posthook must decide (`fallback`: a non-finite or unusual gradient, a quit) and at a
progress tick (`tick`). `drain` moves what they kept into the pass's Python state, in the order
the nodes ran: before anything there reads it (a flush, a fallback, the pass's end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gradtui.engine.compat import compiled_autograd_on
from gradtui.engine.hooks import native
from gradtui.engine.stats.immediate import BULK, Listed, Normed
from gradtui.engine.stats.measures import ONE_PASS
from gradtui.engine.stats.summary import CHUNK
from gradtui.protocol.stats import VALUES_LIMIT, full_stats

_KINDS = (Normed, Listed, full_stats, BULK[torch.float32], BULK[torch.float64], "cpu")
"""What the compiled hooks make their statistics as (and the dtype and device names)."""


class CompiledHooks:
    """One pass's compiled posthooks (see module doc)."""

    def __init__(
        self,
        module: Any,
        completed: bytearray,
        quit_flag: bytearray,
        producer: list[Any],
        full: bool,
        interval: float,
        fallback: Callable[[int, tuple[Any, ...], tuple[Any, ...]], Any],
        tick: Callable[[], None],
    ) -> None:
        """`completed`: the pass's record, 1 per node once it ran (the hooks write it); `quit_flag`:
        RunQuit's byte; `producer`: the plan's, per node (None: what arrives is measured)."""
        self._pass = module.make(
            completed, quit_flag, producer, full, (VALUES_LIMIT, CHUNK, ONE_PASS), interval, fallback, tick, _KINDS
        )

    @staticmethod
    def available() -> Any:
        """The compiled module if this process can use it now (gradtui.engine.hooks.native.load; not
        under torch's compiled autograd), else None."""
        return None if compiled_autograd_on() else native.load().module

    def register(self, nodes: list[Any], ids: list[int]) -> list[int]:
        """Hook nodes `ids`; the ids it could not (not C++ nodes, or nodes run on a device's thread),
        for Python hooks."""
        return self._pass.hook(nodes, ids)

    def drain(self, ran: list[int], sent: dict[int, Any], arrived: dict[int, Any]) -> None:
        """Append the nodes that ran since the last drain to `ran`, what they sent to `sent` and
        what arrived (where measured) to `arrived`."""
        nodes, sent_stats, arrived_stats = self._pass.take()
        if nodes:
            ran += nodes
            sent.update(zip(nodes, sent_stats))
            if arrived_stats:
                arrived.update(arrived_stats)

    def visit(self, f: Callable[[int, tuple[Any, ...], tuple[Any, ...]], Any] | None) -> None:
        """From now on `f(node, sent, arrived)` is called with every node the hooks measure (a
        fingerprinted pass sketches its gradients there: the nodes left to Python are the
        Python posthook's to note); None: no more."""
        self._pass.visit(f)

    def python_only(self) -> None:
        """From now on every hook calls the Python posthook (the user steps: gradtui.engine.hooks.planned)."""
        self._pass.python_only()

    def hooked(self) -> int:
        """How many nodes carry one of this pass's hooks."""
        return self._pass.hooked()

    def close(self, nodes: list[Any]) -> None:
        """Inert from now on, and off the nodes of `nodes` (a retained graph's live ones)."""
        self._pass.close(nodes)
