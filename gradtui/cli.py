"""`gradtui [--headless] [-c CMD]... [-x FILE] [--report PATH] [--record DB [--record-every N | --flight K]]
[--record-all] [SCRIPT [ARGS...]]`."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from importlib import resources

from gradtui.core.commands import parse_file

DESCRIPTION = """\
Debug the backward passes of a PyTorch script, unmodified.

gradtui runs SCRIPT as `python SCRIPT ARGS` would. When it calls backward() or
torch.autograd.grad(), gradtui captures the autograd graph and pauses before the
first node, so you can step node by node, see each gradient as it arrives, and
scale, zero, clip or replace it live. Without SCRIPT it runs a bundled demo.
"""

EPILOG = """\
commands (for -c, -x and the UI's command bar):
  step (s) | continue (c) | finish (f) | break SPEC (b) | breakpoints | delete N|all
  scale F | zero | clip N | set EXPR | print [EXPR] (p) | why NAME | flow | help | quit (q)
break specs: OP (AddmmBackward0) | NAME (z, fc.weight) | #ID | nan | norm>X | pass N
  | loss>X | loss nan | FILE.py:LINE (model.py:42) | module PATH (encoder.layers.*.attn)

examples:
  gradtui train.py --epochs 3
  gradtui --headless -c 'break nan' -c continue --report report.json train.py
  gradtui --headless -c 'break pass 400' -c continue -c 'print' train.py

Passes that nothing can stop in (running on, no breakpoint that could match them) run
unhooked at plain speed, with only their loss and gradient flow recorded; with --report
or --record-all every pass is recorded node by node.
"""


def demo_path() -> str:
    """Path of the demo script shipped inside the package."""
    return str(resources.files("gradtui") / "examples" / "demo.py")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used by the tests and for --help)."""
    parser = argparse.ArgumentParser(
        prog="gradtui", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--headless", action="store_true",
                        help="no UI: run the commands at the pauses, print each pause and result")
    parser.add_argument("-c", dest="commands", action="append", default=[], metavar="CMD",
                        help="a command to run (repeatable, in order; like pdb -c)")
    parser.add_argument("-x", dest="command_file", metavar="FILE",
                        help="a file of commands, one per line (# comments allowed); run before -c")
    parser.add_argument("--report", metavar="PATH",
                        help="write a JSON report of every pass to PATH (every pass is then recorded)")
    parser.add_argument("--record-all", action="store_true",
                        help="record every pass node by node, even one nothing can stop in (by default such "
                             "passes run unhooked at plain speed, with only their loss and gradient flow)")
    parser.add_argument("--record", metavar="DB",
                        help="(headless) record the run into a SQLite database: every pass's loss and gradient flow, "
                             "and per-node gradient statistics of the passes that were hooked")
    parser.add_argument("--record-every", type=_positive, metavar="N",
                        help="with --record: hook every pass (light statistics) and keep per-node data of every N-th")
    parser.add_argument("--flight", type=_positive, metavar="K",
                        help="with --record: keep the last K passes' per-node statistics in memory and write them "
                             "only when a breakpoint hits, the script fails or is quit")
    parser.add_argument("script", nargs="?", metavar="SCRIPT", help="the script to run (default: the demo)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return parser


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gradtui` console script; returns the exit status."""
    parser = build_parser()
    options = parser.parse_args(argv)
    script = options.script or demo_path()
    if not os.path.isfile(script):
        print(f"gradtui: no such script: {script}", file=sys.stderr)
        return 2
    commands = []
    if options.command_file:
        try:
            commands += parse_file(options.command_file)
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            print(f"gradtui: cannot read -x {options.command_file}: {why}", file=sys.stderr)
            return 2
    commands += options.commands
    report = os.path.abspath(options.report) if options.report is not None else None  # the script may chdir
    problem = report is not None and _unwritable(options.report)
    if problem:
        print(f"gradtui: cannot write --report {options.report}: {problem}", file=sys.stderr)
        return 2
    record = os.path.abspath(options.record) if options.record is not None else None
    if record is None and (options.record_every or options.flight):
        print("gradtui: --record-every and --flight need --record DB", file=sys.stderr)
        return 2
    if options.record_every and options.flight:
        print("gradtui: use either --record-every or --flight, not both", file=sys.stderr)
        return 2
    if record is not None:
        from gradtui.record.store import check_path

        if options.record == "":
            problem = "empty path"
        else:
            problem = "it is the --report path" if record == report else check_path(record)
        if problem:
            print(f"gradtui: cannot record to {options.record}: {problem}", file=sys.stderr)
            return 2
        if not options.headless:
            print("gradtui: --record works with --headless for now", file=sys.stderr)
            return 2
    if options.headless:
        return run_headless(script, options.args, commands, report, options.record_all,
                            record_path=record, record_every=options.record_every, flight=options.flight)
    from gradtui.ui.app import run_app  # imported late: headless runs never load Textual

    return run_app(script, options.args, commands, report, options.record_all)


def _unwritable(given: str) -> str | None:
    """Why the report could not be written to `given` (asked before the script runs), or None.
    A missing folder is created."""
    if given == "":
        return "empty path"
    path = os.path.abspath(given)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        return "it is a directory"
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        return f"cannot create the folder {folder}: {exc.strerror}"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return "permission denied"
    return None


OUTPUT_FAILED = 2
"""Exit status of a run whose script succeeded but whose report or recording could not be written."""


def run_headless(script: str, args: list[str], commands: list[str], report_path: str | None,
                 record_all: bool = False, *, record_path: str | None = None, record_every: int | None = None,
                 flight: int | None = None) -> int:
    """Run `script` with no UI; print to stdout; stream the report and the recording as passes
    end; return the exit status (OUTPUT_FAILED if the script succeeded but they could not be written)."""
    from gradtui.core.graph import allow_deep_graphs
    from gradtui.core.report import JsonStream, Report
    from gradtui.core.runner import ScriptRunner
    from gradtui.core.session import Session
    from gradtui.headless import HeadlessDriver

    allow_deep_graphs()  # the script runs on this (the main) thread: freeing a deep graph must not overflow
    out = sys.stdout
    # The flow of a pass that runs unhooked is only ever read by a `flow` command here (or recorded).
    wants_flow = record_path is not None or any(c.split()[:1] == ["flow"] for c in commands)
    # Per-node data of every pass for a recording: every pass hooked, with light statistics.
    every_pass = record_path is not None and (record_every is not None or flight is not None)
    session = Session(hook_all_passes=record_all or report_path is not None or every_pass, flow_unhooked=wants_flow,
                      full_stats=not every_pass or record_all or report_path is not None)
    report = recorder = None
    try:
        if report_path is not None:
            report = Report(JsonStream(report_path))
        if record_path is not None:
            from gradtui.record.store import Recorder

            recorder = Recorder(record_path, every=record_every, flight=flight)
    except (OSError, sqlite3.Error) as exc:
        which = f"--report {report_path}" if report is None else f"--record {record_path}"
        print(f"gradtui: cannot write {which}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        if report is not None:
            report.close()
        return OUTPUT_FAILED
    for listener in (report, recorder):
        if listener is not None:
            session.add_listener(listener)
    session.add_listener(HeadlessDriver(session, commands, out))
    runner = ScriptRunner(script, args, session)
    status = 1
    try:
        status = runner.run()
    finally:
        failures = []
        if report is not None and (why := report.close()):
            failures.append(f"gradtui: could not write the report {report_path}: {why}")
        if recorder is not None:
            recorder.close()
            if recorder.failed:
                failures.append(f"gradtui: the recording {record_path} stopped: {recorder.failed}")
        for line in failures:
            print(line, file=sys.stderr)
    return OUTPUT_FAILED if failures and status == 0 else status


if __name__ == "__main__":
    sys.exit(main())
