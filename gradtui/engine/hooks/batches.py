"""A planned pass's node results as `NodesRan` batches, made when read (gradtui.protocol.events).

While the pass runs, the planned hooks (gradtui.engine.hooks.planned) measure only the nodes they
hook; the statistics of the nodes the plan derives follow from their producers'. A flush
turns what ran since the last one into *steps* of plain data (a hooked node's measured Stats,
and a `Feeds` marker after a hooked node that the plan derives nodes from) and emits them as
one batch. The NodeRan events, with the derived statistics, are made from the steps only when a
listener reads `NodesRan.ran`: a marker is expanded then into its derived nodes' steps (their
producer, shape and the few saved values a small gradient's rearrangement needs, read from the
live nodes). A pass whose listeners take batches and look at no node pays for none of it; at its
end (`settle`, while its nodes live) the markers of the batches someone still holds are expanded,
so those can be read after the pass.

A pass's batches are made in order (each makes the one before it first), since a node in a
later batch may receive from a derived node of an earlier one.

A batch nobody holds any more (its NodesRan was dropped unread) is never made for its own
events, only for what a later batch needs of it: what its nodes sent, for their receivers in
later batches. At the next flush it is compacted to that (`Resent` steps of the hooked nodes a
node not in a compacted batch still receives from, and its `Feeds` markers), so a long pass
whose batches go unread keeps about one step a batch instead of every node's statistics.

What a node sent is kept for the batches to come only while a node that has not been made yet
receives from it (counted per node from the plan's producers, `_waiting`): a listener that
reads every batch and lets its events go (a recording writing them as they arrive) leaves the
pass holding the statistics of the nodes whose receivers have not run, not of every node.
"""

from __future__ import annotations

import functools
import threading
import weakref
from array import array
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from gradtui.engine.hooks.plan import ACCUMULATOR, derive_from
from gradtui.engine.stats.immediate import resolved
from gradtui.protocol import events as ev
from gradtui.protocol.stats import Stats, unreadable_stats


class Hooked(NamedTuple):
    """A hooked node that ran: what it received (None: its producer's output, `source`) and sent."""

    node: int
    grad_outputs: tuple[Stats | None, ...] | None
    source: tuple[int, int] | None
    """(producer, output slot) of a node whose incoming gradient is its producer's output."""
    grad_inputs: tuple[Stats | None, ...]


class Derived(NamedTuple):
    """A node the plan derives: its producer's output slot, its name, the shape it sends on and
    the saved values it needs (gradtui.engine.hooks.plan.shape_and_saved; of a pass-through node, plan.SIGNS,
    1 or 0 per input: has it a receiver); `sends`: its first input has a receiver; `error`: what
    could not be read of it."""

    node: int
    source: tuple[int, int]
    name: str
    shape: tuple[int, ...] | None
    saved: tuple[int, ...]
    sends: bool = True
    error: str | None = None


class Feeds(NamedTuple):
    """The nodes the plan derives from hooked node `node` (and from them) follow here, breadth-first:
    expanded into their `Derived` steps when the batch is made (or at the pass's end)."""

    node: int


class Resent(NamedTuple):
    """A node paused at in its posthook and edited there: what it sends on now, for the nodes
    derived from it in a later batch."""

    node: int
    grad_inputs: tuple[Stats | None, ...]


class PassBatches:
    """The batches of one planned pass (see module doc)."""

    def __init__(
        self,
        index: int,
        full: bool,
        expand: Callable[[int], list[Derived]],
        producer: Sequence[tuple[int, int] | None],
    ) -> None:
        """`expand(node)`: the Derived steps of the nodes fed by `node` (read from the live nodes, so
        only until `settle`); `producer`: the plan's, per node its one producer (None: what
        arrives is measured), which says whose statistics a later batch may still need."""
        self._index = index
        self._full = full
        self._expand: Callable[[int], list[Derived]] | None = expand
        self._sent: dict[int, tuple[Stats | None, ...]] = {}
        """Node id -> what it sent on, as the batches made so far say."""
        self._todo: list[tuple[Sequence[Hooked | Derived | Resent | Feeds], int] | None] = []
        """Per batch of the pass: its steps and the number of its first node, until it is made."""
        self._batches: list[weakref.ref] = []
        """Per batch, the NodesRan (held weakly: one nobody holds is made only for what later
        batches need of it, and its events are not kept)."""
        self._lock = threading.Lock()
        self._producer = producer
        self._dropped: list[int] = []
        """Positions of batches nobody holds any more (appended by their weakref's callback, on
        whichever thread let go of them), to compact at the next flush."""
        self._waiting: array | None = None
        """Per node, how many nodes neither made nor in a compacted batch may still read what it
        sent (made when first needed, once the plan's hooks are on: `_readers`)."""

    def batch(self, steps: list[Hooked | Resent | Feeds], first: int, count: int) -> ev.NodesRan:
        """The NodesRan of `steps` (`count` of them nodes), the first numbered `first` in the pass."""
        position = len(self._todo)
        batch = ev.NodesRan(self._index, count, lambda: self._make_upto(position), lambda: self._expand_batch(position))
        self._todo.append((steps, first))
        dropped = self._dropped
        self._batches.append(weakref.ref(batch, functools.partial(_dropped, dropped, position)))
        if dropped:
            self._compact()
        return batch

    def _compact(self) -> None:
        """Reduce each batch dropped unread and not made yet to what later batches may need of it:
        the `Resent` step of each hooked node some node outside the compacted batches still
        receives from (its producer: what it sent), and every other step but the hooked nodes'
        (Resent, Feeds, Derived). Its own events are never made: nobody can read them."""
        with self._lock:
            todo, dropped = self._todo, self._dropped
            positions = []
            while dropped:
                k = dropped.pop()
                if todo[k] is not None:
                    positions.append(k)
            if not positions:
                return
            waiting = self._readers()
            hooked, producer = Hooked, self._producer
            for k in positions:  # first every receiver in them, then what they keep
                for step in todo[k][0]:  # type: ignore[index]  # not None: checked above
                    # counted only if the plan still names its producer (a plan change sets a
                    # node's to None, never back: one set before the count was not counted)
                    if type(step) is hooked and (source := step[2]) is not None and producer[step[0]] is not None:
                        waiting[source[0]] -= 1
            make = tuple.__new__  # a NamedTuple's own __new__ is a Python function
            for k in positions:
                steps, first = todo[k]  # type: ignore[misc]  # not None: checked above
                kept: list[Hooked | Derived | Resent | Feeds] = []
                for step in steps:
                    if type(step) is not hooked:
                        kept.append(step)
                    elif waiting[step[0]]:
                        kept.append(make(Resent, (step[0], step[3])))
                todo[k] = (kept, first)

    def _expand_batch(self, position: int) -> None:
        """Expand batch `position`'s markers now (they read the live nodes: call it on the pass's
        thread), so that making its events later reads no node (`NodesRan.expand`). The batches
        before it need no expanding for it: a marker's derived nodes read only their producer's
        statistics, which making the earlier batches gives, from plain data once each of those is
        expanded (or made, or compacted) in turn."""
        with self._lock:
            entry = self._todo[position]
            if entry is not None and self._expand is not None:
                self._todo[position] = (self._expanded(entry[0]), entry[1])

    def _make_upto(self, position: int) -> tuple[ev.NodeRan, ...]:
        """The events of batch `position`, making every earlier batch not made yet first (in a loop:
        a long pass has thousands of batches); each batch alive keeps its own."""
        with self._lock:
            todo = self._todo
            for k in range(position + 1):
                entry = todo[k]
                if entry is None:
                    continue
                todo[k] = None
                ran = self._make(*entry)
                batch = self._batches[k]()
                if batch is not None:
                    batch.keep(ran)
            mine = self._batches[position]()
            return mine.ran if mine is not None else ()  # alive: it is the caller

    def settle(self) -> None:
        """The pass is over and its nodes are about to go: expand the markers of every batch not
        made yet that is still held (and of those before it, which it needs), forget the rest."""
        with self._lock:
            todo, batches = self._todo, self._batches
            last = max((k for k in range(len(todo)) if todo[k] is not None and batches[k]() is not None), default=-1)
            for k in range(len(todo)):
                entry = todo[k]
                if entry is not None:
                    todo[k] = (self._expanded(entry[0]), entry[1]) if k <= last else None
            self._expand = None

    def _expanded(
        self, steps: Sequence[Hooked | Derived | Resent | Feeds]
    ) -> Sequence[Hooked | Derived | Resent | Feeds]:
        """`steps` with each Feeds marker replaced by its derived nodes' steps."""
        expand = self._expand
        if expand is None:  # settled: expanded already
            return steps
        out: list[Hooked | Derived | Resent | Feeds] = []
        for step in steps:
            if type(step) is Feeds:
                out += expand(step.node)
            else:
                out.append(step)
        return out

    def _make(self, steps: Sequence[Hooked | Derived | Resent | Feeds], first: int) -> tuple[ev.NodeRan, ...]:
        # Once per node of the pass: kept lean (no call but the derivation and the NodeRan, a Struct);
        # a leaf's accumulator (a quarter of the derived nodes) sends nothing on, as derive_from says.
        # What a node sent is kept only while a node not made yet reads it (`_waiting`): each read
        # counts one off, the last lets it go.
        sent, full, index = self._sent, self._full, self._index
        waiting, planned = self._readers(), self._producer
        # Dispatched on type(step) below, which mypy does not narrow on (isinstance would cost the loop).
        step: Any
        nothing: tuple[Stats | None, ...]
        grad_outputs: tuple[Stats | None, ...] | None
        grad_inputs: tuple[Stats | None, ...]
        get, pop, hooked, derived, nothing = sent.get, sent.pop, Hooked, Derived, ()
        node_ran, derive = ev.NodeRan, derive_from
        out: list[ev.NodeRan] = []
        append = out.append
        order = first
        for step in self._expanded(steps):
            kind = type(step)
            if kind is derived:
                node, (producer, slot), name = step[0], step[1], step[2]
                grad_output = _slot(get(producer, nothing), slot)
                if planned[node] is not None and (left := waiting[producer]):  # counted: one read less
                    waiting[producer] = left - 1
                    if left == 1:
                        pop(producer, None)
                grad_outputs = (grad_output,)
                if name == ACCUMULATOR:
                    grad_inputs = nothing
                elif step[6] is None:  # nothing failed to be read of it
                    try:
                        grad_inputs = derive(name, step[3], step[4], grad_output, full, step[5])
                    except Exception as exc:  # noqa: BLE001 - statistics never fail the script's pass
                        grad_inputs = _not_derived(f"{type(exc).__name__}: {exc}")
                else:
                    grad_inputs = _not_derived(step[6])
            elif kind is hooked:
                node, grad_outputs, source, grad_inputs = step
                grad_inputs = resolved(grad_inputs)
                if grad_outputs is None:
                    producer, slot = source
                    grad_outputs = (_slot(get(producer, nothing), slot),)
                    if planned[node] is not None and (left := waiting[producer]):
                        waiting[producer] = left - 1
                        if left == 1:
                            pop(producer, None)
                else:
                    grad_outputs = resolved(grad_outputs)
            else:
                if waiting[step[0]]:
                    sent[step[0]] = resolved(step[1])
                continue
            if waiting[node]:
                sent[node] = grad_inputs
            append(node_ran(index, node, order, grad_outputs, grad_inputs))
            order += 1
        return tuple(out)

    def _readers(self) -> array:
        """`_waiting`, counted from the plan's producers at its first use. A plan change sets a
        node's producer to None, never back, and only on a node not run yet (no step reads for
        it): a node counted then reads nothing, which keeps its producer's statistics till the
        pass goes, never too few."""
        waiting = self._waiting
        if waiting is None:
            waiting = self._waiting = array("I", bytes(4 * len(self._producer)))
            for source in self._producer:
                if source is not None:
                    waiting[source[0]] += 1
        return waiting


def ran_steps(
    held: list[int],
    ran: list[int],
    hold: int | None,
    counts: dict[int, int],
    producer: list[tuple[int, int] | None],
    arrived: dict[int, tuple[Stats | None, ...]],
    sent: dict[int, tuple[Stats | None, ...]],
    fed: list[int],
) -> tuple[list[Hooked | Resent | Feeds], int, list[int]]:
    """A flush's steps (gradtui.engine.hooks.planned): each node `held` at the last flush resent with what
    it sends now, then each hooked node that `ran`, each followed by a Feeds marker where the plan
    derives nodes from it (`counts`: how many). Takes their statistics out of `arrived` and `sent`
    (`hold`'s sent stays: it is paused in its posthook, and its derived nodes wait for the next
    flush) and appends the nodes whose derived nodes it marks to `fed`. Returns the steps, how many
    nodes they stand for, and the nodes to hold for the next flush."""
    steps: list[Hooked | Resent | Feeds] = []
    count = 0
    for node in held:
        steps.append(Resent(node, sent.pop(node)))
        if (feeds := counts.get(node)) is not None:
            steps.append(Feeds(node))
            fed.append(node)
            count += feeds
    still: list[int] = []
    make = tuple.__new__  # a NamedTuple's own __new__ is a Python function
    for node in ran:  # once per hooked node: kept lean
        arrived_stats = arrived.pop(node, None)
        # what it sent lives on in the step (a held node's until its derived nodes are added)
        sent_stats = sent[node] if node == hold else sent.pop(node)
        source = None if arrived_stats is not None else producer[node]
        steps.append(make(Hooked, (node, arrived_stats, source, sent_stats)))
        count += 1
        if node == hold:
            still.append(node)
        elif (feeds := counts.get(node)) is not None:
            steps.append(make(Feeds, (node,)))
            fed.append(node)
            count += feeds
    return steps, count, still


def _dropped(dropped: list[int], position: int, _: weakref.ref) -> None:
    """A batch's weakref callback: batch `position` is held by nobody any more."""
    dropped.append(position)


def _slot(sent: tuple[Stats | None, ...], slot: int) -> Stats | None:
    return sent[slot] if slot < len(sent) else None


def _not_derived(error: str) -> tuple[Stats]:
    """What a derived node sent on, where its statistics could not be derived (`error`)."""
    return (unreadable_stats((), "", "", f"not derived ({error})"),)
