"""A replay shows what the run showed at the call site: `V` lists the
variables the run read where backward was called, and a notebook cell's node shows the cell's
text, from the recording alone (its `told` table). A recording made before that table replays
as before: no variables, no cell text, nothing named damaged. And (item 4) `x` and `e` refuse
at once in replay, in the words the replay refuses `zero` with, asking for no value first."""

from __future__ import annotations

import linecache
import os
import sqlite3
import subprocess
import sys

import pytest
from textual.widgets import DataTable, OptionList

from gradtui.record.reader import Recording
from gradtui.record.replay import ReplayTarget
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.prompt import PromptScreen
from gradtui.ui.screens.source import SourceScreen
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.variables import VariablesScreen
from tests.helpers import REPO, SIZE, detail_text, script, selected, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> str:
    """notebook_cell.py recorded headless: its one pass paused at its first node (`continue`)."""
    path = str(tmp_path_factory.mktemp("cell") / "cell.db")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "--record",
            path,
            "-c",
            "continue",
            script("ui/notebook_cell.py"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return path


def _forget_cell() -> None:
    """This process's linecache holds no cell text (so only the replay can bring it)."""
    for path in [p for p in linecache.cache if p.endswith("3049230926.py")]:
        del linecache.cache[path]


async def _replay_paused(pilot) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.state.paused is not None and selected(app) is not None, what="the replay's pause")
    await pilot.pause()


def test_the_recording_keeps_the_variables_and_the_cells_text(recording):
    with Recording(recording) as rec:
        told = rec.variables(0)
        sources = rec.sources()
        assert not rec.damage
    assert list(told) == [0]
    assert [v.name for v in told[0].variables] == ["weight", "hidden", "loss"]
    assert [(os.path.basename(s.path), len(s.lines)) for s in sources] == [("3049230926.py", 5)]
    assert sources[0].lines[2] == "hidden = torch.tanh(weight * 2.0)  # the cell's own line\n"


@pytest.mark.asyncio
async def test_v_and_the_source_view_in_replay_show_what_the_run_showed(recording):
    _forget_cell()
    app = GradtuiApp(target=ReplayTarget(recording))
    async with app.run_test(size=SIZE) as pilot:
        await _replay_paused(pilot)
        await pilot.press("V")
        await wait_for(pilot, lambda: isinstance(app.screen, VariablesScreen), what="the variables pane")
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        names = [str(table.get_row_at(r)[0]) for r in range(table.row_count)]
        assert names == ["weight", "hidden", "loss"]
        assert str(table.get_row_at(2)[4]) == "#0"  # loss: the root
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, VariablesScreen), what="the pane closed")

        graph = app.state.view.graph
        tanh = next(n for n, d in graph.nodes(data="info") if d.name == "TanhBackward0")
        app.query_one("#nodes").select_node(tanh)
        await wait_for(pilot, lambda: "hidden = torch.tanh(weight * 2.0)" in detail_text(app), what="the cell's line")
        await pilot.press("v")
        await wait_for(pilot, lambda: isinstance(app.screen, SourceScreen), what="the source view")
        await pilot.pause()
        lines = app.screen.query_one(OptionList)
        assert lines.option_count == 5 and lines.highlighted == 2
        await pilot.press("escape")
        await pilot.press("q")


@pytest.mark.asyncio
async def test_a_recording_without_the_told_table_replays_as_before(recording, tmp_path):
    _forget_cell()
    old = str(tmp_path / "old.db")
    with sqlite3.connect(recording) as source, sqlite3.connect(old) as copy:
        source.backup(copy)
    with sqlite3.connect(old) as db:
        db.execute("DROP TABLE IF EXISTS told")
    target = ReplayTarget(old)
    app = GradtuiApp(target=target)
    async with app.run_test(size=SIZE) as pilot:
        await _replay_paused(pilot)
        assert target.damage == []
        await pilot.press("V")
        await wait_for(pilot, lambda: isinstance(app.screen, VariablesScreen), what="the variables pane")
        await pilot.pause()
        assert app.screen.query_one(DataTable).row_count == 0
        assert "the run read no variables in this pass" in str(app.screen.query_one("#variables-note").visual)
        await pilot.press("escape")
        await pilot.press("q")


@pytest.mark.asyncio
async def test_x_and_e_in_replay_refuse_at_once_as_zero_does(recording):
    app = GradtuiApp(target=ReplayTarget(recording))
    async with app.run_test(size=SIZE) as pilot:
        await _replay_paused(pilot)
        bar = app.query_one(CommandBar)
        await pilot.press("z")  # sent: the replay target refuses it
        await wait_for(pilot, lambda: bar.error and bar.answer_text, what="the refusal of zero")
        refused = bar.answer_text
        assert refused.startswith("read-only:")
        for key in ("x", "e"):
            bar.answer_text = ""
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, PromptScreen), f"{key} asked for a value"
            assert bar.answer_text == refused and bar.error
        await pilot.press("q")
