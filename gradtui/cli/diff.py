"""`gradtui diff A.db B.db [--pass N] [--rtol R] [--json]`: where two recorded runs part.

Compares what both recordings hold (gradtui.record.compare) and says what it could not: first
what was not compared (no fingerprints on a side, passes on one side only, a file matched under
another name or with lines moved), then the first pass whose losses differ (both sides' values),
and, in the first pass where anything differs (or pass N): nodes on one side only (a graph
change), the first op in forward order whose value differs beyond R with both sides' norms and
its source line (only where both sides have fingerprints: else it says the forward was not
compared), the first node whose gradient differs while its forward agrees (a backward-only
change), where the gradients part, the parameters whose gradient norms differ, and the largest
relative difference per module (— where nothing was compared, a count of values on one side
only, never `inf`). Exit status as `diff`'s: 0 everything compared agrees, 1 something differs
(and it is printed), 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import linecache
import math
import os
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradtui.record.compare import Comparison, Difference, FlowDifference, ModuleRow, Node

SAME, DIFFERENT, BAD_INPUT = 0, 1, 2

_DIRS = {0: "received gradient", 1: "sent gradient", 2: "output", 3: "saved value"}


def build_parser() -> argparse.ArgumentParser:
    """The parser of `gradtui diff`."""
    parser = argparse.ArgumentParser(
        prog="gradtui diff",
        description="Where do two recorded runs (--record DB) part?",
        epilog="example:\n  gradtui diff before.db after.db --rtol 1e-4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", metavar="A.db", help="the reference recording")
    parser.add_argument("b", metavar="B.db", help="the recording compared with it")
    parser.add_argument(
        "--pass", dest="index", type=int, metavar="N", help="compare pass N (default: the first that differs)"
    )
    parser.add_argument(
        "--rtol",
        type=float,
        default=1e-6,
        metavar="R",
        help="relative difference (of norms' scale) above which values differ (default 1e-6)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return parser


def _num(x: float | None) -> float | str | None:
    return x if x is None or math.isfinite(x) else str(x)


def _node(n: Node) -> dict[str, Any]:
    return {"id": n.id, "op": n.op, "source": n.source, "module": n.module, "param": n.param}


def _difference(d: Difference | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "node": _node(d.node_a),
        "node_b": d.node_b.id,
        "source_b": d.node_b.source,
        "value": _DIRS[d.slot[0]],
        "slot": d.slot[1],
        "relative": None if d.one_side else _num(d.relative),
        "one_side_only": d.one_side,
        "exact": d.exact,
        "lower_bound": d.bound,
        "what": d.what,
        "norm_a": _num(d.norms[0]),
        "norm_b": _num(d.norms[1]),
        "arguments": d.arguments,
    }


def _sides(flags: tuple[bool, bool]) -> str:
    """Which of A and B lack something: `A`, `B`, `A and B` ('' if neither)."""
    return " and ".join(name for name, has in zip("AB", flags) if not has)


def _flow(f: FlowDifference) -> dict[str, Any]:
    return {
        "name": f.name,
        "norm_a": _num(f.norm_a),
        "norm_b": _num(f.norm_b),
        "relative": None if f.norm_a is None or f.norm_b is None else _num(f.relative),
    }


def as_json(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data: what differs, what was compared and what was not (`notes`)."""
    p = c.inspected
    out: dict[str, Any] = {
        "a": c.a,
        "b": c.b,
        "differs": c.differs,
        "passes": list(c.passes),
        "first_loss_difference": c.first_loss,
        "fingerprints": list(c.fingerprints),
        "files": [
            {"a": f.a, "b": f.b, "how": f.how, "lines_moved": f.shifted} for f in (c.files.moved() if c.files else [])
        ],
        "notes": notes(c),
        "pass": None,
    }
    if c.first_loss_values is not None:
        out["first_loss_values"] = [[_num(v) for v in side] for side in c.first_loss_values]
    if p is not None:
        out["pass"] = {
            "index": p.index,
            "losses": [[_num(v) for v in side] for side in p.losses],
            "per_node": list(p.per_node),
            "fingerprints": list(p.fingerprints),
            "forward_compared": p.forward_compared,
            "only_a": [_node(n) for n in p.only_a],
            "only_b": [_node(n) for n in p.only_b],
            "matched": p.matched,
            "forward": _difference(p.forward),
            "backward_only": _difference(p.backward_only),
            "gradient": _difference(p.gradient),
            "gradient_parts": p.gradient_parts,
            "one_side_only": p.one_side,
            "modules": [
                {
                    "module": m.module,
                    "forward": _num(m.forward),
                    "gradient": _num(m.gradient),
                    "one_side_only": m.one_side,
                }
                for m in p.modules
            ],
            "flow": [_flow(f) for f in p.flow],
            "flow_differs": p.flow_differs,
        }
    return out


def notes(c: Comparison) -> list[str]:
    """What could not be compared, and what was matched other than by name, one line each."""
    out = []
    if not all(c.fingerprints):
        lacking = _sides(c.fingerprints)
        out.append(
            f"no fingerprints in {lacking} (recorded without --fingerprints): forward values not compared; "
            "gradients compared by their recorded statistics (values up to 64 elements, else norm, min, max "
            "and mean: a lower bound of the difference)"
        )
    if c.passes[0] != c.passes[1]:
        more, n = ("A", c.passes[0]) if c.passes[0] > c.passes[1] else ("B", c.passes[1])
        first = min(c.passes)
        out.append(
            f"passes {first}-{n - 1} only in {more}: not compared"
            if n - first > 1
            else f"pass {first} only in {more}: not compared"
        )
    if c.per_node_passes == 0:
        out.append("no pass recorded per node in both: nodes not compared (losses and gradient norms only)")
    for side, n in zip("AB", c.per_node_one_side):
        if n:
            out.append(
                f"{n} pass{'es' if n > 1 else ''} recorded per node in {side} only: "
                "nodes not compared there (losses and gradient norms only)"
            )
    if c.files is not None:
        for f in c.files.moved():
            text = f"{f.a} in A is {f.b} in B ({f.how})" if f.a != f.b else f"{f.a}"
            if f.shifted:
                text += f"; {f.shifted} of its lines that ran moved (matched by content)"
            out.append("file matched: " + text)
        if c.files.only_a or c.files.only_b:
            out.append(
                "files with no counterpart (their nodes match none): "
                + ", ".join([*(f"{n} (A)" for n in c.files.only_a), *(f"{n} (B)" for n in c.files.only_b)])
            )
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


def _how_far(d: Difference) -> str:
    """`relative difference 0.012 (exact)`, or why there is no number (never `inf`)."""
    if d.one_side:
        return "recorded on one side only"
    if not math.isfinite(d.relative):
        return "not comparable: the shapes differ, or it is not finite on one side"
    how = (
        "exact"
        if d.exact
        else "at least: from recorded norm, min, max, mean"
        if d.bound
        else "estimated from fingerprints"
    )
    return f"relative difference {d.relative:.3g} ({how})"


def _describe(label: str, d: Difference, folders: tuple[str, str]) -> list[str]:
    n, m = d.node_a, d.node_b
    there = f" at {m.source}" if m.source and m.source != n.source else ""
    lines = [f"  {label}: #{n.id} {n.where()} (B: #{m.id}{there})"]
    if d.arguments:
        lines.append(f"    arguments: {d.arguments}")
    if d.norms != (None, None):
        what = f" ({d.what})" if d.what else ""
        lines.append(
            f"    {_DIRS[d.slot[0]]} {d.slot[1]}{what}: {_how_far(d)}; norm A {_fmt(d.norms[0])}, B {_fmt(d.norms[1])}"
        )
    if text := _source_line(n.source, folders[0]):
        lines.append(f"    {n.source}: {text}")
    if there and (text := _source_line(m.source, folders[1])):
        lines.append(f"    {m.source} (B): {text}")
    return lines


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _cell(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def module_table(rows: list[ModuleRow]) -> list[str]:
    """The per-module table: its first column as wide as the longest name (— : nothing compared)."""
    width = max(len("module"), *(len(r.module) for r in rows))
    sided = any(r.one_side for r in rows)
    head = f"  {'module':<{width}}  {'forward':>9}  {'gradient':>9}" + ("  one side only" if sided else "")
    return [head] + [
        f"  {r.module:<{width}}  {_cell(r.forward):>9}  {_cell(r.gradient):>9}"
        + (f"  {r.one_side or '':>13}" if sided else "")
        for r in rows
    ]


def _flow_text(f: FlowDifference) -> str:
    """`fc1.weight A 0.44, B 0.43 (relative 0.02)`, or `fc1.weight in B only (0.44)`."""
    if f.norm_a is None or f.norm_b is None:
        side, norm = ("A", f.norm_a) if f.norm_b is None else ("B", f.norm_b)
        return f"{f.name} in {side} only ({_fmt(norm)})"
    return f"{f.name} A {_fmt(f.norm_a)}, B {_fmt(f.norm_b)} (relative {f.relative:.3g})"


def _passes(n: int) -> str:
    return f"{n} pass" if n == 1 else f"{n} passes"


def _losses(side: tuple[float | None, ...]) -> str:
    return ", ".join(_fmt(v) for v in side) or "-"


def as_text(c: Comparison) -> str:
    """The comparison for a terminal: every difference that makes it differ, and what was not compared."""
    folders = (os.path.dirname(os.path.abspath(c.script or c.a)), os.path.dirname(os.path.abspath(c.script_b or c.b)))
    lines = [f"A {c.a} ({_passes(c.passes[0])}) · B {c.b} ({_passes(c.passes[1])})"]
    lines += [f"note: {n}" for n in notes(c)]
    if c.first_loss is None:
        lines.append(f"losses agree ({_passes(min(c.passes))} compared)")
    else:
        la, lb = c.first_loss_values or ((), ())
        lines.append(f"losses first differ in pass {c.first_loss}: A {_losses(la)}, B {_losses(lb)}")
    p = c.inspected
    if p is None:
        lines.append(
            f"no pass differs ({_passes(min(c.passes))} compared by losses and gradient "
            f"norms, {c.per_node_passes} of them node by node)"
            if not c.differs
            else "no pass both hold differs"
        )
        return "\n".join(lines)
    lines.append(
        f"pass {p.index}: loss A {_losses(p.losses[0])}, B {_losses(p.losses[1])}"
        + (f" · {p.matched} nodes matched" if p.compared_per_node else "")
    )
    if not p.compared_per_node:
        lines.append(
            f"  nodes not compared: no per-node data of this pass in {_sides(p.per_node)} "
            "(losses and gradient norms only)"
        )
    for label, nodes in (("only in A", p.only_a), ("only in B", p.only_b)):
        if nodes:
            lines.append(
                f"  graph change, {label}: "
                + ", ".join(f"#{n.id} {n.where()}" for n in nodes[:10])
                + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")
            )
    unmatched = len(p.only_a) + len(p.only_b)
    scope = f"{p.matched} nodes matched" + (f"; {unmatched} on one side only not compared" if unmatched else "")
    if p.compared_per_node and p.matched == 0:
        lines.append("  no node matched: nothing compared node by node")
    elif p.compared_per_node:
        if not p.forward_compared:
            lines.append(f"  forward not compared (no fingerprints of this pass in {_sides(p.fingerprints)})")
        elif p.forward:
            lines += _describe("first forward difference", p.forward, folders)
        else:
            lines.append(f"  forward agrees ({scope})")
        if p.backward_only:
            lines += _describe("first backward-only difference", p.backward_only, folders)
        if p.gradient is not None and (not p.forward_compared or (p.forward is None and p.backward_only is None)):
            lines += _describe(
                "gradients part at (what it received agrees, what it sent differs)"
                if p.gradient_parts
                else "largest gradient difference",
                p.gradient,
                folders,
            )
        if not p.gradients_differ and p.gradient is None:
            lines.append(f"  gradients agree ({scope})")
        if p.one_side:
            lines.append(f"  {p.one_side} values of matched nodes recorded on one side only")
    if p.flow:
        shown = "; ".join(_flow_text(f) for f in p.flow[:5])
        lines.append(
            f"  gradient norms after the pass differ: {shown}"
            + (f" and {len(p.flow) - 5} more" if len(p.flow) > 5 else "")
        )
    else:
        lines.append("  gradient norms after the pass agree")
    if p.modules:
        lines += module_table(p.modules)
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
