"""The replay's views say what the run showed: a recording of
tests/fixtures/nanmlp.py with `break nan` hitting at pass 5 (`gradtui --headless --record run.db
-c 'break nan' -c continue nanmlp.py`), and the same with `--flight 3`.

The passes table's hits and nodes cells, the detail pane's "incoming norm over passes" (the
live UI draws node 4's norms of passes 0-4 at the stop in pass 5), and the passes view at 80x24
and 160x45 (snapshots: the table keeps rows, the plots give way)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gradtui.record.reader import Recording
from gradtui.record.replay import ReplayTarget
from gradtui.ui.app import GradtuiApp
from gradtui.ui.screens.passes import PassesScreen
from gradtui.ui.widgets.node_list import NodeList
from tests.helpers import REPO, detail_text, footer_of_the_modal, script, settle, wait_for

pytestmark = pytest.mark.timeout(120)


def _record(path: str, *options: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "--record",
            path,
            *options,
            "-c",
            "break nan",
            "-c",
            "continue",
            script("nanmlp.py"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, str]:
    """The recording of every hooked pass, and the --flight 3 one."""
    folder = tmp_path_factory.mktemp("nanmlp")
    return {"all": _record(str(folder / "all.db")), "flight": _record(str(folder / "flight.db"), "--flight", "3")}


def _app(db: str) -> GradtuiApp:
    return GradtuiApp(target=ReplayTarget(db), passes_first=True)  # as `gradtui replay DB` makes it


async def _passes_view(pilot) -> PassesScreen:
    app = pilot.app
    await wait_for(
        pilot,
        lambda: app.state.paused is not None and app.state.paused.pass_index == 5,
        what="the replay's pause in pass 5",
    )
    await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen) and app.screen.indices, what="the passes view")
    return app.screen


def _cells(screen: PassesScreen, column: int) -> dict[int, str]:
    table = screen.query_one("#passes-table")
    return {index: table.get_row_at(row)[column].plain for row, index in enumerate(screen.indices)}


async def test_the_passes_table_reads_the_runs_hits_and_node_counts(recordings):
    with Recording(recordings["all"]) as recording:
        passes = recording.passes()
        hits = recording.hits()
    assert [h["pass"] for h in hits] == [5]
    async with _app(recordings["all"]).run_test(size=(120, 40)) as pilot:
        screen = await _passes_view(pilot)
        nodes, hit_cells = _cells(screen, 2), _cells(screen, 3)
        assert hit_cells == {p.index: "1" if p.index == 5 else "-" for p in passes}
        assert nodes == {p.index: str(p.nodes) if p.per_node else "unhooked" for p in passes}
        await pilot.press("q")


async def test_a_flight_recording_tells_its_hooked_passes_as_hooked_not_kept(recordings):
    with Recording(recordings["flight"]) as recording:
        passes = recording.passes()
    assert [p.index for p in passes if p.per_node] == [3, 4, 5] and all(p.hooked for p in passes)
    async with _app(recordings["flight"]).run_test(size=(120, 40)) as pilot:
        screen = await _passes_view(pilot)
        assert _cells(screen, 2) == {p.index: str(p.nodes) if p.per_node else f"{p.nodes} · not kept" for p in passes}
        assert "3 with per-node data" in str(screen.query_one("#passes-note").visual)
        await pilot.press("q")


async def test_the_detail_pane_draws_a_nodes_recorded_norms_over_the_passes_before_the_stop(recordings):
    with Recording(recordings["all"]) as recording:
        norms = [recording.stats(i)[4].grad_outputs[0].norm for i in range(5)]
        assert recording.graph(5).nodes[4]["info"].name == "TBackward0"
    app = _app(recordings["all"])
    async with app.run_test(size=(160, 45)) as pilot:
        await _passes_view(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.query_one(NodeList).selected == 0, what="the stop at #0")
        app.query_one(NodeList).select_node(4)
        await wait_for(pilot, lambda: "incoming norm over passes" in detail_text(app), what="the norms over passes")
        series = app.state.norms.series(4, "TBackward0")
        assert [index for index, _ in series if index < 5] == [0, 1, 2, 3, 4]
        assert [norm for index, norm in series if index < 5] == pytest.approx(norms, rel=1e-6)  # float32 kept
        text = detail_text(app)
        assert "passes 0–4" in text and "min -" not in text, text
        await pilot.press("q")


async def _settled_passes_view(pilot) -> None:
    await _passes_view(pilot)
    await footer_of_the_modal(pilot)
    await settle(pilot)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
def test_replay_passes_view_keeps_its_table_rows(snap_compare, recordings, size):
    """The passes view of the nanmlp recording: at 80x24 the loss and norm plots only, over a
    table with rows (pass 5's hit, every pass's node count); at 160x45 all four plots."""
    assert snap_compare(_app(recordings["all"]), terminal_size=size, run_before=_settled_passes_view)


@pytest.mark.parametrize(
    "height,recording,size",
    [
        (24, True, "compact"),
        (45, True, "full"),
        (40, True, "short"),
        (20, True, "hidden"),
        (24, False, "short"),
        (36, False, "full"),
    ],
)
def test_the_plots_give_way_to_the_table(height, recording, size):
    from gradtui.ui.screens.passes import AROUND, FOOTER, PLOT_SIZES, TABLE_ROWS, plot_size

    assert plot_size(height, recording) == size
    taken = dict(PLOT_SIZES[recording]).get(size, 0)
    assert (height - FOOTER) * 9 // 10 - AROUND - taken >= TABLE_ROWS


@pytest.mark.asyncio
async def test_after_the_replay_ends_enter_in_the_passes_view_still_shows_a_kept_pass(recordings):
    """The replay walk: once the recording had played to its end, enter on a pass in the passes
    view said "the script has ended: q to leave" (it asked the finished target for `pass N`);
    as after a live run, the passes the UI keeps are still shown."""
    app = _app(recordings["all"])
    async with app.run_test(size=(160, 45)) as pilot:
        await _passes_view(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, PassesScreen), what="the debugger")
        await pilot.press("c")
        await wait_for(pilot, lambda: app.state.script_over, what="the recording's end")
        shown = app.state.view.index
        target = next(v.index for v in reversed(app.state.views) if v.index != shown)
        await pilot.press("P")
        await wait_for(pilot, lambda: isinstance(app.screen, PassesScreen) and app.screen.indices, what="the passes")
        app.screen.query_one("#passes-table").move_cursor(row=app.screen.indices.index(target))
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, PassesScreen), what="the debugger again")
        await wait_for(pilot, lambda: app.state.view.index == target, what=f"pass {target} shown")
