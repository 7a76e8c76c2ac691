"""Helpers of the UI tests: paths, waiting with a timeout, reading what the panes show."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.detail import DetailPane
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.output_log import OutputLog
from tests.helpers import example  # noqa: F401 - the UI tests take it from here too

UI_SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "ui"
SIZE = (120, 40)


def ui_script(name: str) -> str:
    """Path of a script in tests/fixtures/ui."""
    path = UI_SCRIPTS / name
    assert path.is_file(), path
    return str(path)


async def wait_for(pilot: Pilot, predicate: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Let the app run until `predicate()` is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            app = pilot.app
            state = getattr(app, "state", None)
            status = state.status_text() if state is not None else "?"
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate} (app: {status})")
        await pilot.pause(0.02)


async def wait_paused_at(pilot: Pilot, node: int, timeout: float = 30) -> None:
    """Wait until the engine is paused at `node` and the app has drawn it."""
    app: GradtuiApp = pilot.app  # type: ignore[assignment]
    await wait_for(pilot, lambda: app.state.current == node and selected(app) == node, timeout, f"a pause at #{node}")
    await pilot.pause()


def selected(app: GradtuiApp) -> int | None:
    """The node selected in the node list."""
    return app.query_one(NodeList).selected


def detail_text(app: GradtuiApp) -> str:
    """The plain text of the detail pane."""
    return str(app.query_one(DetailPane).query_one("#detail-body", Static).visual)


def graph_text(app: GradtuiApp) -> str:
    """The plain text of the graph pane."""
    return str(app.query_one(GraphPane).query_one("#graph-body", Static).visual)


def row_text(app: GradtuiApp, node: int) -> str:
    """The node list row of `node`, as text (it must be on screen)."""
    nodes = app.query_one(NodeList)
    row = app.state.view.row[node]
    y = row - round(nodes.scroll_offset.y)
    assert 0 <= y < nodes.size.height, f"row of #{node} is off screen"
    return nodes.render_line(y).text


def output_lines(app: GradtuiApp) -> list[str]:
    """Every line of the output pane, as plain text."""
    return app.query_one(OutputLog).plain_lines()


async def finish_into_pass_1(pilot: Pilot) -> None:
    """From the first pause of pass 0: `f`, then wait for pass 1's first pause to be drawn."""
    app = pilot.app
    await wait_paused_at(pilot, 0)
    await pilot.press("f")
    await wait_for(
        pilot,
        lambda: app.state.paused is not None and app.state.paused.pass_index == 1,
        what="the first pause of pass 1",
    )
    await wait_paused_at(pilot, app.state.paused.node)
