"""How the app is built: its target client is an object it owns, reading on a
worker and posting each batch as a Message; every piece of UI state is in UIState; widgets
watch the app's `changes` reactive. A scripted target (no agent, no torch) drives it."""

from __future__ import annotations

import ast
import asyncio
from collections import Counter
from pathlib import Path

import pytest
from textual.app import App

import gradtui
from gradtui.protocol import commands
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.commands import Command
from gradtui.ui.app import GradtuiApp
from gradtui.ui.state import UIState
from gradtui.ui.widgets.header import GradHeader
from gradtui.ui.widgets.node_list import NodeList
from gradtui.wire.target import TargetInfo
from tests.helpers import MLP, SIZE, output_lines, row_text, run_mlp_pass, started, wait_for

UI = Path(gradtui.__file__).resolve().parent / "ui"


class ScriptedTarget:
    """A DebugTarget that yields the given batches, one each time the reader asks for the next,
    and notes what the app's state held when the next was asked for."""

    def __init__(self, batches: list[list[ev.Event]]) -> None:
        self.info = TargetInfo("scripted.py", kind="recording")
        self._batches = batches
        self.asked: list[int] = []
        """The app's number of passes each time a batch was asked for."""
        self.app: GradtuiApp | None = None
        self.submitted: list[str] = []
        self.release = asyncio.Event()

    async def start(self) -> None:
        """Nothing to start."""

    def submit(self, command: Command) -> int:
        """Note the command's line."""
        self.submitted.append(command.text)
        return len(self.submitted)

    async def batches(self):
        """The batches, then wait for `release` (the script still running)."""
        for batch in self._batches:
            self.asked.append(self.app.state.passes if self.app is not None else -1)
            yield batch
        self.asked.append(self.app.state.passes if self.app is not None else -1)
        await self.release.wait()

    async def quit(self) -> None:
        """Nothing to stop."""
        self.release.set()

    async def detach(self) -> None:
        """Nothing to leave."""
        self.release.set()


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_the_app_owns_its_parts_and_is_no_mixin():
    """GradtuiApp is an App, nothing else; what reads the target, moves the view and sizes the
    panes import no app (no cycle app <-> client, even under TYPE_CHECKING)."""
    assert GradtuiApp.__bases__ == (App,)
    for name in (
        "client.py",
        "navigation.py",
        "sizing.py",
        "transcript.py",
        "leaving.py",
        "state.py",
        "changes.py",
        "screens/debugger.py",
        "widgets/node_list.py",
        "widgets/header.py",
    ):
        assert "gradtui.ui.app" not in _imports(UI / name), name


def test_the_breakpoints_are_ui_state():
    """The target's breakpoints, with their specs as parsed where they were typed (the node list's
    markers), are in UIState, and their change is one the widgets see."""
    state = UIState("t.py")
    for event in run_mlp_pass(0)[:1]:
        state.apply(event)
    state.take_changes()
    infos = (ev.BreakpointInfo(1, parse_spec("nan"), 0), ev.BreakpointInfo(2, parse_spec("#3"), 1))
    change = state.apply(ev.BreakpointsChanged(infos))
    assert change.breakpoints and state.breakpoints == infos
    assert [(m.number, m.spec.kind) for m in state.breakpoints] == [(1, "nan"), (2, "id")]
    assert state.take_changes().breakpoints and state.take_changes() is None


@pytest.mark.asyncio
async def test_the_link_posts_each_batch_and_reads_the_next_once_it_is_applied():
    """Each batch arrives as a TargetLink.Batch message; the next is read only once the app has
    folded the last one into its state (so what comes meanwhile is drawn as one batch)."""
    passes = [run_mlp_pass(i) for i in range(3)]
    target = ScriptedTarget(passes)
    app = GradtuiApp(target=target)
    target.app = app
    seen: list[int] = []

    async with app.run_test(size=SIZE) as pilot:
        app.watch(app, "changes", lambda changes: seen.append(app.state.passes), init=False)
        await wait_for(pilot, lambda: len(target.asked) == 4, what="every batch read")
        assert target.asked == [0, 1, 2, 3]  # each asked for after the one before was in the state
        assert seen[-1] == 3 and app.state.live.index == 2
        await pilot.press("q")


@pytest.mark.asyncio
async def test_the_widgets_redraw_from_the_changes_they_watch():
    """A breakpoint event marks the node list's rows and a new pass retitles it, through the
    `changes` reactive alone (the app calls no redraw of its own)."""
    target = ScriptedTarget([[started(0)], [ev.BreakpointsChanged((ev.BreakpointInfo(1, parse_spec("#2"), 0),))]])
    app = GradtuiApp(target=target)
    target.app = app
    async with app.run_test(size=SIZE) as pilot:
        nodes = app.query_one(NodeList)
        await wait_for(pilot, lambda: len(target.asked) == 3, what="both batches")
        await pilot.pause()
        assert nodes.border_title == f"pass 0 · {len(MLP)} nodes"
        assert "●" in row_text(app, 2) and "●" not in row_text(app, 1)
        assert app.query_one(GradHeader).pass_text.startswith("pass 0")
        changes = app.changes
        assert changes is not None and changes.breakpoints
        await pilot.press("q")


@pytest.mark.asyncio
async def test_the_app_parses_a_line_once_and_answers_a_bad_one_itself(monkeypatch):
    """Every line the app sends enters at `send`: parsed there once, the target gets the command;
    one that does not parse is answered by the app, in the parser's words, and never sent."""
    counts: Counter[str] = Counter()
    original = commands.parse

    def counting(text: str) -> Command:
        counts[text] += 1
        return original(text)

    monkeypatch.setattr(commands, "parse", counting)  # what `Typed.of`, the app's one parse, calls
    target = ScriptedTarget([[started(0)]])
    app = GradtuiApp(target=target)
    target.app = app
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(target.asked) == 2, what="the pass")
        for line in ("frobnicate", "break nan", "print"):
            app.send(line)
        await pilot.pause()
        assert target.submitted == ["break nan", "print"]
        assert counts == Counter({"frobnicate": 1, "break nan": 1, "print": 1})
        with pytest.raises(commands.CommandError) as refused:
            original("frobnicate")
        assert str(refused.value) in output_lines(app)  # said where it was typed
        await pilot.press("q")
