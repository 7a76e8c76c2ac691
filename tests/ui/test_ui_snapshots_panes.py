"""SVG snapshots of the panes' looks, at 80x24 and 160x45, on tiny seeded scripts:
panes sized by content, the attached UI's question on `q`, the flow of the last ended pass
with zero-initialised biases apart. Regenerate with `--snapshot-update` and look at every SVG."""

from __future__ import annotations

import pytest

from gradtui.cli.main import demo_path
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.flow import FlowScreen
from gradtui.ui.screens.leave import LeaveScreen
from tests.helpers import FakeTarget, finish_into_pass_1, footer_of_the_modal, script, settle, wait_for, wait_paused_at

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])


@SIZES
def test_demo_at_the_tanh_panes_sized_by_content(snap_compare, size):
    """The demo paused at #5 TanhBackward0: at 160x45 the node list as wide as its rows, the
    source line whole, every graph row in its depth column."""

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        while app.state.current != 5:
            node = app.state.current
            await pilot.press("s")
            await wait_for(pilot, lambda: app.state.current not in (None, node), what="the next pause")
        await wait_paused_at(pilot, 5)
        await settle(pilot)

    assert snap_compare(GradtuiApp(demo_path()), terminal_size=size, run_before=run_before)


@SIZES
def test_q_in_an_attached_ui_asks_and_offers_detach(snap_compare, size):
    async def run_before(pilot):
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, LeaveScreen), what="the question")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    target = FakeTarget()
    assert snap_compare(GradtuiApp(target=target), terminal_size=size, run_before=run_before)


@SIZES
def test_w_in_pass_1_shows_pass_0_with_its_zero_biases_apart(snap_compare, size):
    async def run_before(pilot):
        app = pilot.app
        await finish_into_pass_1(pilot)
        await pilot.press("w")
        await wait_for(pilot, lambda: isinstance(app.screen, FlowScreen), what="the flow screen")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(
        GradtuiApp(script("ui/zero_bias.py"), record_all=True), terminal_size=size, run_before=run_before
    )


@SIZES
def test_the_breakpoints_pane_after_two_hits(snap_compare, size):
    """B on loop.py after `break MulBackward0` hit in passes 0 and 1, and `break nan` that never hit."""
    from gradtui.ui.screens.breakpoints import BreakpointsScreen
    from tests.helpers import script

    async def run_before(pilot):
        app = pilot.app
        await wait_for(
            pilot,
            lambda: (
                len(app.state.breakpoints) == 2 and app.state.paused is not None and app.state.paused.pass_index == 1
            ),
            what="the second hit",
        )
        await wait_paused_at(pilot, 1)
        from tests.helpers import output_lines  # pass 0's print comes through a pipe: wait for it, else the

        await wait_for(
            pilot,
            lambda: any("pass 0 x.grad" in line for line in output_lines(app)),  # tail varies
            what="pass 0's print",
        )
        from gradtui.ui.widgets.output_log import OutputLog

        log = app.query_one(OutputLog)
        await pilot.pause()
        await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y, what="the output pane at its end")
        await pilot.press("B")
        await wait_for(pilot, lambda: isinstance(app.screen, BreakpointsScreen), what="the breakpoints pane")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    app = GradtuiApp(script("loop.py"), commands=["break MulBackward0", "break nan", "continue", "continue"])
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_the_source_view_at_80x24(snap_compare):
    """v on train_loop.py's first node (the loss line): the whole file, the loss line marked
    with the count of the nodes it made, the model's line with its own, a breakpoint set there by b."""
    _source_view(snap_compare, (80, 24))


def test_the_source_view_at_160x45(snap_compare):
    """The same source view at 160x45: the file's lines whole, the marks and the footer."""
    _source_view(snap_compare, (160, 45))


def _source_view(snap_compare, size: tuple[int, int]) -> None:
    from gradtui.ui.screens.source import SourceScreen
    from tests.helpers import script

    async def run_before(pilot):
        app = pilot.app
        await wait_paused_at(pilot, 0)
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, SourceScreen), what="the source view")
        await pilot.press("b")
        await wait_for(pilot, lambda: len(app.state.breakpoints) == 1, what="the breakpoint")
        await footer_of_the_modal(pilot)
        await settle(pilot)

    assert snap_compare(GradtuiApp(script("train_loop.py"), args=["1"]), terminal_size=size, run_before=run_before)
