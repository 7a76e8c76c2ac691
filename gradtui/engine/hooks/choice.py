"""Which hooks a pass of the session gets: none (it runs unhooked at plain speed, only its loss
and flow recorded), the hook plan (gradtui.engine.hooks.plan, .planned: posthooks only where values
can change), or a prehook and a posthook on every node (gradtui.engine.hooks.everynode).

Decided when a pass starts, and again when a stepping pass resumes (`can_hand_over`), from what
could stop in it and what is asked of it: the mode, the breakpoints, a loss breakpoint pending
at its roots, distributed follow mode, fingerprints, an explicit read rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gradtui.engine.stats.passrecord import PassRecord
from gradtui.engine.stepper import Mode, Stepper
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints
from gradtui.protocol.events import accumulates


class Chooser(Protocol):
    """What the choice reads of the session (gradtui.engine.session.Session, which imports this module)."""

    @property
    def detached(self) -> bool:
        """Has the session detached (it never pauses again)?"""

    against: Any
    """The reference recording of `--against`, or None."""
    follow: Callable[[PassRecord, int], str | None] | None
    """A torchrun rank's follow hook, or None."""


class HookChoice:
    """The session's choice of hooks per pass (see module doc). `session`'s public state is read
    as it is at each choice: `detached`, `against`, `follow`."""

    def __init__(
        self, session: Chooser, stepper: Stepper, breakpoints: Breakpoints, *, hook_all: bool, check_every: int | None
    ) -> None:
        self._session = session
        self._stepper = stepper
        self._breakpoints = breakpoints
        self._hook_all = hook_all
        self._check_every = check_every

    def hooked(self, index: int, pending: Breakpoint | None) -> bool:
        """Must pass `index` be hooked? Only if something could stop in it or a listener wants
        per-node statistics."""
        if self._hook_all or pending is not None:
            return True
        if self._session.detached:
            return False
        return self._stepper.mode is not Mode.CONTINUE or self._breakpoints.could_stop(index)

    def planned(self, pending: Breakpoint | None, on_cpu: bool) -> bool:
        """Can this pass run on the hook plan (gradtui.engine.hooks.planned)? A CPU pass in `continue` or
        `finish` that records statistics or watches for `nan` only: nothing stops by place, no
        loss breakpoint is pending, no distributed follow mode, no explicit read rate. Fingerprints
        are sketched in the hooked nodes' posthooks, the derived nodes' follow from their
        producer's (gradtui.engine.fingerprints.values); a `differs>R` breakpoint hooks every node."""
        session = self._session
        if self._check_every is not None or session.follow is not None or pending is not None:
            return False
        if session.against is not None and self._breakpoints.differs():
            return False  # each node is compared with the reference after it ran
        if self._stepper.stepping or self._breakpoints.places:
            return False
        if not self._breakpoints.nan_only():
            return False
        return on_cpu

    def can_hand_over(self, state: PassRecord) -> bool:
        """May an every-node pass paused at a node (it started stepping) run the rest on a hook plan,
        now that it resumed? As `planned` says of a pass starting now."""
        return accumulates(state.call) and state.planned is None and self.planned(state.pending, state.on_cpu)
