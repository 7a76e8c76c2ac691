"""`gradtui serve [ADDRESS] [--host H] [--port P] [--token T]`: serve the UI in a browser.

Binds to loopback unless `--host` says otherwise (with a warning: the page is plain HTTP), picks
a random token unless given one, prints the URL (and how to tunnel to it over SSH), and serves
until Ctrl-C (SIGINT, SIGTERM or SIGHUP), which stops every tab process it started; the agent
and its script run on (each tab detaches).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import socket
import sys

from aiohttp import web

from gradtui.serve.agents import choose
from gradtui.serve.web import BrowserServer, ServeOptions

DEFAULT_PORT = 8000
SHUTDOWN_TIMEOUT = 10.0
"""Seconds aiohttp lets the handlers finish when the server stops (the tabs stop in less)."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui serve`."""
    parser = argparse.ArgumentParser(
        prog="gradtui serve",
        description="Serve the gradtui UI in a browser: each tab is a client "
        "(`gradtui attach`) of a running agent (gradtui --listen, gradtui.listen()).",
        epilog="examples:\n  gradtui --listen :0 train.py &\n  gradtui serve\n"
        "  gradtui serve 127.0.0.1:5678 --port 8080\n"
        "on a remote box: run gradtui serve there, then on your machine\n"
        "  ssh -N -L 8000:127.0.0.1:8000 BOX   and open the URL it printed",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "address",
        nargs="?",
        metavar="ADDRESS",
        help="HOST:PORT of the agent (default: the newest running agent of this user, chosen when each tab opens)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to bind (default loopback; another one serves plain HTTP to the network)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    parser.add_argument("--token", help="the token the URL must carry (default: a random one)")
    return parser


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def main(argv: list[str]) -> int:
    """Run `gradtui serve`; returns the exit status."""
    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        print(f"gradtui serve: port {args.port} is out of range 0-65535", file=sys.stderr)
        return 2
    if args.token is not None and not args.token.strip():
        print("gradtui serve: --token is empty", file=sys.stderr)
        return 2
    options = ServeOptions(args.host, args.port, args.token or secrets.token_urlsafe(18), args.address)
    try:
        return asyncio.run(serve(options))
    except OSError as exc:
        print(f"gradtui serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1


async def serve(options: ServeOptions) -> int:
    """Serve until a stop signal; then stop every tab process and the server."""
    server = BrowserServer(options)
    runner = web.AppRunner(server.make_app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    try:
        site = web.TCPSite(runner, options.host, options.port)
        await site.start()
        port = runner.addresses[0][1]
        _say_where(options, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        print(f"gradtui serve: stopping ({len(server.tabs)} tab(s) open)", flush=True)
        await server.stop_tabs()
    finally:
        await runner.cleanup()
    return 0


def _say_where(options: ServeOptions, port: int) -> None:
    """Print the URL, the agent, and how to reach it from another machine."""
    host = options.host if options.host not in ("", "0.0.0.0", "::") else socket.gethostname()
    shown = f"[{host}]" if ":" in host else host
    agent = choose(options.address)
    if options.address is not None:
        which = f"the agent at {options.address}"
    elif agent is None:
        which = "the newest agent when a tab opens (none is running yet: start one with gradtui --listen :0 train.py)"
    else:
        which = f"the newest agent when a tab opens (now {agent.address}, {agent.script or 'pid ' + str(agent.pid)})"
    if not _is_loopback(options.host):
        print(
            f"gradtui serve: warning: serving on {options.host}, not loopback: anyone who can reach port {port} "
            "and has the URL drives the debugger, over plain HTTP; prefer loopback and an SSH tunnel",
            file=sys.stderr,
        )
    print(
        f"gradtui serve: the UI of {which}, at\n"
        f"  http://{shown}:{port}/?token={options.token}\n"
        f"on another machine: ssh -N -L {port}:127.0.0.1:{port} {socket.gethostname()}   then open that URL there\n"
        "each tab is a client of the agent (one tab at a time); Ctrl-C stops serving, the script runs on",
        flush=True,
    )
