"""What the hooks of a pass ask of the session (`Owner`): the every-node hooks
(gradtui.engine.hooks.everynode), their bulk reads (gradtui.engine.stats.bulk) and the pass runner
(gradtui.engine.hooks.passes) are handed the session as one, and none of them imports the others for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gradtui.engine.process.quitting import RunQuit
from gradtui.engine.stats.passrecord import PassRecord
from gradtui.engine.stepper import Pause
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import Breakpoint, Breakpoints


class Owner(Protocol):
    """What the hooks of a pass ask of the session."""

    breakpoints: Breakpoints
    follow: Callable[[PassRecord, int], str | None] | None
    run_quit: RunQuit
    """The run's quit (the planned hooks read its `asked`)."""

    def emit(self, event: ev.Event) -> None:
        """Send an event to every listener."""

    def hit(self, bp: Breakpoint, state: PassRecord, node: int) -> str:
        """Count and announce a breakpoint hit; how a pause reason names it."""

    def pause_at(
        self,
        state: PassRecord,
        node: int,
        phase: str,
        reason: str,
        grads: tuple[Any, ...],
        late: bool = False,
        editable: bool | None = None,
    ) -> Pause:
        """Pause until a command resumes."""

    def stop_reason(self, state: PassRecord, node: int) -> Breakpoint | str | None:
        """Must the engine stop before `node` whatever its gradients are?"""

    def quitting_now(self) -> bool:
        """Has quit been asked for?"""

    def wants_flow(self) -> bool:
        """Does a listener read the gradient flow of the hooked pass ending now?"""

    def wants_leaves(self) -> bool:
        """Does a listener read the leaves' gradient statistics of a hooked pass?"""

    def watching(self) -> bool:
        """Can a value breakpoint stop the pass in flight?"""

    def stepping(self) -> bool:
        """Must every node be hooked from now on (stepping, a breakpoint by place)?"""

    @property
    def detached(self) -> bool:
        """Has the session detached (it never pauses again)?"""

    @property
    def light(self) -> bool:
        """Record light statistics (norms only) now?"""

    def can_hand_over(self, state: PassRecord) -> bool:
        """May the rest of this pass run on the hook plan now?"""

    def plan_rest(self, state: PassRecord) -> Any:
        """The planned hooks (gradtui.engine.hooks.planned) that run the rest of the pass."""
