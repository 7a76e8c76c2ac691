"""`gradtui replay`: a recording as a read-only DebugTarget, headless and in the UI.

One recording for the module: nan_at_30.py run with `--flight 5 -c 'break nan' -c continue`,
so passes 26-30 have per-node data and the run stopped in pass 30 after the SqrtBackward0 whose
backward divides by zero. What the replay says is checked against the database itself (whose
numbers test_store checks against torch's)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.commands import Typed, parse
from gradtui.protocol.stats import format_grads
from gradtui.record.reader import Recording
from gradtui.record.replay import ReplayTarget
from tests.helpers import REPLAY_TIMEOUT, of, wait_for, walk_of
from tests.processes import flight_recording, gradtui

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def db() -> str:
    made = flight_recording()
    assert made.run.returncode == 0, made.run.stderr[-2000:]
    return made.path


class Replay:
    """A ReplayTarget driven in-process: every read of its events has a timeout."""

    def __init__(self, db: str) -> None:
        self.target = ReplayTarget(db)
        self._batches = None

    async def start(self) -> list[ev.Event]:
        await self.target.start()
        self._batches = self.target.batches().__aiter__()
        return await self.batch() + await self.batch()  # the story, then the first pause

    async def batch(self) -> list[ev.Event]:
        return await asyncio.wait_for(self._batches.__anext__(), REPLAY_TIMEOUT)

    async def send(self, text: str) -> tuple[int, list[ev.Event]]:
        request = self.target.submit(parse(text))
        return request, await self.batch()


def test_headless_pass_30_print_shows_the_culprit_and_its_recorded_stats(db):
    done = gradtui("replay", db, "--headless", "-c", "pass 30", "-c", "print")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    shown = lines.index("(gradtui) pass 30")
    paused = next(line for line in lines[shown:] if line.startswith("paused"))
    assert paused.startswith("paused after #4 SqrtBackward0 (h) · pass 30 · 7/13 done")
    live = next(line for line in flight_recording().run.stdout.splitlines() if line.startswith("paused after"))
    assert paused.endswith(": " + live.split(" · ")[-1])  # the run's words
    answer = lines[lines.index("(gradtui) print") + 1 :]
    with Recording(db) as recording:
        stats = recording.stats(30)[4]
    expected = format_grads(stats.grad_outputs, "before") + format_grads(stats.grad_inputs, "after")
    assert answer[: len(expected)] == [f"  {line}" for line in expected]
    assert "nonfinite 128" in answer[1] and "nonfinite" not in answer[0]  # finite in, non-finite out: the culprit


async def test_the_replay_tells_the_story_then_pauses_where_the_run_stopped(db):
    replay = Replay(db)
    events = await replay.start()
    assert isinstance(events[0], ev.ScriptStarted) and events[0].path.endswith("nan_at_30.py")
    started = [e for e in events if isinstance(e, ev.PassStarted)]
    assert [e.pass_index for e in started[:40]] == list(range(40))
    assert [e.pass_index for e in started if e.kept][:5] == [26, 27, 28, 29, 30]
    with Recording(db) as recording:  # hooked as the run was, with the run's node counts
        assert [(e.recorded, e.nodes or e.graph.number_of_nodes()) for e in started[:-1]] == [
            (p.hooked, p.nodes) for p in recording.passes()
        ]
    finished = {e.pass_index: e for e in events if isinstance(e, ev.PassFinished)}
    with Recording(db) as recording:
        assert all(repr(finished[i].flow) == repr(recording.flow(i)) for i in range(40))  # NaN-aware
        assert sum(isinstance(e, ev.Output) for e in events) == len(recording.output())
    [pause] = of(events, ev.Paused)
    assert (pause.pass_index, pause.node, pause.phase) == (30, 4, "after")
    await replay.target.quit()


async def test_step_and_continue_walk_a_recorded_pass_in_engine_order(db):
    replay = Replay(db)
    await replay.start()
    _, events = await replay.send("pass 28")
    order = walk_of(db, 28)
    assert [e.node for e in events if isinstance(e, ev.NodeRan)] == []  # none has run at the first node
    assert [(p.node, p.done) for p in of(events, ev.Paused)] == [(order[0], 0)]
    seen = [order[0]]
    for _ in order[1:]:
        _, events = await replay.send("step")
        [pause] = of(events, ev.Paused)
        assert pause.phase == "before" and pause.done == len(seen)
        assert [e.node for e in events if isinstance(e, ev.NodeRan)] == [seen[-1]]  # the node stepped over ran
        seen.append(pause.node)
    assert seen == order
    _, events = await replay.send("step")  # past the last node: pass 28 ends, pass 29 begins
    assert [e.node for e in events if isinstance(e, ev.NodeRan)] == [order[-1]]
    assert [e.pass_index for e in events if isinstance(e, ev.PassFinished)] == [28]
    assert [(p.pass_index, p.node) for p in of(events, ev.Paused)] == [(29, walk_of(db, 29)[0])]
    request, events = await replay.send("break nan")
    assert [e.request for e in events if isinstance(e, ev.CommandResult)] == [request]
    _, events = await replay.send("continue")  # stops after the node that made the first non-finite value
    assert [(p.pass_index, p.node, p.phase) for p in of(events, ev.Paused)] == [(30, 4, "after")]
    assert [(e.number, e.pass_index, e.node) for e in events if isinstance(e, ev.BreakpointHit)] == [(1, 30, 4)]
    _, events = await replay.send("continue")  # nothing more to stop at: the script's end, as recorded
    assert [e.pass_index for e in events if isinstance(e, ev.PassFinished)] == [30]
    [end] = [e for e in events if isinstance(e, ev.ScriptFinished)]
    assert end.exit_status == 0 and not end.quit
    with pytest.raises(StopAsyncIteration):
        await replay.batch()


@pytest.mark.parametrize("command", ["scale 2", "zero", "clip 1", "set g * 0", "why h", "print g.sum()"])
async def test_edits_and_live_only_commands_are_refused_read_only(db, command):
    replay = Replay(db)
    await replay.start()
    request, events = await replay.send(command)
    assert [(e.ok, e.request) for e in events] == [(False, request)]
    assert events[0].text.startswith("read-only: ")
    _, events = await replay.send("print")  # still paused where it was, nothing changed
    with Recording(db) as recording:
        assert events[0].text.splitlines()[0] == format_grads(recording.stats(30)[4].grad_outputs, "before")[0]
    await replay.target.quit()


async def test_pass_n_of_a_pass_without_nodes_or_out_of_range_is_refused_with_what_there_is(db):
    replay = Replay(db)
    await replay.start()
    request, events = await replay.send("pass 3")
    assert [(e.ok, e.request) for e in events] == [(False, request)]
    assert "no per-node data" in events[0].text and "26-30" in events[0].text
    _, events = await replay.send("pass 99")
    assert not events[0].ok and "no pass 99" in events[0].text
    assert "not a whole number" in (Typed.of("pass x").error or "")  # refused where it is typed: never sent
    _, events = await replay.send("flow")
    assert events[0].ok and events[0].text.startswith("gradient flow after pass 30:")
    await replay.target.quit()


def test_bad_input_is_one_line_and_status_2(db, tmp_path):
    newer = tmp_path / "newer.db"
    shutil.copy(db, newer)
    connection = sqlite3.connect(newer)
    connection.execute("UPDATE schema_version SET version = 99")
    connection.commit()
    connection.close()
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, but long enough to be read as a header " * 4)
    for path, why in [
        (tmp_path / "missing.db", "no such file"),
        (text, "not a gradtui recording"),
        (newer, "newer gradtui"),
        (tmp_path, "directory"),
    ]:
        done = gradtui("replay", str(path), "--headless", "-c", "print")
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert len(done.stderr.strip().splitlines()) == 1 and why in done.stderr, done.stderr


async def test_the_ui_over_a_recording_shows_the_pass_and_s_steps(db):
    from gradtui.ui.app import GradtuiApp
    from gradtui.ui.widgets.node_list import NodeList

    app = GradtuiApp(target=ReplayTarget(db))

    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(
            pilot, lambda: app.state.current == 4 and app.query_one(NodeList).selected == 4, what="the pause at #4"
        )
        assert app.state.view.index == 30 and app.state.view.recorded
        assert app.state.pass_text().startswith("pass 30")
        order = walk_of(db, 30)  # paused after #4: the nodes up to it ran, none after it
        assert set(app.state.view.ran) == set(order[: order.index(4) + 1])
        await pilot.press("s")
        await wait_for(pilot, lambda: app.state.current == 6, what="the step to #6")
        assert app.state.paused.phase == "before" and app.query_one(NodeList).selected == 6
        await pilot.press("z")  # an edit key: refused, nothing changes
        await wait_for(
            pilot,
            lambda: "read-only" in "\n".join(app.query_one("#output").plain_lines()),
            what="the refusal in the output pane",
        )
        assert app.state.current == 6
        await pilot.press("q")


async def test_a_pass_shown_again_replaces_its_old_view_and_summary_in_the_ui_model(db):
    from gradtui.ui.state import UIState

    replay = Replay(db)
    state = UIState("nan_at_30.py")
    for event in await replay.start():
        state.apply(event)
    for text in ("pass 28", "pass 26"):
        _, events = await replay.send(text)
        for event in events:
            state.apply(event)
    assert [s.index for s in state.summaries] == list(range(40))  # once each, in order
    indexes = [v.index for v in state.views]
    assert len(indexes) == len(set(indexes)) and indexes[-1] == 26 and state.live.index == 26
    assert state.current == walk_of(db, 26)[0]
    await replay.target.quit()


async def test_the_ui_replay_opens_on_its_passes_view_and_goes_from_there_to_a_pass(db):
    """`gradtui replay DB` (passes_first): the passes view first, its cursor on the pass the run
    stopped in; escape shows that stop in the debugger, enter on another row that pass."""
    from gradtui.ui.app import GradtuiApp
    from gradtui.ui.screens.passes import PassesScreen
    from gradtui.ui.widgets.node_list import NodeList

    app = GradtuiApp(target=ReplayTarget(db), passes_first=True)

    def passes() -> PassesScreen | None:
        return app.screen if isinstance(app.screen, PassesScreen) else None

    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: passes() is not None and passes().indices, what="the passes view")
        screen = passes()
        assert screen.indices == list(range(40))
        assert screen.indices[screen.query_one("#passes-table").cursor_row] == 30
        await pilot.press("escape")
        await wait_for(pilot, lambda: passes() is None and app.query_one(NodeList).selected == 4, what="the stop at #4")
        assert app.state.view.index == 30 and app.state.paused.pass_index == 30
        await pilot.press("P")
        await wait_for(pilot, lambda: passes() is not None and passes().indices, what="the passes view again")
        await pilot.press("up", "up", "enter")
        await wait_for(
            pilot,
            lambda: passes() is None and app.state.view is not None and app.state.view.index == 28,
            what="pass 28 shown",
        )
        assert app.state.current == walk_of(db, 28)[0]
        await pilot.press("q")
