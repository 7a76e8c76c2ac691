"""The web side of `gradtui serve`: textual-serve's page and websocket behind a token, one tab
client process per websocket, every one of them ended when the server stops.

What is taken from textual-serve as it is: the page template (but its web font, loaded from
Google, is served from textual-serve's own static files, and the terminal is focused on load),
its static files (xterm.js and
Textual's glue), the websocket's message loop (`Server._process_messages`: keys, resizes,
pings) and the framing of the web driver's stdin/stdout (`AppService`). What is changed:
- every route but the static files needs the token (a `?token=` on the page, the last path
  segment of the websocket, `/ws/TOKEN`, as textual.js appends its own `?width=&height=` to
  the websocket's URL); a request without it is refused before any handler runs;
- a websocket opened by a page of another origin is refused (`same_origin`, as Jupyter does):
  a browser lets any site open a websocket to loopback, and sends its own Origin with it;
- the page's URLs are built from the request's own Host, so a tunnel to another local port
  (`ssh -L 9000:127.0.0.1:8000`) works, where textual-serve writes its bind address in them;
- the tab process is started from an argv (no shell) in a session of its own, and is killed
  if it has not ended a few seconds after it was asked to quit;
- no download route (gradtui delivers no files), no access log (it would print the token).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import hdrs, web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from gradtui.serve.agents import AgentChoice, choose

log = logging.getLogger("gradtui.serve")

STOP_TIMEOUT = 5.0
"""Seconds a tab process has to end once asked to (it detaches first), before it is killed."""


@dataclass(frozen=True)
class ServeOptions:
    """What `gradtui serve` was asked for."""

    host: str
    port: int
    token: str
    address: str | None
    """The agent's address as given, or None: each tab takes the newest agent."""


def tab_argv(address: str) -> list[str]:
    """The command of one tab's client process."""
    return [sys.executable, "-m", "gradtui.serve.tab", address]


class TabService(AppService):
    """One browser tab's client process: textual-serve's AppService, started from an argv in
    its own session, stopped with a timeout (then killed, its whole process group)."""

    def __init__(self, argv: list[str], *, stop_timeout: float = STOP_TIMEOUT, **kwargs) -> None:
        super().__init__(" ".join(argv), **kwargs)
        self.argv = argv
        self.stop_timeout = stop_timeout
        self._stopping: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        """Has it been asked to stop (its websocket closed, or the server stops)?"""
        return self._stopping is not None

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The tab process, once started."""
        return self._process

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        self._process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width, height),
            start_new_session=True,
        )
        self._stdin = self._process.stdin
        return self._process

    async def run(self) -> None:
        """Relay the process's output to the browser; once it has ended, close the websocket
        (the page says the session ended) — textual-serve does that only on an `exit` packet."""
        await super().run()
        if self._stopping is not None:
            return  # the server is closing the websocket itself
        try:
            await self.remote_close()
        except (OSError, RuntimeError):
            pass

    async def stop(self) -> None:
        """Ask the app to quit (the tab detaches from the agent) and wait; kill it, its whole
        process group, if it has not ended within `stop_timeout` seconds. Safe to call more
        than once, and concurrently."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        try:
            await asyncio.wait_for(super().stop(), self.stop_timeout)
        except (TimeoutError, OSError, RuntimeError):
            pass
        process = self._process
        if process is None:
            return
        if process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(process.wait(), self.stop_timeout)
        except TimeoutError:
            log.error("tab process %s did not end after SIGKILL", process.pid)


def same_origin(request: web.Request) -> bool:
    """Was the websocket opened by a page of the origin it is served from (the Origin's host
    and port are the request's Host), or by no page at all (no Origin: a program, which can
    send any Origin it likes, so only the token guards against it)? A browser sends the Origin
    of the page that opens a websocket, and lets any site open one to any host, loopback too:
    this is what keeps another site's page from driving the debugger (as Jupyter checks)."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return True
    parsed = urlsplit(origin.strip().lower())
    if parsed.scheme not in ("http", "https") or f"{parsed.scheme}://{parsed.netloc}" != origin.strip().lower():
        return False  # an origin is a scheme and a host, nothing else (no path, no user)
    return "@" not in parsed.netloc and parsed.netloc == request.host.lower()


WEB_FONT = re.compile(r'<link\s[^>]*href="https://fonts\.googleapis\.com/[^"]*"\s*/?>', re.S)
"""textual-serve's template loads Roboto Mono from Google's CDN (offline it fails; online the
visit is told to Google)."""

LOCAL_FONT = """<style>
@font-face { font-family: "Roboto Mono"; font-style: normal; font-weight: 100 700;
  src: url("/static/fonts/RobotoMono-VariableFont_wght.ttf") format("truetype"); }
@font-face { font-family: "Roboto Mono"; font-style: italic; font-weight: 100 700;
  src: url("/static/fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype"); }
</style>"""
"""The same font from textual-serve's own static files (no token needed, nothing leaves the host)."""

FOCUS_TERMINAL = """<script>
(function () {  /* keys go to the debugger at once: focus xterm's input once it exists */
  let tries = 0;
  function focus() {
    const input = document.querySelector("#terminal .xterm-helper-textarea");
    if (input) { input.focus(); return; }
    if (++tries < 600) setTimeout(focus, 50);
  }
  window.addEventListener("load", focus);
})();
</script>"""


def own_page(page: str) -> str:
    """textual-serve's page with the font served from the package and the terminal focused on
    load (keys did nothing until the page was clicked)."""
    page = WEB_FONT.sub(LOCAL_FONT, page)
    return page.replace("</body>", FOCUS_TERMINAL + "\n</body>", 1)


class BrowserServer(Server):
    """textual-serve's Server, with the token guard, tab processes against the agent, and a
    stop that ends them all (see module doc)."""

    def __init__(self, options: ServeOptions, *, choose_agent: Callable[[str | None], AgentChoice | None] = choose):
        super().__init__("gradtui", host=options.host, port=options.port, title="gradtui")
        self.options = options
        self._choose = choose_agent
        self.tabs: set[TabService] = set()
        """The tab processes running now."""
        self.started = 0
        """How many tab processes were ever started (a refused request starts none)."""

    def make_app(self) -> web.Application:
        """The aiohttp application: the page, the websocket, the static files, the guard."""
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes(
            [
                web.get("/", self.handle_index, name="index"),
                web.get("/ws/{token}", self.handle_websocket, name="websocket"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        app.on_shutdown.append(self.on_shutdown)
        return app

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Refuse every request without the token but those for textual-serve's static files."""
        if request.path.startswith("/static/"):
            return await handler(request)
        given = request.match_info.get("token") or request.query.get("token") or ""
        if not hmac.compare_digest(given.encode(), self.options.token.encode()):
            raise web.HTTPForbidden(text="gradtui serve: wrong or missing token: open the URL gradtui serve printed\n")
        return await handler(request)

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """The page: textual-serve's template, its URLs from the request's Host."""
        agent = self._choose(self.options.address)
        if agent is None:
            raise web.HTTPServiceUnavailable(
                text="gradtui serve: no gradtui agent is running: start one with `gradtui --listen :0 train.py` "
                "(or gradtui.listen() in the script), then reload this page\n"
            )
        scheme = "wss" if request.secure else "ws"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{scheme}://{request.host}/ws/{self.options.token}",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": f"gradtui · {os.path.basename(agent.script) or agent.address}"},
        }
        page = aiohttp_jinja2.render_string("app_index.html", request, context)
        response = web.Response(text=own_page(page), content_type="text/html")
        # the page's URL holds the token: not to be cached, nor sent on as a Referer
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One tab: start its client process, relay keys and screen until either side goes."""
        if not same_origin(request):
            raise web.HTTPForbidden(
                text="gradtui serve: refused a websocket opened by a page of another origin "
                f"({request.headers.get(hdrs.ORIGIN)!r}); open the URL gradtui serve printed\n"
            )
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        await websocket.prepare(request)
        # A reload: the page's last websocket closed a moment ago. Its tab detaches first, else the
        # agent would refuse this tab's client as a second one.
        await asyncio.gather(*(tab.stop() for tab in list(self.tabs) if tab.stopping), return_exceptions=True)
        agent = self._choose(self.options.address)
        if agent is None:
            await websocket.close(message=b"no gradtui agent is running")
            return websocket
        service = TabService(
            tab_argv(agent.address),
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.download_manager,
        )
        self.tabs.add(service)
        self.started += 1
        try:
            await service.start(width, height)
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - one broken tab must not end the server
            log.exception("tab failed")
        finally:
            await service.stop()
            self.tabs.discard(service)
            await websocket.close()
        return websocket

    async def on_startup(self, app: web.Application) -> None:
        """Nothing: `gradtui serve` prints its own lines (textual-serve prints a logo)."""

    async def on_shutdown(self, app: web.Application) -> None:
        """Stop every tab process (each detaches from the agent), in parallel."""
        await self.stop_tabs()

    async def stop_tabs(self) -> None:
        """Stop every tab process now."""
        await asyncio.gather(*(tab.stop() for tab in list(self.tabs)), return_exceptions=True)
