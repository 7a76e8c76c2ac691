"""`gradtui [--headless] [-c CMD]... [-x FILE] [--report PATH] [--record-all] [SCRIPT [ARGS...]]`."""

from __future__ import annotations

import argparse
import os
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
    parser.add_argument("script", nargs="?", metavar="SCRIPT", help="the script to run (default: the demo)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return parser


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
    report = os.path.abspath(options.report) if options.report else None  # the script may chdir
    problem = report and _unwritable(report)
    if problem:
        print(f"gradtui: cannot write --report {options.report}: {problem}", file=sys.stderr)
        return 2
    if options.headless:
        return run_headless(script, options.args, commands, report, options.record_all)
    from gradtui.ui.app import run_app  # imported late: headless runs never load Textual

    return run_app(script, options.args, commands, report, options.record_all)


def _unwritable(path: str) -> str | None:
    """Why the report could not be written to `path` (asked before the script runs), or None."""
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        return "it is a directory"
    if not os.path.isdir(folder):
        return f"no such directory {folder}"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return "permission denied"
    return None


def run_headless(script: str, args: list[str], commands: list[str], report_path: str | None,
                 record_all: bool = False) -> int:
    """Run `script` with no UI; print to stdout; write the report; return the exit status."""
    from gradtui.core.graph import allow_deep_graphs
    from gradtui.core.report import Report
    from gradtui.core.runner import ScriptRunner
    from gradtui.core.session import Session
    from gradtui.headless import HeadlessDriver

    allow_deep_graphs()  # the script runs on this (the main) thread: freeing a deep graph must not overflow
    out = sys.stdout
    # The flow of a pass that runs unhooked is only ever read by a `flow` command here.
    wants_flow = any(c.split()[:1] == ["flow"] for c in commands)
    session = Session(hook_all_passes=record_all or report_path is not None, flow_unhooked=wants_flow)
    report = Report() if report_path else None
    if report is not None:
        session.add_listener(report)
    session.add_listener(HeadlessDriver(session, commands, out))
    runner = ScriptRunner(script, args, session)
    try:
        status = runner.run()
    finally:
        if report is not None and report_path:
            report.write(report_path)
    return status


if __name__ == "__main__":
    sys.exit(main())
