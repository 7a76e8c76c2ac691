"""`gradtui export DB --json PATH | --tensorboard DIR`: a recording (`--record DB`) as the
headless JSON report, or as TensorBoard event files.

`--tensorboard DIR` writes one event file into DIR (gradtui.record.tensorboard says what it
holds) with the optional `tensorboard` package (`pip install 'gradtui[tensorboard]'`); without it,
or with a DIR that cannot be made or written, one line on stderr and exit status 2.

`--json PATH`: the same shape as `--report PATH` (the report's shape, docs/recording.md, with every pass's loss and flow, and nodes
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
        prog="gradtui export",
        description="Write a recording made with --record DB in another format.",
        epilog="examples:\n  gradtui export run.db --json report.json\n"
        "  gradtui export run.db --tensorboard runs/gradtui   (then: tensorboard --logdir runs)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("db", metavar="DB", help="the recording (a SQLite database written by --record)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--json", metavar="PATH", help="write the JSON report (the shape of --report PATH) to PATH")
    target.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="write TensorBoard event files into DIR (made if missing): losses, gradient and "
        "weight norms, non-finite counts and gradient histograms per pass; needs "
        "pip install 'gradtui[tensorboard]'",
    )
    return parser


def main(argv: list[str]) -> int:
    """Run `gradtui export`; returns the exit status (0, or 2: bad input or a failed write)."""
    from gradtui.record.export import export_json
    from gradtui.record.reader import damage_text

    options = build_parser().parse_args(argv)
    if not recording_opens(options.db, "gradtui export", "read"):
        return BAD_INPUT
    if options.tensorboard is not None:
        return tensorboard(options.db, options.tensorboard)
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
        print(
            f"gradtui export: {options.db} is damaged: {damage_text(list(done.damage))}; "
            f"--json {options.json} has the rest",
            file=sys.stderr,
        )
        return BAD_INPUT
    return 0


def tensorboard(db: str, folder: str) -> int:
    """`gradtui export DB --tensorboard DIR`; returns the exit status (0, or 2)."""
    from gradtui.record.reader import damage_text
    from gradtui.record.tensorboard import export_tensorboard, writer_missing

    if (why := writer_missing()) is not None:
        print(f"gradtui export: cannot write --tensorboard {folder}: {why}", file=sys.stderr)
        return BAD_INPUT
    if os.path.exists(folder) and not os.path.isdir(folder):
        print(f"gradtui export: cannot write --tensorboard {folder}: it is not a directory", file=sys.stderr)
        return BAD_INPUT
    try:
        done = export_tensorboard(db, folder)
    except OSError as exc:
        print(f"gradtui export: cannot write --tensorboard {folder}: {exc.strerror or exc}", file=sys.stderr)
        return BAD_INPUT
    if done.damage:
        print(
            f"gradtui export: {db} is damaged: {damage_text(list(done.damage))}; --tensorboard {folder} has the rest",
            file=sys.stderr,
        )
        return BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
