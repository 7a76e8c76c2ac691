"""Headless Chromium driven over the DevTools protocol (CDP), for the browser test.

`Chromium` starts Debian's `chromium --headless` with `--remote-debugging-port=0` in a private
profile, reads the port it picked from its stderr, and `page()` connects to its first tab's
websocket with aiohttp (a dependency of textual-serve already). `Page` sends commands and waits
for their answers, every wait with a timeout.

Reading what the page shows: textual-serve's terminal is xterm.js drawing on a canvas, so the
screen's text is not in the DOM. Before the page's scripts run, `SCREEN_HOOK` puts a setter
for `terminal` on Object.prototype: textual.js's `this.terminal = new Terminal(...)` goes
through it, which leaves the property as it would have been and keeps the xterm Terminal in
`window.__gradtuiTerminal`; `screen()` reads its rows with xterm's public buffer API.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import aiohttp

CDP_TIMEOUT = 30.0
"""Seconds one CDP command may take (a first navigation on a loaded machine is the slowest)."""

SCREEN_HOOK = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
    if (value && typeof value === "object" && "buffer" in value && !window.__gradtuiTerminal) {
      window.__gradtuiTerminal = value;
    }
  },
});
"""

SCREEN_TEXT = """(() => {
  const t = window.__gradtuiTerminal;
  if (!t) return "";
  const rows = [];
  for (let i = 0; i < t.rows; i++) {
    const line = t.buffer.active.getLine(i);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
})()"""

TERMINAL_SIZE = "(() => { const t = window.__gradtuiTerminal; return t ? [t.cols, t.rows] : null; })()"
"""The page's terminal size in cells, as xterm.js fitted it to the window."""

CONNECT_AT = """
(() => {  /* the websocket's URL says WIDTHxHEIGHT, whatever the page measured */
  const Real = window.WebSocket;
  window.WebSocket = class extends Real {
    constructor(url, protocols) {
      const u = new URL(url, location.href);
      if (u.searchParams.has("width")) { u.searchParams.set("width", "%d"); u.searchParams.set("height", "%d"); }
      super(u.toString(), protocols);
    }
  };
})();
"""
"""A script that makes the page open its websocket saying another size than the page's: as when
the page measures its terminal again once the websocket opens (a font loaded in between), the
tab process then starts at one size and gets the page's own a moment later, during its start."""


def chromium_path() -> str | None:
    """The Chromium binary (Debian's `chromium` package), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """A headless Chromium with a private profile; `close` kills it and removes the profile."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="gradtui-chromium-")
        self.process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--window-size=1280,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._err = b""

    def devtools_port(self, timeout: float) -> int:
        """The port Chromium's DevTools listen on (it says so on stderr)."""
        assert self.process.stderr is not None
        os.set_blocking(self.process.stderr.fileno(), False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = self.process.stderr.read()
            if chunk:
                self._err += chunk
            found = re.search(rb"DevTools listening on ws://[^:]+:(\d+)/", self._err)
            if found:
                return int(found.group(1))
            if self.process.poll() is not None:
                raise AssertionError(f"chromium exited {self.process.returncode}: {self._err.decode(errors='replace')}")
            time.sleep(0.05)
        raise AssertionError(
            f"chromium did not open its DevTools port in {timeout}s: {self._err.decode(errors='replace')}"
        )

    def close(self) -> None:
        """Kill Chromium (its whole process group: renderers, GPU process) and drop the profile."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """One tab over CDP: `call` a method and get its result."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._session = session
        self._ws = ws
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Page:
        """Connect to the browser's first page."""
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CDP_TIMEOUT))
        try:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json(content_type=None)
            url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            ws = await session.ws_connect(url, max_msg_size=1 << 26)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def call(self, method: str, **params: Any) -> dict:
        """Send a CDP command; its result (AssertionError on a CDP error)."""
        request = next(self._ids)
        await self._ws.send_str(json.dumps({"id": request, "method": method, "params": params}))

        async def answer() -> dict:
            while True:
                message = await self._ws.receive()
                if message.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"the DevTools connection ended during {method}: {message.type}")
                data = json.loads(message.data)
                if data.get("id") == request:
                    if "error" in data:
                        raise AssertionError(f"{method}: {data['error']}")
                    return data.get("result", {})

        return await asyncio.wait_for(answer(), CDP_TIMEOUT)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screen(self) -> str:
        """The text of the page's terminal, row by row."""
        return await self.evaluate(SCREEN_TEXT) or ""

    async def terminal_size(self) -> tuple[int, int]:
        """The page's terminal size (columns, rows), once the terminal exists."""
        size = await self.evaluate(TERMINAL_SIZE)
        assert size, "the page has no terminal"
        return size[0], size[1]

    async def wait_screen(self, pattern: str, timeout: float) -> re.Match:
        """Poll the terminal until `pattern` is on it; its match."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = await self.screen()
            found = re.search(pattern, text)
            if found:
                return found
            await asyncio.sleep(0.1)
        raise AssertionError(f"{pattern!r} did not appear on the page in {timeout}s; it shows:\n{text}")

    async def press(self, key: str) -> None:
        """A key press (down, char, up) sent to the focused element: the terminal's textarea."""
        await self.call(
            "Input.dispatchKeyEvent",
            type="keyDown",
            key=key,
            text=key,
            unmodifiedText=key,
            code=f"Key{key.upper()}",
            windowsVirtualKeyCode=ord(key.upper()),
        )
        await self.call(
            "Input.dispatchKeyEvent",
            type="keyUp",
            key=key,
            code=f"Key{key.upper()}",
            windowsVirtualKeyCode=ord(key.upper()),
        )

    async def close(self) -> None:
        """Close the DevTools connection."""
        await self._ws.close()
        await self._session.close()
