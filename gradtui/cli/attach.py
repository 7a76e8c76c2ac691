"""`gradtui attach [ADDRESS]`: a client (the UI, or headless) to an agent that is listening.

The agent is one started with `gradtui --listen` or `gradtui.listen()`; its runtime file gives
its address and token. With no ADDRESS, the only running agent is chosen (several: they are
listed). Headless, the -c / -x commands are fed at the pauses as `gradtui --headless` does;
when they have run out and the pass the last one ran on in has finished (or a pause is left
with nothing to do), the client detaches: the script runs on, its breakpoints still armed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from gradtui.cli.options import add_client_options, drive_headless, read_commands
from gradtui.wire.runtime import AgentEntry, RuntimeDirError, parse_address, running_agents

DETACHED = "(gradtui) detached: the script runs on; its breakpoints stay armed for the next client"


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui attach`."""
    parser = argparse.ArgumentParser(
        prog="gradtui attach",
        description="Attach to a running gradtui agent (gradtui --listen, gradtui.listen()).",
        epilog="examples:\n  gradtui --listen :0 train.py &\n  gradtui attach\n"
        "  gradtui attach 127.0.0.1:5678 --headless -c step -c print -c continue",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "address",
        nargs="?",
        metavar="ADDRESS",
        help="HOST:PORT of the agent (default: the only running agent of this user)",
    )
    parser.add_argument("--token", help="the agent's token (default: read from its runtime file)")
    add_client_options(parser, "a command to run at the pauses (repeatable, in order)")
    return parser


def _find(address: str | None, token: str | None) -> AgentEntry | str:
    """The agent to attach to, or why there is none to choose (an ADDRESS given with its token
    needs no runtime file: a runtime folder that cannot be used is then no reason to stop)."""
    try:
        agents = running_agents()
    except RuntimeDirError as exc:
        if address is None or not token:
            return str(exc)
        agents = []
    if address is None:
        if not agents:
            return "no running agent of this user: start one with `gradtui --listen :0 script.py`"
        if len(agents) > 1:
            listed = "\n".join(f"  {a.address}  pid {a.pid}  {a.script}" for a in agents)
            return f"several agents are running; choose one by its address:\n{listed}"
        return agents[0]
    host, port = parse_address(address)
    for agent in agents:
        if parse_address(agent.address) == (host, port):
            return agent
    return AgentEntry(address, "", 0, "")


def main(argv: list[str]) -> int:
    """Run `gradtui attach`; returns the exit status."""
    options = build_parser().parse_args(argv)
    try:
        found = _find(options.address, options.token or os.environ.get("GRADTUI_TOKEN"))
    except ValueError as exc:
        print(f"gradtui attach: {exc}", file=sys.stderr)
        return 2
    if isinstance(found, str):
        print(f"gradtui attach: {found}", file=sys.stderr)
        return 2
    token = options.token or os.environ.get("GRADTUI_TOKEN") or found.token
    if not token:
        print(
            f"gradtui attach: no runtime file names an agent at {found.address}: give its token with --token",
            file=sys.stderr,
        )
        return 2
    commands = read_commands(options, "gradtui attach")
    if commands is None:
        return 2
    from gradtui.wire.client import RemoteTarget  # imports the wire and networkx: only once the input is good

    target = RemoteTarget(token, address=parse_address(found.address), script=found.script)
    if options.headless:
        return asyncio.run(
            drive_headless(target, commands, prog="gradtui attach", leave_after_pass=True, detached=DETACHED)
        )
    from gradtui.ui.run import run_app

    return run_app(None, target=target, commands=commands, theme=options.theme)
