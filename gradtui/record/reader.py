"""Read a recording back: the run, its passes, a pass's graph with its statistics, the flow,
hits, edits and output, as plain data (the same types the events carry where there is one).

`Recording(path)` opens the database without writing to it; a recording whose run was killed
mid-pass opens too (SQLite replays its write-ahead log), and holds every pass that had ended.

A damaged recording opens when its `passes` table can be read at all: a missing table, a page
SQLite cannot read or a row whose cells do not hold what the schema says (`rows`) is named in
`Recording.damage` and skipped; every read answers with what is still readable.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

import networkx as nx

from gradtui.protocol.events import CallSiteVariables, GradEdited, ParamFlow, SourceText
from gradtui.protocol.nodes import INFO
from gradtui.protocol.stats import Stats
from gradtui.record import rows, schema
from gradtui.record.infos import (
    NODE_COLUMNS,
    PASS_COLUMNS,
    NodeStats,
    OutputLine,
    OutputStory,
    PassFigures,
    PassInfo,
    PassSpan,
    RunInfo,
    node_row_of,
    pass_info_of,
    run_info_of,
)
from gradtui.record.rows import BadRow
from gradtui.wire.codec import from_wire
from gradtui.wire.target import TargetError

TABLES = ("run", "passes", "nodes", "grads", "flow", "hits", "edits", "output")
"""The tables a recording has (besides schema_version); without `passes` nothing can be read."""

LATER_TABLES = ("told",)
"""Tables added within a schema version (schema's doc): a file without one is not damaged."""


class Recording:
    """A recording opened for reading (see the module doc); raises schema.NotARecording."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.damage: list[str] = []
        """What was found damaged so far, a few words each, in the order found (no repeats)."""
        self.unreadable: dict[int, str] = {}
        """Pass index -> why its row of `passes` cannot be read (the pass is skipped)."""
        try:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
            self.version = schema.check_version(self._db)
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            raise schema.NotARecording(schema.unreadable(exc)) from None
        if "passes" not in tables:
            raise schema.NotARecording("damaged: its passes table is missing")
        self._missing = {t for t in (*TABLES, *LATER_TABLES) if t not in tables}
        self._grads_select: dict[str, str] = {}
        for table in TABLES:
            if table in self._missing:
                self._note(f"the {table} table is missing")

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading, damage named and skipped -------------------------------------------------

    def _note(self, what: str) -> None:
        what = "".join(c if c.isprintable() else "?" for c in what)  # a damaged cell's text: one line
        if what not in self.damage:
            self.damage.append(what)

    def _query(self, sql: str, args: tuple, what: str, table: str) -> list[tuple]:
        """The rows of `sql`; [] with the damage noted when SQLite cannot read them (`what`
        names them; a missing `table` was noted when the file was opened)."""
        if table in self._missing:
            return []
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            self._note(f"{what} cannot be read ({exc})")
            return []

    def _grad_columns(self, prefix: str = "") -> str:
        """The select list of a gradient's statistics in this file (schema.grad_columns: NULL for a
        statistic added after it was made), read once."""
        if prefix not in self._grads_select:
            try:
                self._grads_select[prefix] = schema.grad_columns(self._db, prefix)
            except sqlite3.DatabaseError:  # the query that follows names the damage
                self._grads_select[prefix] = ", ".join(prefix + c.name for c in schema.GRAD_STATS)
        return self._grads_select[prefix]

    def _decoded(self, found: list[tuple], decode, what) -> list:
        """Each row of `found` decoded; a row that does not decode is noted (`what(row)` names
        it) and skipped."""
        out = []
        for row in found:
            try:
                out.append(decode(row))
            except BadRow as exc:
                self._note(f"{what(row)} cannot be read ({exc})")
        return out

    def _passes(self, found: list[tuple]) -> list[PassInfo]:
        out = []
        for row in found:
            try:
                out.append(pass_info_of(row))
            except BadRow as exc:
                self.unreadable[row[0]] = str(exc)
                self._note(f"pass {row[0]}'s row cannot be read ({exc}): it is skipped")
        return out

    def run(self) -> RunInfo:
        """The run's row (an empty RunInfo if the script never started, or if it cannot be read)."""
        found = self._query(
            "SELECT script, argv, torch, python, started, finished, exit_status, error, quit, "
            "how, per_node FROM run WHERE id = 1",
            (),
            "the run's row",
            "run",
        )
        decoded = self._decoded(found, run_info_of, lambda _: "the run's row")
        return decoded[0] if decoded else RunInfo(None, (), None, None, None, None, None, None, False, None, None)

    def passes(self) -> list[PassInfo]:
        """Every pass that ended, in order (a whole table: the open path reads `last_passes`)."""
        return self._passes(self._query(f"SELECT {PASS_COLUMNS} FROM passes ORDER BY idx", (), "the passes", "passes"))

    def span(self) -> PassSpan:
        """The first and last pass index: the two ends of the table's B-tree (not a count, which
        reads every page; min and max in one statement would too)."""
        first = self._query("SELECT min(idx) FROM passes", (), "the passes", "passes")
        last = self._query("SELECT max(idx) FROM passes", (), "the passes", "passes")
        return PassSpan(first[0][0] if first else None, last[0][0] if last else None)

    def pass_info(self, index: int) -> PassInfo | None:
        """Pass `index`, or None if it never ended or cannot be read (a primary-key lookup)."""
        found = self._passes(
            self._query(f"SELECT {PASS_COLUMNS} FROM passes WHERE idx = ?", (index,), f"pass {index}'s row", "passes")
        )
        return found[0] if found else None

    def last_passes(self, count: int) -> list[PassInfo]:
        """The last `count` passes that ended, in order (less any whose row cannot be read)."""
        found = self._query(
            f"SELECT {PASS_COLUMNS} FROM passes ORDER BY idx DESC LIMIT ?", (count,), "the last passes", "passes"
        )
        return self._passes(found[::-1])

    def with_nodes(self) -> list[int]:
        """The passes with per-node data, in order."""
        return [
            r[0]
            for r in self._query("SELECT idx FROM passes WHERE per_node = 1 ORDER BY idx", (), "the passes", "passes")
        ]

    def walkable(self, after: int | None = None, *, last: bool = False, before: int | None = None) -> int | None:
        """The first pass after `after` (or the `last` one, before `before` if given) with
        per-node data and a node that ran, or None: the passes a replay can walk."""
        args: tuple[int, ...]
        where, args = "per_node = 1", ()
        if after is not None:
            where, args = where + " AND idx > ?", (after,)
        if before is not None:
            where, args = where + " AND idx < ?", (*args, before)
        found = self._query(
            f"SELECT idx FROM passes WHERE {where} AND EXISTS (SELECT 1 FROM nodes "
            f"WHERE nodes.pass = passes.idx AND ord IS NOT NULL) "
            f"ORDER BY idx {'DESC' if last else 'ASC'} LIMIT 1",
            args,
            "the passes",
            "nodes",
        )
        return found[0][0] if found and type(found[0][0]) is int else None

    def figures(self, limit: int) -> list[PassFigures]:
        """The figures of at most `limit` passes spread evenly over the run, of the first `limit`
        passes with a non-finite gradient and of the last pass, in order, each with its leaves'
        gradient norms and start (a long run's plot is a terminal wide). Primary-key and index lookups
        only: the same few queries whatever the recording's size."""
        first, last = self.span()
        if type(first) is not int or type(last) is not int:
            return []
        stride = max(1, -(-(last - first + 1) // max(1, limit)))
        wanted = set(range(first, last + 1, stride)) | {last}
        wanted.update(
            r[0]
            for r in self._query(
                "SELECT idx FROM passes WHERE nonfinite > 0 ORDER BY idx LIMIT ?", (limit,), "the passes", "passes"
            )
        )
        keys = json.dumps(sorted(wanted))
        found = self._query(
            "SELECT idx, losses, grad_norm, nonfinite, started FROM passes "
            "WHERE idx IN (SELECT value FROM json_each(?)) ORDER BY idx",
            (keys,),
            "the passes",
            "passes",
        )
        norms: dict[int, list[tuple[str, float | None]]] = {}
        for index, name, norm in self._decoded(
            self._query(
                "SELECT pass, name, grad_norm FROM flow WHERE pass IN (SELECT value FROM json_each(?)) "
                "ORDER BY pass, rank",
                (keys,),
                "the flow",
                "flow",
            ),
            lambda r: (r[0], rows.text(r[1], "name", False), rows.real(r[2], "grad_norm")),
            lambda r: f"the flow of pass {r[0]}",
        ):
            norms.setdefault(index, []).append((name, norm))

        def figure(r: tuple) -> PassFigures:
            return PassFigures(
                r[0],
                rows.losses(r[1]),
                rows.real(r[2], "grad_norm"),
                rows.integer(r[3], "nonfinite", null=True) or 0,
                tuple(norms.get(r[0], ())),
                rows.real(r[4], "started"),
            )

        return self._decoded(found, figure, lambda r: f"pass {r[0]}'s row")

    def param_stats(self, name: str, passes: list[int]) -> dict[int, Stats]:
        """Pass index -> the statistics of the gradient parameter `name`'s accumulator received,
        for those of `passes` with per-node data (the distributions over passes: one parameter's,
        when it is looked at; the flow's name index, then primary-key lookups)."""
        found = self._query(
            f"SELECT f.pass, g.node, g.dir, g.slot, {self._grad_columns('g.')} FROM flow f JOIN grads g ON g.pass = f.pass AND "
            "g.node = f.node AND g.dir = 0 AND g.slot = 0 WHERE f.name = ? AND f.pass IN "
            "(SELECT value FROM json_each(?)) ORDER BY f.pass",
            (name, json.dumps(sorted(passes))),
            f"the gradients of {name}",
            "grads",
        )
        out: dict[int, Stats] = {}
        for index, (_, _, _, stats) in self._decoded(
            found, lambda r: (r[0], rows.stats(r[1:], 1)), lambda r: f"a gradient of {name} in pass {r[0]}"
        ):
            if stats is not None:
                out[index] = stats
        return out

    def graph(self, index: int, folder: str | None = None) -> nx.DiGraph:
        """Pass `index`'s graph, each node's `"info"` the NodeInfo that was recorded (name, kind,
        labels, param, source, module, next, seq; `path` and `line` from the source, relative to
        `folder`, when given; nothing saved) and its `"order"`; empty without per-node data. A
        node whose row cannot be read is left out, and so are the edges to it."""
        graph = nx.DiGraph()
        found = self._query(
            f"SELECT {NODE_COLUMNS} FROM nodes WHERE pass = ? ORDER BY id",
            (index,),
            f"the nodes of pass {index}",
            "nodes",
        )
        nodes = self._decoded(found, lambda row: node_row_of(row, folder), lambda r: f"node {r[0]} of pass {index}")
        graph.add_nodes_from((node.id, {INFO: node.info, "order": node.order}) for node in nodes)
        for node in nodes:
            for slot, target in enumerate(node.info.next):
                if target is not None and target in graph and not graph.has_edge(node.id, target):
                    graph.add_edge(node.id, target, slot=slot)
        return graph

    def walk(self, index: int) -> list[int]:
        """The nodes of pass `index` that ran, in engine order (empty without per-node data)."""
        return ran_in_order(self.graph(index))

    def stats(self, index: int) -> dict[int, NodeStats]:
        """Per node of pass `index` that ran: its incoming and outgoing statistics."""
        found: dict[int, tuple[list[Stats | None], list[Stats | None]]] = {}
        grads = self._query(
            f"SELECT node, dir, slot, {self._grad_columns()} FROM grads WHERE pass = ? ORDER BY node, dir, slot",
            (index,),
            f"the gradients of pass {index}",
            "grads",
        )
        slots = len(grads)
        for node, direction, slot, stats in self._decoded(
            grads, lambda row: rows.stats(row, slots), lambda r: f"a gradient of node {r[0]} of pass {index}"
        ):
            lists = found.setdefault(node, ([], []))[direction]
            while len(lists) < slot:
                lists.append(None)
            if len(lists) == slot:
                lists.append(stats)
        return {node: NodeStats(tuple(a), tuple(b)) for node, (a, b) in found.items()}

    def flows(self, first: int) -> dict[int, tuple[ParamFlow, ...]]:
        """The gradient flow of every pass from `first` on, in one query."""
        found: dict[int, list[ParamFlow]] = {}
        flow = self._query(
            "SELECT pass, name, node, shape, grad_norm, weight_norm, ratio, nonfinite FROM flow "
            "WHERE pass >= ? ORDER BY pass, rank",
            (first,),
            "the flow",
            "flow",
        )
        for index, row in self._decoded(flow, lambda r: (r[0], rows.flow(r[1:])), lambda r: f"the flow of pass {r[0]}"):
            found.setdefault(index, []).append(row)
        return {index: tuple(flow) for index, flow in found.items()}

    def flow(self, index: int) -> tuple[ParamFlow, ...]:
        """Pass `index`'s gradient flow, in the order the session sorted it."""
        found = self._query(
            "SELECT name, node, shape, grad_norm, weight_norm, ratio, nonfinite FROM flow WHERE pass = ? ORDER BY rank",
            (index,),
            f"the flow of pass {index}",
            "flow",
        )
        return tuple(self._decoded(found, rows.flow, lambda _: f"the flow of pass {index}"))

    def hits(self, index: int | None = None, *, since: int | None = None) -> list[dict[str, Any]]:
        """Breakpoint hits in order (of pass `index` only, or of the passes from `since` on, if
        given): breakpoint number, spec, pass, node."""
        where, args = ("", ()) if index is None else (" WHERE pass = ?", (index,))
        if since is not None:
            where, args = " WHERE pass >= ?", (since,)
        found = self._query(
            f"SELECT pass, node, breakpoint, spec FROM hits{where} ORDER BY seq", args, "the breakpoint hits", "hits"
        )
        return self._decoded(found, rows.hit, lambda r: f"a breakpoint hit of pass {r[0]}")

    def grad_edits(self, index: int | None = None, *, since: int | None = None) -> list[GradEdited]:
        """The edits as the run told them (GradEdited: the statistics before and after), in order:
        of pass `index` only, or of the passes from `since` on, if given."""
        where, args = ("", ()) if index is None else (" WHERE pass = ?", (index,))
        if since is not None:
            where, args = " WHERE pass >= ?", (since,)
        found = self._query(
            f"SELECT pass, node, command, before, after FROM edits{where} ORDER BY seq", args, "the edits", "edits"
        )
        return self._decoded(found, rows.grad_edited, lambda r: f"an edit of pass {r[0]}")

    def edits(self) -> list[dict[str, Any]]:
        """Edits in order: pass, node, command, and the statistics before and after (JSON dicts)."""
        found = self._query(
            "SELECT pass, node, command, before, after FROM edits ORDER BY seq", (), "the edits", "edits"
        )
        return self._decoded(found, rows.edit, lambda r: f"an edit of pass {r[0]}")

    def sources(self) -> list[SourceText]:
        """The texts of the files the run's process alone could read (notebook cells), in order."""
        return [e for e in self._told("pass IS NULL", (), "the cell texts") if isinstance(e, SourceText)]

    def variables(self, first: int, last: int | None = None) -> dict[int, CallSiteVariables]:
        """Pass index -> the call-site variables the run read in it, for the passes from `first`
        (to `last`, if given) that paused."""
        where, args = ("pass >= ?", (first,)) if last is None else ("pass BETWEEN ? AND ?", (first, last))
        told = self._told(f"{where} AND kind = 'CallSiteVariables'", args, "the call-site variables")
        return {e.pass_index: e for e in told if isinstance(e, CallSiteVariables)}

    def _told(self, where: str, args: tuple, what: str) -> list[Any]:
        """The events of `told` rows `where` says, decoded (schema's doc); [] without the table."""
        found = self._query(f"SELECT pass, body FROM told WHERE {where} ORDER BY seq", args, what, "told")
        return self._decoded(found, _told_event, lambda r: f"a told event of pass {r[0]}")

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

    def _output_rows(self, found: list[tuple]) -> list[OutputLine]:
        return [
            OutputLine(*line) for line in self._decoded(found, rows.output, lambda r: f"an output line of pass {r[0]}")
        ]

    def _lines(self, clause: str, args: tuple) -> list[OutputLine]:
        return self._output_rows(
            self._query(f"SELECT pass, stream, text FROM output {clause}", args, "the output", "output")
        )

    def _tail(self, where: str, args: tuple, limit: int) -> list[OutputLine]:
        """The last `limit` lines `where` says, by pass then line (the order of `output_by_pass`,
        so no sort; a pass's lines are written after those of the passes before it)."""
        found = self._query(
            f"SELECT pass, stream, text FROM output WHERE {where} ORDER BY pass DESC, seq DESC LIMIT ?",
            (*args, limit),
            "the output",
            "output",
        )
        return self._output_rows(found[::-1])


def _told_event(row: tuple) -> Any:
    """A `told` row's event (raises BadRow)."""
    try:
        return from_wire(json.loads(row[1]))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise BadRow(f"its body is not an event: {type(exc).__name__}") from None


def ran_in_order(graph: nx.DiGraph) -> list[int]:
    """The nodes of a recorded graph that ran, in engine order (their `order`)."""
    return [
        n
        for n, _ in sorted(
            ((n, order) for n, order in graph.nodes(data="order") if order is not None), key=lambda item: item[1]
        )
    ]


def damage_text(damage: list[str], most: int = 3) -> str:
    """What `Recording.damage` holds, in one line: the first `most` items and how many more."""
    shown = "; ".join(damage[:most])
    return shown + (f"; and {len(damage) - most} more" if len(damage) > most else "")


def open_recording(path: str) -> Recording:
    """Open `path` for replay or export, or raise TargetError with a one-line reason."""
    if not os.path.exists(path):
        raise TargetError("no such file")
    if os.path.isdir(path):
        raise TargetError("it is a directory")
    try:
        return Recording(path)
    except schema.NotARecording as exc:
        raise TargetError(str(exc)) from None
