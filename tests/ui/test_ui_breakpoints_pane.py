"""The breakpoints pane, B: each breakpoint with its hit count and last hit;
enter jumps there, space turns it off and on, delete removes it."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.breakpoints import BreakpointsScreen
from tests.helpers import SIZE, script, selected, wait_for, wait_paused_at


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
            await wait_for(
                pilot,
                lambda: (
                    app.state.paused is not None and app.state.paused.pass_index == index and app.state.paused.node == 1
                ),
                what=f"the hit in pass {index}",
            )
        await wait_paused_at(pilot, 1)
        await pilot.press("home")  # the selection away from the hit
        await wait_for(pilot, lambda: selected(app) == 0, what="the first row")

        table = await _open(pilot)
        assert table.row_count == 1
        assert _cells(table, 0) == ["1", "MulBackward0", "2", "pass 1 · #1", "armed"]
        await pilot.press("enter")  # jump to its last hit
        await wait_for(pilot, lambda: selected(app) == 1, what="the jump to #1")

        table = await _open(pilot)
        pane = app.screen
        await pilot.press("space")  # off: deleted in the target, kept here; the pane stays open
        await wait_for(pilot, lambda: not app.state.breakpoints, what="the breakpoint off")
        await wait_for(pilot, lambda: _cells(table, 0) == ["-", "MulBackward0", "0", "-", "off"], what="redrawn")
        assert app.screen is pane
        await pilot.press("space")  # on again: a new breakpoint of the same spec
        await wait_for(pilot, lambda: [b.spec.text for b in app.state.breakpoints] == ["MulBackward0"], what="on again")
        await wait_for(pilot, lambda: _cells(table, 0)[0] == "2", what="its new number drawn")
        assert app.screen is pane and table.row_count == 1
        await pilot.press("x")
        await wait_for(pilot, lambda: not app.state.breakpoints, what="the delete")
        await wait_for(pilot, lambda: table.row_count == 0, what="the row gone")
        assert app.screen is pane
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is not pane, what="escape closes the pane")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the end: nothing stops it now")


@pytest.mark.asyncio
async def test_the_breakpoints_pane_stays_open_its_cursor_on_the_row_acted_on():
    """Toggling or deleting keeps the pane open, redrawn, the cursor on the same row (a row
    turned off stays where it was) or, after a delete, on the next one."""
    app = GradtuiApp(script("loop.py"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_paused_at(pilot, 0)
        for spec in ("MulBackward0", "PowBackward0", "nan"):
            await pilot.press("colon", *f"break {spec}", "enter")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 3, what="three breakpoints")
        table = await _open(pilot)
        pane = app.screen
        await pilot.press("down")
        assert table.cursor_row == 1
        await pilot.press("space")  # PowBackward0 off: its row stays second, the cursor on it
        await wait_for(
            pilot,
            lambda: [b.spec.text for b in app.state.breakpoints] == ["MulBackward0", "nan"],
            what="PowBackward0 off",
        )
        await wait_for(pilot, lambda: _cells(table, 1)[-1] == "off", what="its row redrawn off")
        assert app.screen is pane
        assert [_cells(table, r)[1] for r in range(3)] == ["MulBackward0", "PowBackward0", "nan"]
        assert table.cursor_row == 1
        await pilot.press("x")  # forget the off one: done here, the cursor on the next row
        await wait_for(pilot, lambda: table.row_count == 2, what="the off row forgotten")
        assert app.screen is pane and table.cursor_row == 1 and _cells(table, 1)[1] == "nan"
        await pilot.press("x")  # delete nan, the last row: the cursor on the row before
        await wait_for(
            pilot, lambda: [b.spec.text for b in app.state.breakpoints] == ["MulBackward0"], what="nan deleted"
        )
        await wait_for(pilot, lambda: table.row_count == 1, what="its row gone")
        assert app.screen is pane and table.cursor_row == 0
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is not pane, what="escape closes the pane")
