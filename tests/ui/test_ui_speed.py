"""The `s` key to the next node drawn, with a 10,002-node pass loaded (DESIGN.md: ≤ 50 ms median).

Timed from the step action to the first screen refresh after the app handled the next
`Paused` (`call_after_refresh`). The bound asserted here is loose (a loaded CI machine must
not fail it); what cannot regress silently is the work per step: the node list must render
only rows on screen, never the 10,000 rows of the pass.
"""

from __future__ import annotations

import statistics
import sys
import time

import pytest

from gradtui.core import events as ev
from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.node_list import NodeList
from ui_helpers import ui_script, wait_for, wait_paused_at

STEPS = 30


class CountingNodeList(NodeList):
    """Counts the rows it renders."""

    rendered = 0

    def render_line(self, y: int):
        CountingNodeList.rendered += 1
        return super().render_line(y)


class TimedApp(GradtuiApp):
    """Records, for each step, the time from the key's action to the screen drawn."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[float] = []
        self._t0: float | None = None

    def action_step(self) -> None:
        self._t0 = time.perf_counter()
        super().action_step()

    def on_bridge_engine_event(self, message) -> None:
        super().on_bridge_engine_event(message)
        if isinstance(message.event, ev.Paused) and self._t0 is not None:
            t0, self._t0 = self._t0, None
            self.call_after_refresh(lambda: self.times.append(time.perf_counter() - t0))


@pytest.mark.asyncio
async def test_step_to_drawn_on_a_10000_node_pass(monkeypatch):
    monkeypatch.setattr("gradtui.ui.app.NodeList", CountingNodeList)
    app = TimedApp(ui_script("long_chain.py"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0, timeout=60)
        assert app.state.view.total == 10_002
        await pilot.pause(0.2)
        CountingNodeList.rendered = 0
        for _ in range(STEPS):
            count = len(app.times)
            await pilot.press("s")
            await wait_for(pilot, lambda: len(app.times) > count, what="the next pause drawn")
        rows = app.query_one(NodeList).size.height
        median = statistics.median(app.times) * 1000
        print(f"\nstep to drawn, 10,002 nodes: median {median:.1f} ms, max {max(app.times) * 1000:.1f} ms; "
              f"{CountingNodeList.rendered / STEPS:.1f} rows rendered per step ({rows} on screen)",
              file=sys.__stdout__)
        # two rows per step, plus a screenful each time the cursor leaves the screen
        assert CountingNodeList.rendered <= STEPS * 2 + rows * (1 + 2 * STEPS // rows), \
            "a step redrew more than the rows that changed"
        assert median < 100, f"median step-to-drawn {median:.1f} ms"

        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=60, what="the end")
        await pilot.press("end")
        await wait_for(pilot, lambda: app.query_one(NodeList).cursor == 10_001)
