"""`gradtui export DB --json PATH`: a recording (`--record DB`) as the headless JSON report.

The same shape as `--report PATH` (docs/recording.md's, with every pass's loss and flow, and nodes
where the recording has per-node data), streamed a pass at a time and compact. A DB that is
not a recording this gradtui reads, or a PATH that cannot be written, is one line on stderr
and exit status 2; so is a write that fails midway (what was written is a valid document), and
a recording that is damaged (what could be read is written: the line names what could not).
"""

from __future__ import annotations

import argparse
import os
import sys

from gradtui.cli.options import recording_opens

BAD_INPUT = 2
"""Exit status of an export that could not read its recording or write its file."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui export`."""
    parser = argparse.ArgumentParser(
        prog="gradtui export", description="Write a recording made with --record DB in another format.",
        epilog="example:\n  gradtui export run.db --json report.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", metavar="DB", help="the recording (a SQLite database written by --record)")
    parser.add_argument("--json", metavar="PATH", required=True,
                        help="write the JSON report (the shape of --report PATH) to PATH")
    return parser


def main(argv: list[str]) -> int:
    """Run `gradtui export`; returns the exit status (0, or 2: bad input or a failed write)."""
    from gradtui.record.export import export_json
    from gradtui.record.reader import damage_text

    options = build_parser().parse_args(argv)
    if not recording_opens(options.db, "gradtui export", "read"):
        return BAD_INPUT
    if os.path.abspath(options.json) == os.path.abspath(options.db):
        print(f"gradtui export: --json {options.json} is the recording itself", file=sys.stderr)
        return BAD_INPUT
    if os.path.isdir(options.json):
        print(f"gradtui export: cannot write --json {options.json}: it is a directory", file=sys.stderr)
        return BAD_INPUT
    try:
        done = export_json(options.db, options.json)
    except OSError as exc:
        print(f"gradtui export: cannot write --json {options.json}: {exc.strerror or exc}", file=sys.stderr)
        return BAD_INPUT
    if done.failed:
        print(f"gradtui export: could not write --json {options.json}: {done.failed}", file=sys.stderr)
        return BAD_INPUT
    if done.damage:
        print(f"gradtui export: {options.db} is damaged: {damage_text(list(done.damage))}; "
              f"--json {options.json} has the rest", file=sys.stderr)
        return BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
