"""The work of a step with a 10,002-node pass loaded: the node list renders only the rows
that changed (and a screenful when the cursor leaves the screen), never the whole pass.

The time from the `s` key to the next node drawn (DESIGN.md: <= 50 ms median) is measured
by `scripts/bench.py`, not asserted here: these machines are too noisy for timing bounds.
"""

from __future__ import annotations

import pytest

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


@pytest.mark.asyncio
async def test_a_step_renders_only_changed_rows_of_a_10000_node_pass(monkeypatch):
    monkeypatch.setattr("gradtui.ui.app.NodeList", CountingNodeList)
    app = GradtuiApp(ui_script("long_chain.py"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0, timeout=60)
        assert app.state.view.total == 10_002
        await pilot.pause(0.2)
        CountingNodeList.rendered = 0
        for step in range(1, STEPS + 1):
            await pilot.press("s")
            await wait_paused_at(pilot, step, timeout=10)
            await pilot.pause()
        rows = app.query_one(NodeList).size.height
        # two rows per step, plus a screenful each time the cursor leaves the screen
        assert CountingNodeList.rendered <= STEPS * 2 + rows * (1 + 2 * STEPS // rows), \
            "a step redrew more than the rows that changed"

        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.status == "finished", timeout=60, what="the end")
        await pilot.press("end")
        await wait_for(pilot, lambda: app.query_one(NodeList).cursor == 10_001)
