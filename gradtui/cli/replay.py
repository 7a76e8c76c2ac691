"""`gradtui replay DB`: the debugger over a recording (`--record DB`), in the UI or headless.

The recording is a `ReplayTarget`: the same UI and the same headless driver as a live run,
read-only. The UI opens on the passes view (unless given commands, which are the debugger's).
Headless, the -c / -x commands are fed at the replay's pauses as `gradtui
--headless` feeds them; when they run out the replay ends. A path that is not a recording
this gradtui reads is one line and exit status 2; so is a damaged recording, once what could be
read of it was replayed (the line names what could not).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys

from gradtui.cli.options import add_client_options, drive_headless, read_commands, recording_opens
from gradtui.record.reader import damage_text
from gradtui.record.replay import ReplayTarget


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui replay`."""
    parser = argparse.ArgumentParser(
        prog="gradtui replay",
        description="Browse a recording made with --record DB: its passes, any recorded pass node by node,\n"
        "step/continue through it (read-only). It opens on the passes view (plots over the\n"
        "passes, a row per pass): enter shows a pass in the debugger, escape the pass where\n"
        "the run stopped, P the passes view again.",
        epilog="examples:\n  gradtui replay run.db\n  gradtui replay run.db --headless -c 'pass 30' -c print",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("db", metavar="DB", help="the recording (a SQLite database written by --record)")
    add_client_options(parser, "a command to run at the pauses (repeatable, in order); `pass N` shows pass N")
    return parser


def ui_target(db: str) -> ReplayTarget:
    """The replay the UI shows: its output pane gets the listed passes' lines in one piece."""
    return ReplayTarget(db, output_in_passes=False)


def settle_heap() -> None:
    """Take what the imports made out of the garbage collector's sight (`gc.freeze`): torch's
    modules are most of a replay's heap, and every full collection walked them again (two of
    them, 0.2-0.3 s each, while a replay opened and drew its passes view). Called once the
    imports are done, before the replay starts; the objects made after it are collected as ever
    (no collection first: it would cost as much as the ones it saves)."""
    gc.freeze()


def main(argv: list[str]) -> int:
    """Run `gradtui replay`; returns the exit status (2: bad input)."""
    options = build_parser().parse_args(argv)
    if not recording_opens(options.db, "gradtui replay", "replay"):
        return 2
    commands = read_commands(options, "gradtui replay")
    if commands is None:
        return 2
    if options.headless:
        target = ReplayTarget(options.db)
        settle_heap()
        # a replay's end is how it ends, not the recorded run's status
        status = asyncio.run(drive_headless(target, commands, prog="gradtui replay", status_of=lambda end: 0))
        return damaged(options.db, target) or status
    from gradtui.ui.run import run_app

    target = ui_target(options.db)
    settle_heap()
    # commands are for the debugger: with none, the replay opens on its passes view
    run_app(None, target=target, commands=commands, theme=options.theme, passes_first=not commands)
    return damaged(options.db, target)  # else 0: leaving a replay is how it ends, not a failure of the run


def damaged(db: str, target: ReplayTarget) -> int:
    """2 with one line on stderr naming what the replay found damaged in `db`; 0 if nothing."""
    if not target.damage:
        return 0
    print(f"gradtui replay: {db} is damaged: {damage_text(target.damage)}; the rest was replayed", file=sys.stderr)
    return 2
