"""The passes the UI keeps, a part of the UI state (`UIState.kept`): the full views of the last
passes (bounded, see history), one summary line per pass, which pass is live and which one the
user browses, and the flow of the last pass that ended. No Textual here.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import NamedTuple

from gradtui.protocol import events as ev
from gradtui.ui.history import KEEP_NODES, KEEP_SUMMARIES, KEEP_VIEWS, PassSummary
from gradtui.ui.passview import PassView


class FlowSnapshot(NamedTuple):
    """The gradient flow of one ended pass: what `w` shows while the next pass runs."""

    index: int  # type: ignore[assignment]  # a NamedTuple field named as tuple's method index
    flow: tuple[ev.ParamFlow, ...]
    measured: bool = True
    """False: the pass's leaves had gradients but nothing showed its flow as it ended, so the
    agent did not compute it (an empty flow otherwise: no leaf received a gradient)."""


def _measured(flow: tuple[ev.ParamFlow, ...], leaf_grads: object) -> bool:
    """Was a pass's flow computed (see FlowSnapshot.measured)?"""
    return bool(flow) or not leaf_grads


class PassesState:
    """The kept passes (see module doc). `live` is the latest pass, which events update;
    `browsed` an ended pass the user shows instead (None: the live one is on screen)."""

    def __init__(self) -> None:
        self.live: PassView | None = None
        """The latest pass (the one the engine runs or last ran)."""
        self.browsed: PassView | None = None
        """An earlier pass on screen instead of `live`, or None."""
        self.views: deque[PassView] = deque()
        """Full views of the last passes, oldest first, `live` last (bounded, see history)."""
        self.summaries: deque[PassSummary] = deque(maxlen=KEEP_SUMMARIES)
        """One line per pass that started, oldest first (bounded)."""
        self.last_flow: FlowSnapshot | None = None
        """The flow of the last pass that ended (kept whatever views are dropped)."""
        self.undrawn: int | None = None
        """The latest pass, when the agent sent it without its graph (`PassStarted.described`):
        the screen shows the last pass drawn, `live`, and says so. None once a described one starts."""

    @property
    def view(self) -> PassView | None:
        """The pass on screen: the browsed one, else the live one."""
        return self.browsed if self.browsed is not None else self.live

    def pass_view(self, index: int) -> PassView | None:
        """The kept view of pass `index` (the latest kept, if it was shown twice), or None."""
        return next((v for v in reversed(self.views) if v.index == index), None)

    # ---- what the events change ----------------------------------------------------------

    def started(self, event: ev.PassStarted, again: bool, reference: str | None) -> PassView:
        """A pass began (`again`: one shown before, a recording's `pass N`, which replaces its old
        view): its view is live and kept, with `reference` for its difference column."""
        if again:
            self.views = deque(v for v in self.views if v.index != event.pass_index)
            self.summaries = deque((s for s in self.summaries if s.index != event.pass_index), maxlen=KEEP_SUMMARIES)
            if self.browsed is not None and self.browsed.index == event.pass_index:
                self.browsed = None
        self.undrawn = None
        self.live = PassView.from_event(event)
        if event.recorded:
            self.live.reference = reference  # the difference column stays, `-` until the pass ends
        self._keep(self.live)
        self.summaries.append(self.live.summary())
        if len(self.summaries) > 1 and self.summaries[-2].index > event.pass_index:
            self.summaries = deque(sorted(self.summaries, key=lambda s: s.index), maxlen=KEEP_SUMMARIES)
        return self.live

    def undescribed(self, event: ev.PassStarted) -> None:
        """A pass began that the agent sent without its graph (it ran while this UI drew an earlier
        one): its summary line only; the pass on screen stays the last one drawn."""
        self.undrawn = event.pass_index
        nodes = event.nodes if event.nodes is not None else 0
        self.summaries.append(
            PassSummary(
                event.pass_index, event.call_text or f"{event.call}()", tuple(event.losses), True, nodes, drawn=False
            )
        )

    def undescribed_ended(self, event: ev.PassFinished) -> None:
        """A pass sent without its graph ended: its summary line says how (its flow is the last
        one only if it came: a client that shows every pass's flow is sent it)."""
        for i, summary in enumerate(self.summaries):
            if summary.index == event.pass_index and not summary.drawn:
                self.summaries[i] = dataclasses.replace(summary, finished=True, error=event.error)
        if event.flow or event.leaf_grads:
            self.flow_ended(event)

    def _keep(self, view: PassView) -> None:
        """Keep `view`; drop views past the bounds, those without per-node data first (a
        training loop's one hooked pass must not be pushed out by the unhooked ones after it)."""
        self.views.append(view)
        while len(self.views) > 2 and (len(self.views) > KEEP_VIEWS or sum(v.total for v in self.views) > KEEP_NODES):
            victim = next(
                (v for v in self.views if not v.recorded and v is not self.live and v is not self.browsed), None
            )
            if victim is None:
                victim = next(v for v in self.views if v is not self.browsed)
            self.views.remove(victim)

    def compared(self, view: PassView) -> None:
        """`view` got its differences from the reference: its summary line says so."""
        for i, summary in enumerate(self.summaries):
            if summary.index == view.index:
                self.summaries[i] = view.summary()

    def flow_ended(self, event: ev.PassFinished) -> None:
        """A pass ended: its flow is the last one, unless a later pass's already is."""
        if self.last_flow is None or event.pass_index >= self.last_flow.index:
            self.last_flow = FlowSnapshot(event.pass_index, tuple(event.flow), _measured(event.flow, event.leaf_grads))

    def live_ended(self) -> None:
        """The live pass ended: the last summary line, if it is the live pass's, says how."""
        view = self.live
        if view is not None and self.summaries and self.summaries[-1].index == view.index:
            self.summaries[-1] = view.summary()

    # ---- browsing ------------------------------------------------------------------------

    def browse(self, delta: int) -> bool:
        """Show the kept pass `delta` steps older (-1) or newer (+1); False if there is none."""
        view = self.view
        if view is None or not self.views:
            return False
        # by index, not as kept: a recording's `pass N` keeps an earlier pass last
        kept = sorted(self.views, key=lambda v: v.index)
        at = next((i for i, v in enumerate(kept) if v is view), len(kept) - 1 if delta < 0 else None)
        if at is None:  # a browsed pass that has since been dropped: newer goes back to live
            target = self.live
        else:
            i = at + delta
            if not 0 <= i < len(kept):
                return False
            target = kept[i]
        self.browsed = None if target is self.live else target
        return True

    def browse_to(self, index: int) -> bool:
        """Show the kept pass of that index (the live one: back to live); False if not kept."""
        target = next((v for v in self.views if v.index == index), None)
        if target is None:
            return False
        self.browsed = None if target is self.live else target
        return True

    def flow_to_show(self) -> tuple[FlowSnapshot | None, str]:
        """The flow `w` shows, and a note: the shown pass's once it has ended, else the last
        ended pass's (right after `f`, or mid-pass, the question is about that one)."""
        view = self.view
        if view is not None and view.finished:
            return FlowSnapshot(view.index, view.flow, _measured(view.flow, view.leaf_grads)), ""
        last = self.last_flow
        if last is None:
            which = f"pass {view.index}" if view is not None else "the first pass"
            return None, f"{which} has not ended yet: the flow is measured when backward returns"
        running = f" · pass {view.index} has not ended yet" if view is not None else ""
        return last, f"the last pass that ended{running}"

    @property
    def last_recorded(self) -> PassView | None:
        """The latest kept pass with per-node data (the one worth browsing at the end)."""
        return next((v for v in reversed(self.views) if v.recorded and v.total), None)
