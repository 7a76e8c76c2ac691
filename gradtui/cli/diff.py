"""`gradtui diff A.db B.db [--pass N] [--rtol R] [--json]`: where two recorded runs part.

Prints the first pass whose losses differ and, in the first pass where anything differs (or
pass N): nodes on one side only (a graph change), the first op in forward order whose value
differs beyond R with both sides' norms and its source line, the first node whose gradient
differs while its forward agrees (a backward-only change), and the largest relative difference
per module (gradtui.record.compare). Exit status as `diff`'s: 0 nothing differs, 1 something
does, 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import linecache
import math
import os
import sqlite3
import sys
from typing import Any

SAME, DIFFERENT, BAD_INPUT = 0, 1, 2

_DIRS = {0: "received gradient", 1: "sent gradient", 2: "output", 3: "saved value"}


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui diff`."""
    parser = argparse.ArgumentParser(
        prog="gradtui diff", description="Where do two recorded runs (--record DB) part?",
        epilog="example:\n  gradtui diff before.db after.db --rtol 1e-4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", metavar="A.db", help="the reference recording")
    parser.add_argument("b", metavar="B.db", help="the recording compared with it")
    parser.add_argument("--pass", dest="index", type=int, metavar="N", help="compare pass N (default: the first that differs)")
    parser.add_argument("--rtol", type=float, default=1e-6, metavar="R",
                        help="relative difference (of norms' scale) above which values differ (default 1e-6)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return parser


def _num(x: float | None) -> float | str | None:
    return x if x is None or math.isfinite(x) else str(x)


def _node(n: Any) -> dict[str, Any]:
    return {"id": n.id, "op": n.op, "source": n.source, "module": n.module, "param": n.param}


def _difference(d: Any) -> dict[str, Any] | None:
    if d is None:
        return None
    return {"node": _node(d.node_a), "node_b": d.node_b.id, "value": _DIRS[d.slot[0]], "slot": d.slot[1],
            "relative": _num(d.relative), "exact": d.exact, "what": d.what,
            "norm_a": _num(d.norms[0]), "norm_b": _num(d.norms[1]), "arguments": d.arguments}


def as_json(c: Any) -> dict[str, Any]:
    """The comparison as JSON-ready data."""
    p = c.inspected
    out: dict[str, Any] = {"a": c.a, "b": c.b, "differs": c.differs, "passes": list(c.passes),
                           "first_loss_difference": c.first_loss, "fingerprints": list(c.fingerprints), "pass": None}
    if p is not None:
        out["pass"] = {"index": p.index, "losses": [[_num(v) for v in side] for side in p.losses],
                       "only_a": [_node(n) for n in p.only_a], "only_b": [_node(n) for n in p.only_b],
                       "matched": p.matched, "forward": _difference(p.forward),
                       "backward_only": _difference(p.backward_only),
                       "modules": [{"module": m, "forward": _num(f), "gradient": _num(g)} for m, f, g in p.modules],
                       "flow_differs": p.flow_differs}
    return out


def _source_line(source: str | None, folder: str) -> str:
    """The text of `file.py:LINE` if the file is found beside the recording or here."""
    if not source or ":" not in source:
        return ""
    name, _, line = source.rpartition(":")
    for base in (folder, os.getcwd()):
        text = linecache.getline(os.path.join(base, name), int(line) if line.isdigit() else 0).strip()
        if text:
            return text
    return ""


def _describe(label: str, d: Any, folder: str) -> list[str]:
    n = d.node_a
    lines = [f"  {label}: #{n.id} {n.where()} (B: #{d.node_b.id})"]
    if d.arguments:
        lines.append(f"    arguments: {d.arguments}")
    if d.norms != (None, None):
        how = "exact" if d.exact else "estimated from fingerprints"
        what = f" ({d.what})" if d.what else ""
        lines.append(f"    {_DIRS[d.slot[0]]} {d.slot[1]}{what}: relative difference {d.relative:.3g} ({how}); "
                     f"norm A {_fmt(d.norms[0])}, B {_fmt(d.norms[1])}")
    if text := _source_line(n.source, folder):
        lines.append(f"    {n.source}: {text}")
    return lines


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def as_text(c: Any) -> str:
    """The comparison for a terminal."""
    folder = os.path.dirname(os.path.abspath(c.script or c.a))
    lines = [f"A {c.a} ({c.passes[0]} passes) · B {c.b} ({c.passes[1]} passes)"]
    if not all(c.fingerprints):
        lines.append("note: a recording without fingerprints (an older gradtui): gradients compared by norm only")
    lines.append("losses agree" if c.first_loss is None else f"losses first differ in pass {c.first_loss}")
    p = c.inspected
    if p is None:
        lines.append("no pass differs" if not c.differs else "the recordings have different numbers of passes")
        return "\n".join(lines)
    shown = lambda side: ", ".join(_fmt(v) for v in side)  # noqa: E731
    lines.append(f"pass {p.index}: loss A {shown(p.losses[0])}, B {shown(p.losses[1])} · {p.matched} nodes matched")
    for label, nodes in (("only in A", p.only_a), ("only in B", p.only_b)):
        if nodes:
            lines.append(f"  graph change, {label}: " + ", ".join(f"#{n.id} {n.where()}" for n in nodes[:10])
                         + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else ""))
    lines += _describe("first forward difference", p.forward, folder) if p.forward else ["  forward agrees"]
    if p.backward_only:
        lines += _describe("first backward-only difference", p.backward_only, folder)
    if p.modules:
        lines.append("  module                          forward    gradient")
        lines += [f"  {m:<30} {f:>9.3g} {g:>11.3g}" for m, f, g in p.modules]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run `gradtui diff`; returns the exit status (0 same, 1 different, 2 bad input)."""
    from gradtui.record.compare import BadInput, compare

    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return SAME if exc.code == 0 else BAD_INPUT
    for path in (options.a, options.b):
        if not os.path.isfile(path):
            print(f"gradtui diff: no such recording: {path}", file=sys.stderr)
            return BAD_INPUT
    if not options.rtol >= 0:
        print(f"gradtui diff: --rtol must be at least 0: {options.rtol}", file=sys.stderr)
        return BAD_INPUT
    try:
        result = compare(options.a, options.b, index=options.index, rtol=options.rtol)
    except BadInput as exc:
        print(f"gradtui diff: {exc}", file=sys.stderr)
        return BAD_INPUT
    except sqlite3.DatabaseError as exc:  # damage found past the open: still bad input, one line
        print(f"gradtui diff: {options.a} or {options.b} is damaged: SQLite cannot read it ({exc})", file=sys.stderr)
        return BAD_INPUT
    print(json.dumps(as_json(result), indent=1) if options.json else as_text(result))
    return DIFFERENT if result.differs else SAME
