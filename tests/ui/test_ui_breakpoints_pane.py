"""The breakpoints pane, B (issue 22, 16): each breakpoint with its hit count and last hit;
enter jumps there, space turns it off and on, delete removes it."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from tests.helpers import script
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.breakpoints import BreakpointsScreen
from tests.ui.ui_helpers import SIZE, selected, wait_for, wait_paused_at


async def _open(pilot) -> DataTable:
    await pilot.press("B")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, BreakpointsScreen), what="the breakpoints pane")
    await pilot.pause()
    return pilot.app.screen.query_one(DataTable)


def _cells(table: DataTable, row: int) -> list[str]:
    return [str(cell) for cell in table.get_row_at(row)]


@pytest.mark.asyncio
async def test_the_breakpoints_pane_counts_hits_jumps_to_the_last_and_turns_one_off_and_on():
    app = GradtuiApp(script("loop.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("colon", *"break MulBackward0", "enter")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="the breakpoint")
        for index in (0, 1):
            await pilot.press("c")
            await wait_for(pilot, lambda: app.state.paused is not None and app.state.paused.pass_index == index
                           and app.state.paused.node == 1, what=f"the hit in pass {index}")
        await wait_paused_at(pilot, 1)
        await pilot.press("home")  # the selection away from the hit
        await wait_for(pilot, lambda: selected(app) == 0, what="the first row")

        table = await _open(pilot)
        assert table.row_count == 1
        assert _cells(table, 0) == ["1", "MulBackward0", "2", "pass 1 · #1", "armed"]
        await pilot.press("enter")  # jump to its last hit
        await wait_for(pilot, lambda: selected(app) == 1, what="the jump to #1")

        table = await _open(pilot)
        await pilot.press("space")  # off: deleted in the target, kept here
        await wait_for(pilot, lambda: not app.state.breakpoints, what="the breakpoint off")
        table = await _open(pilot)
        assert _cells(table, 0) == ["-", "MulBackward0", "0", "-", "off"]
        await pilot.press("space")  # on again: a new breakpoint of the same spec
        await wait_for(pilot, lambda: [b.spec for b in app.state.breakpoints] == ["MulBackward0"], what="on again")
        table = await _open(pilot)
        assert _cells(table, 0)[0] == "2" and table.row_count == 1
        await pilot.press("x")
        await wait_for(pilot, lambda: not app.state.breakpoints, what="the delete")
        table = await _open(pilot)
        assert table.row_count == 0
        await pilot.press("escape")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end: nothing stops it now")
