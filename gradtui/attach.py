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

from gradtui.agent.main import parse_address
from gradtui.agent.runtime import AgentEntry, running_agents
from gradtui.core import events as ev
from gradtui.core.commands import parse_file
from gradtui.wire.client import RemoteTarget
from gradtui.wire.target import TargetError


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui attach`."""
    parser = argparse.ArgumentParser(
        prog="gradtui attach", description="Attach to a running gradtui agent (gradtui --listen, gradtui.listen()).",
        epilog="examples:\n  gradtui --listen :0 train.py &\n  gradtui attach\n"
               "  gradtui attach 127.0.0.1:5678 --headless -c step -c print -c continue",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address", nargs="?", metavar="ADDRESS",
                        help="HOST:PORT of the agent (default: the only running agent of this user)")
    parser.add_argument("--token", help="the agent's token (default: read from its runtime file)")
    parser.add_argument("--headless", action="store_true", help="no UI: run the commands at the pauses, print")
    parser.add_argument("-c", dest="commands", action="append", default=[], metavar="CMD",
                        help="a command to run at the pauses (repeatable, in order)")
    parser.add_argument("-x", dest="command_file", metavar="FILE", help="a file of commands, run before -c")
    parser.add_argument("--theme", metavar="NAME", help="a Textual theme for the UI")
    return parser


def _find(address: str | None) -> AgentEntry | str:
    """The agent to attach to, or why there is none to choose."""
    agents = running_agents()
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
        found = _find(options.address)
    except ValueError as exc:
        print(f"gradtui attach: {exc}", file=sys.stderr)
        return 2
    if isinstance(found, str):
        print(f"gradtui attach: {found}", file=sys.stderr)
        return 2
    token = options.token or os.environ.get("GRADTUI_TOKEN") or found.token
    if not token:
        print(f"gradtui attach: no runtime file names an agent at {found.address}: give its token with --token",
              file=sys.stderr)
        return 2
    commands = parse_file(options.command_file) if options.command_file else []
    commands += options.commands
    target = RemoteTarget(token, address=parse_address(found.address), script=found.script)
    if options.headless:
        return asyncio.run(attach_headless(target, commands))
    from gradtui.ui.app import run_app

    return run_app(None, target=target, commands=commands, theme=options.theme)


async def attach_headless(target: RemoteTarget, commands: list[str]) -> int:
    """Feed `commands` at the remote agent's pauses and print its events, as --headless does."""
    from gradtui.headless import HeadlessDriver

    try:
        await target.start()
    except TargetError as exc:
        print(f"gradtui attach: {exc}", file=sys.stderr)
        return 2
    detach = asyncio.Event()
    link = _Link(target, detach)
    driver = HeadlessDriver(link, commands, sys.stdout, sys.stderr)
    status: int | None = None
    async for batch in target.batches():
        for event in batch:
            driver(event)
            if isinstance(event, ev.ScriptFinished):
                status = event.exit_status
            elif (isinstance(event, ev.PassFinished) and driver.feeder.started and not driver.feeder.commands
                  and not driver.feeder.paused):
                detach.set()  # the last command ran on to the end of its pass: the process is not ours to wait for
        if detach.is_set():
            await target.detach()
            print("(gradtui) detached: the script runs on; its breakpoints stay armed for the next client")
            return 0
    target.close()
    if status is None:
        print(f"gradtui attach: the agent went away ({target.bye or 'connection closed'})", file=sys.stderr)
        return 1
    return status


class _Link:
    """What the headless driver needs of its target: submit a line, detach."""

    def __init__(self, target: RemoteTarget, detach: asyncio.Event) -> None:
        self._target = target
        self._detach = detach

    def submit(self, text: str) -> int:
        return self._target.submit(text)

    def detach(self) -> None:
        self._detach.set()
