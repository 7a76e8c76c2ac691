"""A replay tells what the run did at each node: the run's edits (what, and the gradient before
and after), and nodes marked ran only as the walk passes them.

Two recordings of chain.py (z = (3x)², x = 2): one where the run stepped to #1 MulBackward0 (y),
whose incoming gradient dz/dy = 12, and typed `scale 3` there; one where the run quit at that
pause, so the pass stopped mid-way. The live run's own words are the oracle for the numbers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import tempfile

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.record.reader import Recording
from gradtui.record.replay import ReplayTarget
from tests.helpers import REPLAY_TIMEOUT, of, script, walk_of
from tests.processes import gradtui

pytestmark = pytest.mark.timeout(120)

_folder = tempfile.TemporaryDirectory(prefix="gradtui-replay-edits-")


@functools.cache
def recorded(name: str, *commands: str):
    """chain.py run headless with `commands` and recorded to NAME.db: (path, the run)."""
    path = os.path.join(_folder.name, f"{name}.db")
    args = [a for c in commands for a in ("-c", c)]
    run = gradtui("--headless", *args, "--record", path, script("chain.py"))
    return path, run


def edited():
    path, run = recorded("edited", "step", "scale 3", "continue")
    assert run.returncode == 0, run.stderr[-2000:]
    return path, run


def stopped():
    path, run = recorded("stopped", "step", "quit")
    assert run.returncode == 130, run.stderr[-2000:]
    return path, run


async def _replayed(path: str, *commands: str) -> list[list[ev.Event]]:
    """The replay's batches: its story, its first pause, then each command's answer."""
    target = ReplayTarget(path)
    await target.start()
    batches = target.batches().__aiter__()
    out = [
        await asyncio.wait_for(batches.__anext__(), REPLAY_TIMEOUT),
        await asyncio.wait_for(batches.__anext__(), REPLAY_TIMEOUT),
    ]
    for command in commands:
        target.submit(parse(command))
        out.append(await asyncio.wait_for(batches.__anext__(), REPLAY_TIMEOUT))
    await target.quit()
    return out


def test_headless_replay_says_the_run_edited_the_gradient_how_and_its_value_before():
    path, run = edited()
    live = run.stdout.splitlines()
    at = live.index("(gradtui) scale 3")
    arrived = live[at - 1].strip()  # the pause before #1: what arrived, as the run printed it
    now = live[at + 1].strip()
    assert arrived.startswith("in[0] [1] float32") and " norm 12 " in arrived
    assert now.startswith("gradient now [1] float32") and " norm 36 " in now  # 3 x 12
    done = gradtui("replay", path, "--headless", "-c", "step", "-c", "print")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    told = lines.index("the run edited the gradient arriving at #1 MulBackward0 (y) in pass 0: scale 3")
    assert lines[told + 1] == f"    before the edit: {arrived}"
    assert lines[told + 2] == "    after the edit:  in[0]" + now.removeprefix("gradient now")
    assert lines[told + 3].startswith("paused before #1 MulBackward0 (y) · pass 0 · 1/3 done")
    assert sum("the run edited" in line for line in lines) == 1


async def test_the_replay_tells_the_edit_once_before_the_pause_at_the_edited_node():
    path, _ = edited()
    story, first, stepped, stepped_on = await _replayed(path, "step", "step")
    assert not [e for e in story + first if isinstance(e, ev.GradEdited)]  # the pause is at #0: not edited
    [edit] = [e for e in stepped if isinstance(e, ev.GradEdited)]
    with Recording(path) as recording:
        [row] = recording.edits()
    assert (edit.pass_index, edit.node, edit.command) == (row["pass"], row["node"], "scale 3") == (0, 1, "scale 3")
    assert [s.to_json() for s in edit.before] == row["before"] and [s.to_json() for s in edit.after] == row["after"]
    assert stepped.index(edit) < stepped.index(of(stepped, ev.Paused)[0])
    assert not [e for e in stepped_on if isinstance(e, ev.GradEdited)]


async def test_the_ui_marks_the_node_the_run_edited_and_shows_its_value_before():
    from gradtui.ui.app import GradtuiApp
    from tests.helpers import detail_text, wait_for, wait_paused_at

    path, _ = edited()
    app = GradtuiApp(target=ReplayTarget(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_paused_at(pilot, 0)
        await pilot.press("s")
        await wait_paused_at(pilot, 1)
        await wait_for(pilot, lambda: "edited: scale 3" in detail_text(app), what="the edit's mark")
        text = detail_text(app)
        assert "norm 36" in text and "before the edit" in text
        assert app.state.view.edits[1][0][0] == "scale 3"
        await pilot.press("q")


async def test_a_replay_marks_ran_only_the_nodes_before_its_pause():
    """The run quit paused before #1: #0 ran, #1 and #2 did not. The replay pauses at #0; no
    node is marked ran until the walk passes it, and #1, #2 never are."""
    from gradtui.ui.state import UIState

    path, _ = stopped()
    assert walk_of(path, 0) == [0]
    state = UIState("chain.py")
    batches = await _replayed(path, "print")
    for batch in batches:
        for event in batch:
            state.apply(event)
    [pause] = of(batches[1], ev.Paused)
    assert (pause.node, pause.done) == (0, 0)
    assert not [e for e in batches[0] + batches[1] if isinstance(e, ev.NodeRan) and e.pass_index == 0]
    assert state.current == 0 and not state.view.ran


async def test_the_walk_tells_each_node_ran_as_it_passes_it():
    path, _ = edited()
    story, first, *steps = await _replayed(path, "step", "step", "step")
    ran = [[e.node for e in batch if isinstance(e, ev.NodeRan)] for batch in (first, *steps)]
    assert ran == [[], [0], [1], [2]]
