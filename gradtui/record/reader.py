"""Read a recording back: the run, its passes, a pass's graph with its statistics, the flow,
hits, edits and output, as plain data (the same types the events carry where there is one).

`Recording(path)` opens the database without writing to it; a recording whose run was killed
mid-pass opens too (SQLite replays its write-ahead log), and holds every pass that had ended.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from array import array
from dataclasses import dataclass
from typing import Any, NamedTuple

import networkx as nx

from gradtui.model.events import ParamFlow
from gradtui.model.stats import Stats
from gradtui.record import schema


@functools.lru_cache(maxsize=8192)
def _tuple(text: str) -> tuple:
    """A JSON list column (shape, labels, next) as a tuple: a run repeats the same few texts."""
    return tuple(json.loads(text))


def _num(x: Any) -> float | None:
    """A REAL column back as a float ('nan' was written for NaN)."""
    return float("nan") if x == "nan" else x


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run: what was run, with what, and how it ended (None while it was still running)."""

    script: str | None
    argv: tuple[str, ...]
    torch: str | None
    python: str | None
    started: float | None
    finished: float | None
    exit_status: int | None
    error: str | None
    quit: bool
    how: str | None
    per_node: str | None
    """Which passes have per-node data: "hooked", "every N" or "flight K"."""


@dataclass(frozen=True, slots=True)
class PassInfo:
    """One pass as recorded (always: loss, flow summary, timing; per-node data if `per_node`)."""

    index: int
    call: str
    call_text: str
    call_site: str
    losses: tuple[float | None, ...]
    hooked: bool
    per_node: bool
    nodes: int
    done: int
    error: str | None
    failed_node: int | None
    started: float
    """Seconds after the run started."""
    wall: float
    grad_norm: float | None
    """The global gradient norm over the flow's leaves."""
    nonfinite: int
    nested: tuple[dict[str, Any], ...]


_PASS_COLUMNS = ("idx, call, call_text, call_site, losses, hooked, per_node, nodes, done, error, failed_node, "
                 "started, wall, grad_norm, nonfinite, nested")


def _pass_info(r: tuple) -> PassInfo:
    return PassInfo(r[0], r[1], r[2], r[3], tuple(_num(v) for v in json.loads(r[4])), bool(r[5]), bool(r[6]),
                    r[7], r[8], r[9], r[10], r[11], r[12], _num(r[13]), r[14] or 0,
                    tuple(json.loads(r[15])) if r[15] else ())


class PassSpan(NamedTuple):
    """The first and last index of a recording's passes (None: no pass ended)."""

    first: int | None
    last: int | None

    @property
    def count(self) -> int:
        """Passes in the span: those that ended (a pass ends or the run does; the session
        numbers them from 0 on)."""
        return 0 if self.first is None or self.last is None else self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class PassFigures:
    """What the plots over passes need of one pass: its losses, global gradient norm,
    non-finite leaves and each leaf's gradient norm."""

    index: int
    losses: tuple[float | None, ...]
    grad_norm: float | None
    nonfinite: int
    norms: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class NodeStats:
    """What flowed into a node (`grad_outputs`) and what it sent on (`grad_inputs`), per slot."""

    grad_outputs: tuple[Stats | None, ...]
    grad_inputs: tuple[Stats | None, ...]


@dataclass(frozen=True, slots=True)
class OutputLine:
    """Text the script wrote, after pass `pass_index` had started (None: before the first)."""

    pass_index: int | None
    stream: str
    text: str


class OutputStory(NamedTuple):
    """The output lines a replay tells (see `Recording.output_story`)."""

    before: list[OutputLine]
    """Lines written before the first pass started."""
    earlier: list[OutputLine]
    """The last lines of the passes not listed."""
    told: list[OutputLine]
    """The last lines of the listed passes (and of any later pass that never ended)."""


class Recording:
    """A recording opened for reading (see the module doc); raises schema.NotARecording."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            self.version = schema.check_version(self._db)
        except sqlite3.DatabaseError as exc:
            raise schema.NotARecording(f"not a gradtui recording ({exc})") from None

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self) -> RunInfo:
        """The run's row (an empty RunInfo if the script never started)."""
        row = self._db.execute("SELECT script, argv, torch, python, started, finished, exit_status, error, quit, "
                               "how, per_node FROM run WHERE id = 1").fetchone()
        if row is None:
            return RunInfo(None, (), None, None, None, None, None, None, False, None, None)
        return RunInfo(row[0], tuple(json.loads(row[1] or "[]")), row[2], row[3], row[4], row[5], row[6], row[7],
                       bool(row[8]), row[9], row[10])

    def passes(self) -> list[PassInfo]:
        """Every pass that ended, in order (a whole table: the open path reads `last_passes`)."""
        return [_pass_info(r) for r in self._db.execute(f"SELECT {_PASS_COLUMNS} FROM passes ORDER BY idx")]

    def span(self) -> PassSpan:
        """The first and last pass index: the two ends of the table's B-tree (not a count, which
        reads every page; min and max in one statement would too)."""
        first = self._db.execute("SELECT min(idx) FROM passes").fetchone()[0]
        last = self._db.execute("SELECT max(idx) FROM passes").fetchone()[0]
        return PassSpan(first, last)

    def pass_info(self, index: int) -> PassInfo | None:
        """Pass `index`, or None if it never ended (a primary-key lookup)."""
        row = self._db.execute(f"SELECT {_PASS_COLUMNS} FROM passes WHERE idx = ?", (index,)).fetchone()
        return None if row is None else _pass_info(row)

    def last_passes(self, count: int) -> list[PassInfo]:
        """The last `count` passes that ended, in order."""
        rows = self._db.execute(f"SELECT {_PASS_COLUMNS} FROM passes ORDER BY idx DESC LIMIT ?", (count,)).fetchall()
        return [_pass_info(r) for r in reversed(rows)]

    def with_nodes(self) -> list[int]:
        """The passes with per-node data, in order."""
        return [r[0] for r in self._db.execute("SELECT idx FROM passes WHERE per_node = 1 ORDER BY idx")]

    def walkable(self, after: int | None = None, *, last: bool = False) -> int | None:
        """The first pass after `after` (or the `last` pass) with per-node data and a node that
        ran, or None: the passes a replay can walk."""
        where = "per_node = 1" + ("" if after is None else " AND idx > ?")
        rows = self._db.execute(f"SELECT idx FROM passes WHERE {where} AND EXISTS (SELECT 1 FROM nodes "
                                f"WHERE nodes.pass = passes.idx AND ord IS NOT NULL) "
                                f"ORDER BY idx {'DESC' if last else 'ASC'} LIMIT 1",
                                () if after is None else (after,)).fetchone()
        return None if rows is None else rows[0]

    def figures(self, limit: int) -> list[PassFigures]:
        """The figures of at most `limit` passes spread evenly over the run, of the first `limit`
        passes with a non-finite gradient and of the last pass, in order, each with its leaves'
        gradient norms (a long run's plot is a terminal wide). Primary-key and index lookups
        only: the same few queries whatever the recording's size."""
        first, last = self.span()
        if first is None or last is None:
            return []
        stride = max(1, -(-(last - first + 1) // max(1, limit)))
        wanted = set(range(first, last + 1, stride)) | {last}
        wanted.update(r[0] for r in self._db.execute(
            "SELECT idx FROM passes WHERE nonfinite > 0 ORDER BY idx LIMIT ?", (limit,)))
        keys = json.dumps(sorted(wanted))
        rows = self._db.execute("SELECT idx, losses, grad_norm, nonfinite FROM passes "
                                "WHERE idx IN (SELECT value FROM json_each(?)) ORDER BY idx", (keys,)).fetchall()
        norms: dict[int, list[tuple[str, float | None]]] = {}
        for index, name, norm in self._db.execute(
                "SELECT pass, name, grad_norm FROM flow WHERE pass IN (SELECT value FROM json_each(?)) "
                "ORDER BY pass, rank", (keys,)):
            norms.setdefault(index, []).append((name, _num(norm)))
        return [PassFigures(i, tuple(_num(v) for v in json.loads(losses)), _num(g), bad or 0, tuple(norms.get(i, ())))
                for i, losses, g, bad in rows]

    def graph(self, index: int) -> nx.DiGraph:
        """Pass `index`'s graph with the node attributes of `gradtui.engine.graph` that were recorded
        (name, kind, labels, param, source, module, next, seq) and `order`; empty without per-node data."""
        graph = nx.DiGraph()
        rows = self._db.execute("SELECT id, op, kind, labels, param, source, module, ord, next, seq FROM nodes "
                                "WHERE pass = ? ORDER BY id", (index,)).fetchall()
        for i, op, kind, labels, param, source, module, order, nxt, seq in rows:
            graph.add_node(i, name=op, kind=kind, labels=_tuple(labels) if labels else (), param=param,
                           source=source, module=module, order=order, next=_tuple(nxt), seq=seq + (1 << 64) if seq < 0 else seq)
        for i, _, _, _, _, _, _, _, nxt, _ in rows:
            for slot, target in enumerate(_tuple(nxt)):
                if target is not None and not graph.has_edge(i, target):
                    graph.add_edge(i, target, slot=slot)
        return graph

    def walk(self, index: int) -> list[int]:
        """The nodes of pass `index` that ran, in engine order (empty without per-node data)."""
        rows = self._db.execute("SELECT id FROM nodes WHERE pass = ? AND ord IS NOT NULL ORDER BY ord", (index,))
        return [r[0] for r in rows]

    def stats(self, index: int) -> dict[int, NodeStats]:
        """Per node of pass `index` that ran: its incoming and outgoing statistics."""
        found: dict[int, tuple[list[Stats | None], list[Stats | None]]] = {}
        rows = self._db.execute("SELECT node, dir, slot, shape, dtype, device, norm, min, max, mean, nonfinite, vals "
                                "FROM grads WHERE pass = ? ORDER BY node, dir, slot", (index,))
        for node, direction, slot, shape, dtype, device, norm, lo, hi, mean, nonfinite, vals in rows:
            lists = found.setdefault(node, ([], []))[direction]
            while len(lists) < slot:
                lists.append(None)
            if shape is None:
                lists.append(None)
                continue
            values = None if vals is None else tuple(array("d", vals))
            lists.append(Stats(_tuple(shape), dtype, device, _num(norm), _num(lo), _num(hi), _num(mean),
                               nonfinite, values, values[:8] if values else ()))
        return {node: NodeStats(tuple(a), tuple(b)) for node, (a, b) in found.items()}

    def flows(self, first: int) -> dict[int, tuple[ParamFlow, ...]]:
        """The gradient flow of every pass from `first` on, in one query."""
        found: dict[int, list[ParamFlow]] = {}
        rows = self._db.execute("SELECT pass, name, node, shape, grad_norm, weight_norm, ratio, nonfinite FROM flow "
                                "WHERE pass >= ? ORDER BY pass, rank", (first,))
        for index, name, node, shape, g, w, r, nf in rows:
            found.setdefault(index, []).append(ParamFlow(name, node, _tuple(shape), _num(g), _num(w),
                                                         _num(r), nf))
        return {index: tuple(flow) for index, flow in found.items()}

    def flow(self, index: int) -> tuple[ParamFlow, ...]:
        """Pass `index`'s gradient flow, in the order the session sorted it."""
        rows = self._db.execute("SELECT name, node, shape, grad_norm, weight_norm, ratio, nonfinite FROM flow "
                                "WHERE pass = ? ORDER BY rank", (index,))
        return tuple(ParamFlow(name, node, _tuple(shape), _num(g), _num(w), _num(r), nf)
                     for name, node, shape, g, w, r, nf in rows)

    def hits(self, index: int | None = None) -> list[dict[str, Any]]:
        """Breakpoint hits in order (of pass `index` only, if given): breakpoint number, spec, pass, node."""
        where, args = ("", ()) if index is None else (" WHERE pass = ?", (index,))
        return [{"breakpoint": b, "spec": s, "pass": p, "node": n}
                for p, n, b, s in self._db.execute(f"SELECT pass, node, breakpoint, spec FROM hits{where} ORDER BY seq",
                                                   args)]

    def edits(self) -> list[dict[str, Any]]:
        """Edits in order: pass, node, command, and the statistics before and after (JSON dicts)."""
        return [{"pass": p, "node": n, "command": c, "before": json.loads(b), "after": json.loads(a)}
                for p, n, c, b, a in self._db.execute("SELECT pass, node, command, before, after FROM edits ORDER BY seq")]

    def output(self) -> list[OutputLine]:
        """The script's output, in order."""
        return self._lines("ORDER BY seq", ())

    def output_story(self, first: int | None, limit: int) -> OutputStory:
        """The output a replay tells when it lists the passes from `first` on (None: none ended):
        the lines before the first pass, the last `limit` lines of the passes before `first`, and
        the last `limit` lines from pass `first` on; each at most `limit` lines, in order."""
        prefix = self._lines("WHERE pass IS NULL ORDER BY seq LIMIT ?", (limit,))
        if first is None:
            return OutputStory(prefix, [], self._tail("pass IS NOT NULL", (), limit))
        return OutputStory(prefix, self._tail("pass < ?", (first,), limit), self._tail("pass >= ?", (first,), limit))

    def _lines(self, clause: str, args: tuple) -> list[OutputLine]:
        return [OutputLine(p, s, t) for p, s, t in self._db.execute(f"SELECT pass, stream, text FROM output {clause}",
                                                                    args)]

    def _tail(self, where: str, args: tuple, limit: int) -> list[OutputLine]:
        """The last `limit` lines `where` says, by pass then line (the order of `output_by_pass`,
        so no sort; a pass's lines are written after those of the passes before it)."""
        rows = self._db.execute(f"SELECT pass, stream, text FROM output WHERE {where} "
                                f"ORDER BY pass DESC, seq DESC LIMIT ?", (*args, limit)).fetchall()
        return [OutputLine(p, s, t) for p, s, t in reversed(rows)]
