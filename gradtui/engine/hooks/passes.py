"""Running one pass's engine call under its hooks, and reporting its end: a part of the session.

Three ways, chosen by the session as a pass starts: every node hooked (stepping, breakpoints by
place, accelerators: gradtui.engine.hooks.everynode), on the hook plan (a CPU pass in `continue`:
gradtui.engine.hooks.planned), or unhooked (nothing can stop in it and no one wants its statistics:
only its gradient flow). Each removes what it put on the graph when the call returns or raises,
names the node a failure happened at, and emits `PassFinished`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradtui.engine.hooks.derived import ready_node
from gradtui.engine.hooks.everynode import EveryNodeHooks
from gradtui.engine.hooks.plancache import PlanCache
from gradtui.engine.hooks.planned import PlannedPass
from gradtui.engine.intercept import GradtuiQuit, Interceptor
from gradtui.engine.stats.passrecord import FlowRecorder, PassRecord, UnhookedFlow
from gradtui.engine.stepper import Owner
from gradtui.protocol import events as ev
from gradtui.protocol.lazygraph import LazyGraph


class PassRunner:
    """Runs passes for the session (see module doc)."""

    def __init__(self, owner: Owner, intercept: Interceptor, recorder: FlowRecorder) -> None:
        self._owner = owner
        self._intercept = intercept
        self._recorder = recorder
        self._plans = PlanCache()

    def every_node(self, state: PassRecord, run: Callable[[], Any]) -> Any:
        """A pass with a prehook and a posthook on every node (handed to the plan if it continues)."""
        hooks = EveryNodeHooks(self._owner, state)

        def close() -> None:
            hooks.close()
            if state.planned is not None:  # handed over after a pause: the plan's hooks ran the rest
                state.planned.close()

        def settle(error: BaseException | None) -> None:
            if state.planned is not None:
                state.planned.finish(error)
                state.planned = None
            # What the window still holds; a value breakpoint it shows can still pause here
            # (the engine has returned) unless the pass failed.
            hooks.read(None, None, pause=error is None)

        return self._hooked(state, run, hooks.register, close, settle, place_failure=True)

    def planned(self, state: PassRecord, run: Callable[[], Any]) -> Any:
        """A planned pass: the plan's hooks only (see gradtui.engine.hooks.planned)."""
        cap = state.capture
        hooks = PlannedPass(
            self._owner,
            state,
            self._plans.plan(cap.walk, cap.nodes, cap.roots, self._intercept.hooks_seen),
            full=not self._owner.light,
        )
        del cap
        return self._hooked(state, run, hooks.register, hooks.close, hooks.finish)

    def _hooked(
        self,
        state: PassRecord,
        run: Callable[[], Any],
        register: Callable[[], None],
        close: Callable[[], None],
        settle: Callable[[BaseException | None], None],
        place_failure: bool = False,
    ) -> Any:
        """The real backward between `register` and `close` of a pass's hooks; then `settle` (its
        last reads, given how it ended), the fingerprints and the PassFinished, however it ended.
        `place_failure`: a failure no node's hook saw is put on the node the engine ran next."""
        self._intercept.begin(state)
        error: BaseException | None = None
        try:
            register()  # inside the try: an interruption half-way (Ctrl-C, a quit) still unhooks
            return run()
        except BaseException as exc:
            error = exc
            raise
        finally:
            close()
            self._intercept.end()
            try:
                settle(error)
            finally:
                if place_failure and error is not None and state.running is None:
                    state.running = ready_node(state.capture.infos, state.completed)
                if state.prints is not None:  # the pass's fingerprints, before its end (a recording's)
                    self._owner.emit(state.prints.event(state.index))
                    if (differences := state.prints.differences(state.index)) is not None:
                        self._owner.emit(differences)  # against a reference: the UI's difference column
                    state.prints = None
                owner = self._owner
                finished = self._recorder.finished(
                    state, state.call, error_text(error), owner.light, owner.wants_flow(), owner.wants_leaves()
                )
                error = None  # this frame is on error's traceback: holding error would make a cycle
                self.finish(finished)

    def unhooked(self, started: ev.PassStarted, nodes: list[Any], run: Callable[[], Any], flow: bool) -> Any:
        """A pass nothing can stop in: the real backward, then only the gradient flow (`flow`: if
        anyone may ask for it)."""
        self._owner.emit(started)
        unhooked = UnhookedFlow(self._recorder, nodes, started.call, flow)
        del nodes
        error: BaseException | None = None
        try:
            return self._intercept.untouched(run, unhooked.on_nested if unhooked.wanted else None)
        except BaseException as exc:
            error = exc
            raise
        finally:
            finished = ev.PassFinished(started.pass_index, 0, unhooked.total, error_text(error), flow=unhooked.rows())
            error = None
            self.finish(finished)

    def finish(self, event: ev.PassFinished) -> None:
        """Keep the pass's flow for the `flow` command and announce its end."""
        self._recorder.keep(event)
        self._owner.emit(event)


def unhooked_start(
    index: int, call: str, call_text: str, call_site: str, losses: tuple[float | None, ...]
) -> ev.PassStarted:
    """The PassStarted of a pass that runs unhooked: no graph (an empty one, networkx's once read)."""
    return ev.PassStarted(
        index,
        call,  # type: ignore[arg-type]
        call_text,
        call_site,
        LazyGraph(list, None, 0),
        (),
        losses,
        recorded=False,
    )


def error_text(error: BaseException | None) -> str | None:
    """How a pass's PassFinished names the exception that ended it (None: it did not fail)."""
    if error is None:
        return None
    return "quit" if isinstance(error, GradtuiQuit) else f"{type(error).__name__}: {error}"
