"""gradtui serve's web app in this process (aiohttp's test server, no browser, no agent): the
token guard, the page's URLs, and what is refused before any tab process starts."""

from __future__ import annotations

import re

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from gradtui.serve.agents import AgentChoice
from gradtui.serve.web import BrowserServer, ServeOptions

TOKEN = "serve-token-123"
AGENT = AgentChoice("127.0.0.1:5678", "/home/u/train.py", 42)


async def _client(agent: AgentChoice | None = AGENT) -> tuple[BrowserServer, TestClient]:
    server = BrowserServer(ServeOptions("127.0.0.1", 0, TOKEN, None), choose_agent=lambda address: agent)
    client = TestClient(TestServer(server.make_app()))
    await client.start_server()
    return server, client


@pytest.mark.parametrize(
    "query", ["", "?token=", "?token=serve-token-12", "?token=serve-token-1234", "?tok=serve-token-123"]
)
async def test_the_page_without_the_token_is_refused(query):
    server, client = await _client()
    try:
        answer = await client.get(f"/{query}")
        assert answer.status == 403
        text = await answer.text()
        assert "wrong or missing token" in text and TOKEN not in text
    finally:
        await client.close()
    assert server.started == 0


async def test_a_websocket_without_the_token_is_refused_before_any_tab_process_starts():
    server, client = await _client()
    try:
        for path in ("/ws/wrong", "/ws/", f"/ws/{TOKEN}x", f"/ws?token={TOKEN}"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(path)
            assert refused.value.status in (403, 404), path
        assert server.started == 0 and not server.tabs
    finally:
        await client.close()


async def test_the_page_with_the_token_points_its_websocket_at_the_host_it_was_asked_for():
    """Through `ssh -L 9000:127.0.0.1:8000` the browser asks for localhost:9000: the websocket's
    URL must say that, not the address the server is bound to."""
    server, client = await _client()
    try:
        answer = await client.get(f"/?token={TOKEN}", headers={"Host": "localhost:9000"})
        assert answer.status == 200
        assert answer.headers["Referrer-Policy"] == "no-referrer" and answer.headers["Cache-Control"] == "no-store"
        page = await answer.text()
        assert f'data-session-websocket-url="ws://localhost:9000/ws/{TOKEN}"' in page
        assert "gradtui · train.py" in page  # the agent's script names the page
        assert 'src="/static/js/textual.js"' in page
        script = await client.get("/static/js/textual.js")  # textual-serve's own files need no token
        assert script.status == 200 and "WebSocket" in await script.text()
        # nothing from another host (the font came from Google's CDN): the font from the package
        assert "googleapis" not in page and "https://" not in page.replace("http://www.w3.org/2000/svg", "")
        font = re.search(r'url\("(/static/fonts/RobotoMono-VariableFont_wght\.ttf)"\)', page)
        assert font and (await client.get(font.group(1))).status == 200
        assert ".xterm-helper-textarea" in page and "focus()" in page  # keys work before a click
    finally:
        await client.close()
    assert server.started == 0


async def test_with_no_agent_running_the_page_says_how_to_start_one():
    server, client = await _client(agent=None)
    try:
        answer = await client.get(f"/?token={TOKEN}")
        assert answer.status == 503
        assert "gradtui --listen" in await answer.text()
    finally:
        await client.close()
    assert server.started == 0


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "https://evil.example",
        "null",
        "http://127.0.0.1.evil.example",
        "http://127.0.0.1:1",
        "file://",
        "ws://{host}",
        "http://{host}.evil.example",
        "http://{host}/../x@evil",
    ],
)
async def test_a_websocket_opened_by_a_page_of_another_origin_is_refused_before_any_tab_process_starts(origin):
    """A browser lets any site's page open a websocket to loopback, and says which page did it
    in the Origin header: only the page gradtui serve served may (as Jupyter checks)."""
    server, client = await _client(agent=None)
    try:
        host = f"127.0.0.1:{client.port}"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(f"/ws/{TOKEN}", headers={"Origin": origin.format(host=host)})
        assert refused.value.status == 403
        assert server.started == 0 and not server.tabs
    finally:
        await client.close()


@pytest.mark.parametrize("origin", ["http://{host}", "HTTP://{HOST}", None])
async def test_a_websocket_from_the_page_s_own_origin_or_from_no_page_is_let_in(origin):
    """The page's own origin (its scheme, host and port, as the browser asked for them), or no
    Origin at all (a program, not a page: the token is what guards against it)."""
    server, client = await _client(agent=None)
    try:
        host = f"127.0.0.1:{client.port}"
        headers = {} if origin is None else {"Origin": origin.format(host=host, HOST=host.upper())}
        async with client.ws_connect(f"/ws/{TOKEN}?width=90&height=30", headers=headers) as ws:
            message = await ws.receive(timeout=10)  # let in: no agent, so the server closes it, saying why
            assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            assert ws.close_code is not None and "no gradtui agent" in (message.extra or "")
        with pytest.raises(aiohttp.WSServerHandshakeError):  # and the token is still needed
            await client.ws_connect("/ws/wrong", headers=headers)
    finally:
        await client.close()


async def test_through_a_tunnel_the_page_s_origin_is_the_host_the_browser_asked_for():
    """Through `ssh -L 9000:127.0.0.1:8000` the page is http://localhost:9000: its websocket's
    Origin and Host both say so; an Origin naming the server's own bound address does not."""
    server, client = await _client(agent=None)
    try:
        async with client.ws_connect(
            f"/ws/{TOKEN}", headers={"Host": "localhost:9000", "Origin": "http://localhost:9000"}
        ) as ws:
            await ws.receive(timeout=10)
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(
                f"/ws/{TOKEN}", headers={"Host": "localhost:9000", "Origin": f"http://127.0.0.1:{client.port}"}
            )
        assert refused.value.status == 403
    finally:
        await client.close()
