"""What the client commands share: `gradtui`, `gradtui attach` and `gradtui replay` take the same
--headless / -c / -x / --theme options and read their commands the same way, and `attach
--headless` and `replay --headless` drive their target (a RemoteTarget, a ReplayTarget) with the
same loop."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gradtui.protocol.commands import Command, parse_file

if TYPE_CHECKING:  # the events import networkx: `gradtui --help` and bad input answer without it
    from gradtui.protocol import events as ev


def add_client_options(
    parser: argparse.ArgumentParser,
    commands_help: str,
    headless_help: str = "no UI: run the commands at the pauses, print",
) -> None:
    """--headless, -c, -x and --theme, as every debugger command spells them."""
    parser.add_argument("--headless", action="store_true", help=headless_help)
    parser.add_argument("-c", dest="commands", action="append", default=[], metavar="CMD", help=commands_help)
    parser.add_argument(
        "-x",
        dest="command_file",
        metavar="FILE",
        help="a file of commands, one per line (# comments allowed); run before -c",
    )
    parser.add_argument("--theme", metavar="NAME", help="a Textual theme for the UI (e.g. textual-dark, nord)")


def read_commands(options: argparse.Namespace, prog: str) -> list[str] | None:
    """The -x file's commands (comments dropped) followed by the -c ones; None once the reason
    the file cannot be read is said on stderr as `prog: ...` (the caller exits with status 2)."""
    read: list[str] = []
    if options.command_file:
        try:
            read = parse_file(options.command_file)
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            print(f"{prog}: cannot read -x {options.command_file}: {why}", file=sys.stderr)
            return None
    return read + list(options.commands)


def recording_opens(path: str, prog: str, cannot: str) -> bool:
    """Does the recording at `path` open? If not, say why on stderr as `prog: cannot PATH: why`
    (`cannot`: "replay", "read"; the caller exits with status 2)."""
    from gradtui.record.reader import open_recording
    from gradtui.wire.target import TargetError

    try:
        open_recording(path).close()
    except TargetError as exc:
        print(f"{prog}: cannot {cannot} {path}: {exc}", file=sys.stderr)
        return False
    return True


async def drive_headless(
    target: Any,
    commands: list[str],
    *,
    prog: str,
    leave_after_pass: bool = False,
    detached: str | None = None,
    status_of: Callable[[ev.ScriptFinished], int] = lambda end: 1 if end.exit_status is None else end.exit_status,
) -> int:
    """Feed `commands` at `target`'s pauses and print its events as `gradtui --headless` does;
    return the exit status.

    The driver detaches when the commands run out at a pause; with `leave_after_pass` also
    when the pass the last command ran on in has finished (a process the client did not start
    may never end). `detached` is printed on detaching. The status is `status_of` the
    ScriptFinished; a target that ends without one went away: status 1.
    """
    from gradtui.clients.headless import HeadlessDriver
    from gradtui.protocol import events as ev
    from gradtui.wire.target import TargetError

    try:
        await target.start()
    except TargetError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    detach = asyncio.Event()
    driver = HeadlessDriver(_Link(target, detach), commands, sys.stdout, sys.stderr)
    if driver.reads_flow and (show_flow := getattr(target, "show_flow", None)) is not None:
        show_flow(True)  # a `flow` among the commands: a live agent computes every pass's flow for it
    status: int | None = None
    async for batch in target.batches():
        for event in batch:
            driver(event)
            if isinstance(event, ev.ScriptFinished):
                status = status_of(event)
            elif (
                leave_after_pass
                and isinstance(event, ev.PassFinished)
                and driver.feeder.started
                and not driver.feeder.commands
                and not driver.feeder.paused
            ):
                detach.set()
            if detach.is_set():
                break  # what follows is not this client's: the same however the wire batched it
        if detach.is_set():
            await target.detach()
            if detached:
                print(detached)
            return 0
        if status is not None:
            break
    close = getattr(target, "close", None)
    if close is not None:
        close()
    if status is not None:
        driver.say_not_run()  # a replay's end comes after the ScriptFinished it told
    if status is None:
        print(f"{prog}: the target went away ({getattr(target, 'bye', None) or 'connection closed'})", file=sys.stderr)
        return 1
    return status


class _Link:
    """What the headless driver needs of its target: submit a command, detach (at the next batch)."""

    def __init__(self, target: Any, detach: asyncio.Event) -> None:
        self._target = target
        self._detach = detach

    def submit(self, command: Command) -> int:
        """Send `command` (parsed by the driver) to the target; its request id."""
        return self._target.submit(command)

    def detach(self) -> None:
        self._detach.set()
