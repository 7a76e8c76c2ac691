"""A session's listeners and what each wants of a pass: the one place events leave the engine.

Each listener is called on the emitting thread (the script's, in a hook). What it says it wants
shapes a pass: whether the pass's graph is described as it starts (else a lazy capture reads a
node's metadata only when a pause or a reader needs it), whether it takes a planned pass's
`NodesRan` batches as they are, and whether anyone reads a pass's leaf gradients and gradient
flow (a client that shows the flow only in a view says so while it does).

On the main thread of a run an entry point owns, the fan-out runs with signals deferred until it
ends (gradtui.engine.process.deferral): a SIGINT / SIGTERM landing in a listener's write is acted on
right after it, not inside it. A listener that may hold the script there (`holds=True`) is not.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from gradtui.engine.process.deferral import DEFERRAL
from gradtui.protocol import events as ev

Listener = Callable[[ev.Event], None]


class Listeners:
    """The listeners of one session, in the order they were added (see module doc)."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._graph_wanted: list[bool | Callable[[], bool]] = []
        """Per listener: does it read a pass's graph (names, sources, saved values) beyond what a
        pause shows?"""
        self._batches: list[bool] = []
        """Per listener: does it take NodesRan batches as they are?"""
        self._flow_wanted: list[bool | Callable[[], bool]] = []
        """Per listener: does it read a hooked pass's gradient flow (a callable: asked at the pass's end)?"""
        self._returned: list[Callable[[int], None]] = []
        """The listeners' `returned` callables (see `add`)."""
        self._leaves_wanted: list[bool | Callable[[], bool]] = []
        """Per listener: does it read a hooked pass's leaf gradients (where it reads its flow; a
        callable: asked at the pass's end)?"""

    def add(
        self,
        listener: Listener,
        graph: bool | Callable[[], bool] = True,
        batches: bool = False,
        flow: bool | Callable[[], bool] = True,
        holds: bool = False,
        leaves: bool | Callable[[], bool] = True,
        returned: Callable[[int], None] | None = None,
    ) -> None:
        """Also send every event to `listener`.

        `batches=True`: the listener takes a planned pass's `NodesRan` batches as they are (and
        reads `.ran` only if it wants per-node statistics); otherwise it gets each batch's NodeRan
        events one by one, as from the every-node hooks. `flow=False`: it reads no pass's gradient
        flow or leaf gradients (`PassFinished.flow`, `.leaf_grads`); a hooked pass no listener wants
        them of skips them (the norms of every parameter and gradient, a row per leaf). `flow` a
        callable: the listener reads every hooked pass's leaf gradients, and its flow when the
        callable, asked as the pass ends, says so (a client that shows the flow only in a view:
        a pass nothing shows computes no weight norms and no rows). `leaves=False`: it reads a
        pass's flow (as `flow` says) but never its leaves' gradient statistics (a recording, a
        report: they write the flow, and the leaves' gradients are their accumulators' rows), so
        a pass only such listeners end computes the flow's norms alone, not a Stats per leaf.
        `leaves` a callable: asked as a hooked pass ends (a client that shows a pass's leaves only
        when it shows the pass: the agent's server, gradtui.agent.server).

        `graph=False` (or a callable saying so at a pass's start): the listener reads a pass's
        graph only at its pauses (or only its size), so a pass in `continue` may leave its nodes'
        metadata (labels, sources, modules, saved values) unread unless it pauses: a lazy
        capture. Any listener that may read the graph later (a report, a recording, a client over
        the wire) leaves the default, and every pass is described as it starts.

        `returned`: called with a planned pass's index once its engine call has returned and its
        last batch is emitted, before its batches are settled (made, for those still held): no
        pause can come in it any more, so a listener that holds a pass's batches only in case it
        pauses lets them go, and they are never made (the agent's server, for a pass its client
        was sent undescribed).

        `holds=True`: the listener may hold the script for long all through its call, so signals
        act at once while it runs, as in the script's own code. (A torchrun rank's job tap is not
        one: it takes the hub's and the server's locks, which a fatal signal's last words need, so
        it lifts the deferral itself around its long waits only, `DEFERRAL.lifted`.)"""
        if holds:
            listener = functools.partial(DEFERRAL.lifted, listener)
        self._listeners.append(listener)
        self._graph_wanted.append(graph)
        self._batches.append(batches)
        self._flow_wanted.append(flow)
        self._leaves_wanted.append(leaves)
        if returned is not None:
            self._returned.append(returned)

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener (a NodesRan batch as its NodeRan events to those that
        take no batches), with signals deferred on an armed main thread (see module doc)."""
        deferral = DEFERRAL
        if deferral.armed and threading.get_ident() == deferral.main:
            deferral.inside(self._fan_out, event)
        else:
            self._fan_out(event)

    def _fan_out(self, event: ev.Event) -> None:
        if type(event) is ev.NodesRan:
            for listener, batches in zip(self._listeners, self._batches):
                if batches:
                    listener(event)
                else:
                    for one in event.ran:
                        listener(one)
            return
        for listener in self._listeners:
            listener(event)

    def returned(self, index: int) -> None:
        """Planned pass `index` has returned (see `add`'s `returned`)."""
        for call in self._returned:
            call(index)

    def graph_needed(self) -> bool:
        """Does a listener want the graph of the pass starting now described at once?"""
        return any(want() if callable(want) else want for want in self._graph_wanted)

    def wants_flow(self) -> bool:
        """Does a listener read the gradient flow of the hooked pass ending now?"""
        return any(want() if callable(want) else want for want in self._flow_wanted)

    def wants_leaves(self) -> bool:
        """Does a listener read the leaves' gradient statistics of the hooked pass ending now (every
        one but those added with `flow=False` or `leaves=False`, or whose `leaves` callable says no)?"""
        return any(
            flow is not False and (leaves() if callable(leaves) else leaves)
            for flow, leaves in zip(self._flow_wanted, self._leaves_wanted)
        )

    def names_leaves(self) -> bool:
        """Must a lazy pass name its leaves as it starts: does a listener always read a hooked pass's
        leaves by name at its end (its flow: those added with `flow=True`)? One whose `flow` is a
        callable reads them only for some passes (the agent's server: a pass its client shows the
        flow of, which then names them at their first read, from the frame's scopes kept till the
        pass ends; a pass it shows whole is described as it starts, names and all)."""
        return any(want is True for want in self._flow_wanted)
