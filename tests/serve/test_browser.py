"""`gradtui serve` end to end in headless Chromium.

A `gradtui --listen` agent pauses at the first node of a tiny seeded script; `gradtui serve`
serves its UI; Chromium loads the page, the page's terminal shows the paused node, the `s`
key pressed in the page steps to the next node. The real server refuses a wrong token (and
starts no process for it), the agent's token appears in no page, log or command line, and
SIGINT to the server ends it and its tab process while the script runs on to its end (the
tab detached), with the gradient a plain run gives.

Needs Debian's `chromium` (.ci/run installs it when it is missing). Every process is started
in its own session and SIGKILLed with its group at the end if it is still alive; every wait
has a timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import torch

from tests.processes import CONNECT_AT, SCREEN_HOOK, Chromium, Page, children, chromium_path, gone

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "serve" / "tiny.py"
START = 45.0
"""Seconds a process that imports torch may take to be ready on a loaded machine."""


class Proc:
    """A gradtui process in its own session; its output read without blocking."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gradtui", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.out = b""
        self.err = b""
        for stream in (self.process.stdout, self.process.stderr):
            os.set_blocking(stream.fileno(), False)

    def read(self) -> None:
        """Take in what it wrote since."""
        for name, stream in (("out", self.process.stdout), ("err", self.process.stderr)):
            chunk = stream.read()
            if chunk:
                setattr(self, name, getattr(self, name) + chunk)

    def wait_for(self, pattern: bytes, timeout: float) -> re.Match:
        """Its stdout or stderr matching `pattern`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read()
            found = re.search(pattern, self.out) or re.search(pattern, self.err)
            if found:
                return found
            if self.process.poll() is not None:
                self.read()
                break
            time.sleep(0.05)
        raise AssertionError(
            f"{pattern!r} not seen in {timeout}s (exit {self.process.poll()}):\n"
            f"{self.out.decode(errors='replace')}\n{self.err.decode(errors='replace')}"
        )

    def wait_exit(self, timeout: float) -> int:
        """Its exit status, reading its output meanwhile (a full pipe would block it)."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after {timeout}s")
            self.read()
            time.sleep(0.05)
        self.read()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL its whole group if it is still alive; close its pipes."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)
        self.process.stdout.close()
        self.process.stderr.close()


def http_status(url: str) -> tuple[int, str]:
    """GET `url`: its status and body."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


async def websocket_status(url: str, origin: str | None = None) -> int:
    """The status a websocket handshake to `url` gets (101 when accepted), sent with this Origin
    (as a browser sends the origin of the page that opens it), or none."""
    headers = {} if origin is None else {"Origin": origin}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        try:
            async with session.ws_connect(url, headers=headers):
                return 101
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status


def plain_gradient() -> float:
    """x.grad of tiny.py's pass, from a plain run (the oracle)."""
    x = torch.tensor([2.0], requires_grad=True)
    ((x * 3) ** 2).backward()
    return x.grad.item()


async def wait_async(predicate, timeout: float, what: str) -> None:
    """`wait_until` for a coroutine: poll `predicate` (a plain function) until true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def in_the_browser(url: str, serve: Proc) -> dict[str, object]:
    """Load `url` in headless Chromium: the first pause, `s`, then SIGINT to `serve` while the
    page is open. What was seen on the way."""
    binary = chromium_path()
    assert binary, "Debian's chromium is needed: apt-get install -y chromium (.ci/run does it)"
    seen: dict[str, object] = {}
    chromium = Chromium(binary)
    try:
        page = await Page.open(chromium.devtools_port(START))
        try:
            await page.call("Page.enable")
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=SCREEN_HOOK)
            shown = time.monotonic()
            await page.call("Page.navigate", url=url)
            await page.wait_screen(r"paused at #0 PowBackward0", START)
            seen["to the first pause"] = time.monotonic() - shown
            seen["first"] = await page.screen()
            seen["tabs"] = tabs = children(serve.process.pid)
            seen["tab argv"] = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in tabs]
            seen["tab environ"] = [Path(f"/proc/{pid}/environ").read_bytes() for pid in tabs]
            # no click, no focus() of ours: the page focuses the terminal when it loads
            seen["focused"] = await page.evaluate(
                "document.activeElement && document.activeElement.classList.contains('xterm-helper-textarea')"
            )
            pressed = time.monotonic()
            await page.press("s")
            await page.wait_screen(r"paused at #1 MulBackward0", 20)
            seen["step"] = time.monotonic() - pressed
            seen["stepped"] = await page.screen()
            os.kill(serve.process.pid, signal.SIGINT)  # Ctrl-C, with the tab open
            await wait_async(
                lambda: serve.read() or serve.process.poll() is not None,
                20,  # read: a full pipe blocks it
                "gradtui serve to end after SIGINT",
            )
            deadline = time.monotonic() + 10
            while not (closed := await page.evaluate("document.body.classList.contains('-closed')")):
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            seen["closed"] = closed  # the page's "Session ended": its websocket was closed
        finally:
            await page.close()
    finally:
        chromium.close()
    return seen


def test_the_page_shows_the_paused_node_s_steps_a_wrong_token_is_refused_and_ctrl_c_ends_every_tab(tmp_path):
    began = time.monotonic()
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(tmp_path / "runtime")}
    env.pop("GRADTUI_TOKEN", None)
    agent = Proc(["--listen", "127.0.0.1:0", str(SCRIPT)], env)
    serve = Proc(["serve", "--port", "0"], env)
    try:
        base = serve.wait_for(rb"(http://127\.0\.0\.1:\d+/)\?token=([\w-]+)", START)
        url, token = base.group(1).decode(), base.group(2).decode()
        agent.wait_for(rb"agent listening on (\S+) ", START)
        [entry] = (tmp_path / "runtime").iterdir()
        agent_token = json.loads(entry.read_text())["token"]
        ready = time.monotonic() - began

        # refused before any process starts: a wrong token, none, or the agent's own
        for query in ("?token=wrong", "", f"?token={agent_token}"):
            status, body = http_status(url + query)
            assert status == 403, (query, status, body)
        ws = url.replace("http://", "ws://") + "ws/"
        assert asyncio.run(websocket_status(ws + "wrong")) == 403
        assert asyncio.run(websocket_status(ws + agent_token)) == 403
        # the right token from a page of another origin: another site's page in the user's browser
        for origin in ("http://evil.example", url.replace("127.0.0.1", "localhost").rstrip("/"), "null"):
            assert asyncio.run(websocket_status(ws + token, origin)) == 403, origin
        assert children(serve.process.pid) == []

        status, page = http_status(f"{url}?token={token}")
        assert status == 200 and f"/ws/{token}" in page and agent_token not in page

        seen = asyncio.run(in_the_browser(f"{url}?token={token}", serve))
        assert "0/3 ran" in seen["first"] and "▶ 0 PowBackward0" in seen["first"]
        assert seen["focused"], "the page did not focus the terminal: keys would do nothing before a click"
        assert "1/3 ran" in seen["stepped"]  # the header: `s` ran exactly one node
        assert "▶ 1 MulBackward0" in seen["stepped"] and "✓ 0 PowBackward0" in seen["stepped"]
        [tab] = seen["tabs"]  # one tab, one process: the tab client, not the script
        [argv] = seen["tab argv"]
        assert b"gradtui.serve.tab" in argv and agent_token.encode() not in b" ".join(argv)
        assert agent_token.encode() not in seen["tab environ"][0]  # the tab reads it from the runtime file

        # SIGINT ended the server and its tab process; the tab detached, so the script ran on
        # to its end, with the gradient a plain run gives
        assert serve.wait_exit(5) == 0
        assert gone(tab)
        assert seen["closed"], "the page does not say its session ended"
        assert agent.wait_exit(30) == 0
        assert f"x.grad = {plain_gradient()}" in agent.out.decode()
        assert agent_token not in (serve.out + serve.err).decode()
        took = time.monotonic() - began
        print(
            f"\nagent and serve ready {ready:.1f}s, page to the first pause {seen['to the first pause']:.1f}s, "
            f"s to the next node drawn {seen['step']:.2f}s, whole test {took:.1f}s"
        )
    finally:
        for proc in (serve, agent):
            proc.kill()


WINDOW = (1400, 900)
"""The browser window's size in CSS pixels: about 155 columns of the page's terminal."""

PANE_TOPS = re.compile(r"(╭─[^╮]*╮)+")
PANE_BOTTOMS = re.compile(r"(╰─*╯)+")
"""A row of pane borders made of whole panes side by side, nothing after the last one."""


def fills_the_window(screen: str, size: tuple[int, int]) -> str | None:
    """Why the UI on `screen` does not fill a terminal of `size`, or None when it does: the panes'
    top and bottom borders reach its right edge, and nothing from a frame drawn at another
    width is left beside them (the first frames say "starting" in the header's right corner)."""
    columns, rows = size
    lines = screen.split("\n")
    tops = [line for line in lines if line.startswith("╭")]
    bottoms = [line for line in lines if line.startswith("╰")]
    if len(lines) != rows or not tops or not bottoms:
        return f"not the debugger's screen at {columns}x{rows}"
    for row in (tops[0], bottoms[-1]):
        if len(row) != columns or not (PANE_TOPS if row is tops[0] else PANE_BOTTOMS).fullmatch(row):
            return f"a border row is not whole panes {columns} columns wide: {row!r}"
    if "starting" in screen:
        return "a frame drawn at another width is left on the page (its header's 'starting')"
    return None


async def open_at_the_first_pause(page: Page, url: str, agent: Proc) -> dict[str, object]:
    """Open (or reopen) `url`: what the tab shows once the script's first pause is drawn."""
    await page.call("Page.navigate", url=url)
    deadline = time.monotonic() + START
    while True:  # the pause, or a page that says the agent is gone (the script ran on)
        screen = await page.screen()
        if "paused at #" in screen:
            break
        gone = (
            await page.evaluate(
                "document.body ? (document.body.classList.contains('-closed') ? 'Session ended'"
                " : document.body.innerText) : ''"
            )
            or ""
        )
        ended = gone == "Session ended" or "no gradtui agent" in gone
        assert not ended, (
            f"the script did not wait at its pause (agent exit {agent.process.poll()}): the page says {gone!r}"
        )
        assert time.monotonic() < deadline, f"no pause on the page in {START}s; it shows:\n{screen}"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # the frame after the pause's, if any, drawn too
    return {"screen": await page.screen(), "size": await page.terminal_size(), "alive": agent.process.poll() is None}


async def reload_journey(url: str, agent: Proc, serve: Proc) -> list[dict[str, object]]:
    """A window of WINDOW's size opens the page at the script's first pause, then reloads it
    with the websocket saying another size than the page's (a size that changes while the tab
    process starts), then closes it (about:blank) and opens it again; then `c` in the page.
    What each open showed."""
    binary = chromium_path()
    assert binary, "Debian's chromium is needed: apt-get install -y chromium (.ci/run does it)"
    opens: list[dict[str, object]] = []
    chromium = Chromium(binary)
    try:
        page = await Page.open(chromium.devtools_port(START))
        try:
            await page.call("Page.enable")
            await page.call(
                "Emulation.setDeviceMetricsOverride",
                width=WINDOW[0],
                height=WINDOW[1],
                deviceScaleFactor=1,
                mobile=False,
            )
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=SCREEN_HOOK)
            opens.append(await open_at_the_first_pause(page, url, agent))
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=CONNECT_AT % (100, 30))
            opens.append(await open_at_the_first_pause(page, url, agent))  # a reload: the same URL again
            await page.call("Page.navigate", url="about:blank")  # the tab closed
            await wait_async(
                lambda: agent.read() or not children(serve.process.pid), 20, "the closed tab's process to end"
            )
            opens.append(await open_at_the_first_pause(page, url, agent))
            await page.press("c")
            await wait_async(lambda: agent.read() or agent.process.poll() is not None, 30, "the script to end after c")
        finally:
            await page.close()
    finally:
        chromium.close()
    return opens


def test_the_ui_fills_the_window_at_first_paint_and_a_reload_or_close_at_the_first_pause_keeps_it(tmp_path):
    """The tab's first frame is laid out at the page's terminal size (it was drawn at 80 columns
    in the left half of the window, the right half stale), also when the page's size changes
    while the tab process starts; reloading or closing the tab at the first pause leaves the
    script paused there (it ran to its end: the first pause counted as one a `step` made)."""
    env = {**os.environ, "GRADTUI_RUNTIME_DIR": str(tmp_path / "runtime")}
    env.pop("GRADTUI_TOKEN", None)
    agent = Proc(["--listen", "127.0.0.1:0", str(SCRIPT)], env)
    serve = Proc(["serve", "--port", "0"], env)
    try:
        found = serve.wait_for(rb"(http://127\.0\.0\.1:\d+/\?token=[\w-]+)", START)
        agent.wait_for(rb"agent listening on (\S+) ", START)
        opens = asyncio.run(reload_journey(found.group(1).decode(), agent, serve))
        for number, seen in enumerate(opens):
            screen, size = seen["screen"], seen["size"]
            assert seen["alive"], f"open {number}: the agent had ended"
            assert size[0] >= 120, f"open {number}: the page's terminal is only {size}"  # WINDOW is ~155 columns
            # the same pause each time: pass 0, node #0, nothing run
            assert "0/3 ran" in screen and "paused at #0 PowBackward0" in screen and "▶ 0 PowBackward0" in screen, (
                f"open {number}:\n{screen}"
            )
            problem = fills_the_window(screen, size)
            assert problem is None, f"open {number} ({size[0]}x{size[1]}): {problem}:\n{screen}"
        assert agent.wait_exit(30) == 0
        assert f"x.grad = {plain_gradient()}" in agent.out.decode()
    finally:
        for proc in (serve, agent):
            proc.kill()
