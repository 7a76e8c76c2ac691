"""The UI of a browser tab (gradtui.serve.tab) in Textual's test harness, against a fake
target: an app that ends without `q` (the tab went, the server stopped) detaches, `q` still
quits the script, and an agent that cannot be reached is shown, not a blank page."""

from __future__ import annotations

import asyncio
import time

from gradtui.protocol.commands import Command
from gradtui.serve.driver import TabDriver
from gradtui.serve.tab import TabApp, Unreachable, page_size, target_for
from gradtui.ui.screens.leave import LeaveScreen
from gradtui.ui.widgets.output_log import OutputLog
from gradtui.wire.target import TargetInfo

SIZE = (100, 30)


class FakeTarget:
    """A target that connects, sends nothing, and notes whether it was quit or detached."""

    def __init__(self) -> None:
        self.info = TargetInfo("/x/train.py")
        self.calls: list[str] = []
        self._gone = asyncio.Event()

    async def start(self) -> None:
        self.calls.append("start")

    def submit(self, command: Command) -> int:
        self.calls.append(f"submit {command.text}")
        return 1

    async def batches(self):
        await self._gone.wait()
        return
        yield

    async def quit(self) -> None:
        self.calls.append("quit")
        self._gone.set()

    async def detach(self) -> None:
        self.calls.append("detach")
        self._gone.set()


async def _until(pilot, predicate, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)


async def test_an_app_ended_without_q_detaches_and_leaves_the_script_running():
    target = FakeTarget()
    app = TabApp(target=target)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: "start" in target.calls, "the target to start")
        app.exit()  # what textual-serve's quit packet does (the websocket closed, or Ctrl-C)
    assert target.calls == ["start", "detach"]


async def test_q_in_a_tab_asks_then_q_again_quits_the_script():
    target = FakeTarget()
    app = TabApp(target=target)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: "start" in target.calls, "the target to start")
        await pilot.press("q")
        await _until(pilot, lambda: isinstance(app.screen, LeaveScreen), "the leave question")
        assert target.calls == ["start"]  # nothing stopped yet
        await pilot.press("q")
        await _until(pilot, lambda: app.return_value is not None, "q to leave")
    assert target.calls == ["start", "quit"]


async def test_D_in_a_tab_detaches_once():
    target = FakeTarget()
    app = TabApp(target=target)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: "start" in target.calls, "the target to start")
        await pilot.press("D")
        await _until(pilot, lambda: app.return_value is not None, "D to leave")
    assert target.calls == ["start", "detach"]


async def test_an_agent_that_is_not_there_is_explained_in_the_tab(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("GRADTUI_TOKEN", raising=False)
    target = target_for("127.0.0.1:9")
    assert isinstance(target, Unreachable)
    app = TabApp(target=target)
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(OutputLog)
        await _until(
            pilot,
            lambda: "no runtime file names an agent at 127.0.0.1:9" in " ".join(log.plain_lines()),
            "the reason in the output pane",
        )
    assert isinstance(target_for("not an address"), Unreachable)


def test_the_tab_starts_at_the_page_s_size_on_the_driver_that_keeps_its_sizes_in_order():
    """textual-serve gives the page's terminal size as COLUMNS and ROWS; the app is handed it
    (GradtuiApp.run removes COLUMNS before Textual's web driver would read it)."""
    assert page_size({"COLUMNS": "155", "ROWS": "42", "LINES": "24"}) == (155, 42)
    for environ in ({}, {"COLUMNS": "155"}, {"COLUMNS": "x", "ROWS": "42"}, {"COLUMNS": "0", "ROWS": "42"}):
        assert page_size(environ) is None, environ
    assert TabApp(target=FakeTarget()).get_driver_class() is TabDriver
