"""The output pane keeps the newest line in sight after it has been zoomed, and a long
answer lands with its first line at the top."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from gradtui.cli.main import demo_path
from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.output_log import OutputLog
from tests.helpers import wait_for, wait_paused_at


class OneLog(App):
    """An app of one output pane, `log`, alone on its screen."""

    def __init__(self, log: OutputLog) -> None:
        super().__init__()
        self.log_pane = log

    def compose(self) -> ComposeResult:
        yield self.log_pane


def shown(app: GradtuiApp) -> list[str]:
    """The output pane's rows as drawn now."""
    log = app.query_one(OutputLog)
    return [log.render_line(y).text.rstrip() for y in range(log.size.height)]


async def command(pilot, text: str) -> None:
    """`:text` enter, then wait for its answer to be in the output pane."""
    app = pilot.app
    before = len(app.query_one(OutputLog).plain_lines())
    await pilot.press("colon", *text, "enter")
    await wait_for(
        pilot, lambda: len(app.query_one(OutputLog).plain_lines()) > before + 1, what=f"the answer of {text}"
    )
    await pilot.pause()
    await pilot.pause()


@pytest.mark.asyncio
async def test_the_output_pane_follows_again_after_a_zoom_and_a_long_answer_shows_its_top():
    app = GradtuiApp(demo_path())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_paused_at(pilot, 0)
        for _ in range(7):
            node = app.state.current
            await pilot.press("s")
            await wait_for(pilot, lambda: app.state.current not in (None, node), what="the next pause")
        await wait_paused_at(pilot, app.state.current)
        await command(pilot, "why x")
        rows = shown(app)
        assert any("(gradtui) why x" in row for row in rows), rows  # the answer from its first line
        await pilot.press("o")
        await wait_for(pilot, lambda: app.screen.maximized is app.query_one(OutputLog), what="the zoom")
        await pilot.pause()
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen.maximized is None, what="the zoom's end")
        await pilot.pause()
        await command(pilot, "flow")
        await command(pilot, "print")
        lines = app.query_one(OutputLog).plain_lines()
        last = lines[-1].strip()
        rows = [row for row in shown(app) if row.strip()]
        assert rows[-1].split()[-1] == last.split()[-1], (last, rows)  # the newest line is in sight
        assert any("(gradtui) print" in row for row in rows), rows
        assert app.query_one(OutputLog).follow


@pytest.mark.asyncio
async def test_output_written_after_a_long_answer_before_it_is_drawn_wins_over_its_reveal():
    """The reveal of a long answer, applied late, once more lines had come, left the pane short of
    its newest line (and nothing scrolled it on)."""
    app = OneLog(OutputLog())
    async with app.run_test(size=(40, 8)) as pilot:
        log = app.query_one(OutputLog)
        for i in range(3):
            log.write_lines(f"line {i}")
        await pilot.pause()
        start = log.mark()
        log.write_lines("(gradtui) why x\n" + "\n".join(f"answer {i}" for i in range(12)))
        log.reveal(start)
        log.write_stream("the script's next line\n")  # before the reveal is drawn
        await pilot.pause()
        await pilot.pause()
        assert log.scroll_y == log.max_scroll_y > 0
        # alone, a long answer is shown from its command line
        start = log.mark()
        log.write_lines("(gradtui) help\n" + "\n".join(f"help {i}" for i in range(12)))
        log.reveal(start)
        await pilot.pause()
        await pilot.pause()
        assert log.render_line(0).text.strip() == "(gradtui) help"


@pytest.mark.asyncio
async def test_the_pane_follows_lines_that_came_before_the_layout_showed_its_scroll_bar():
    """Textual lets a widget scroll only while its scroll bar is shown, and the layout that
    shows it may not have run when the follow does (seen on a loaded machine: the pane stayed
    at its top, the newest lines out of sight, until the next line came). Here the bar is never
    shown (`allow_vertical_scroll`, Textual's documented override): the pane follows anyway."""

    class Lagging(OutputLog):
        @property
        def allow_vertical_scroll(self) -> bool:
            return False

    app = OneLog(Lagging())
    async with app.run_test(size=(40, 6)) as pilot:
        log = app.query_one(OutputLog)
        log.write_lines("\n".join(f"line {i}" for i in range(20)))
        await pilot.pause()
        await pilot.pause()
        assert log.max_scroll_y > 0
        assert log.scroll_y == log.max_scroll_y
        assert log.render_line(log.size.height - 1).text.strip() == "line 19"
