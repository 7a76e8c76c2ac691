"""`--record run.db`: a session listener that writes the run into a SQLite database.

Events in, rows out, nothing else: the recorder needs nothing from the session but its events
(`gradtui.protocol.events`), so it can run wherever events arrive. Each pass is one transaction,
committed when the pass ends, together with the output lines, hits and edits since the last
one; the database is in WAL mode, so a crash, SIGKILL or SIGTERM loses at most the pass in
flight and the file always opens afterwards. A write that fails (a full disk, a folder
removed) is said once in `failed`; the run goes on unrecorded.

A long pass's `grads` rows are written while it runs, in chunks of `ROWS_CHUNK` rows as its
NodeRan events arrive, into the pass's transaction (begun at its first chunk, committed when it
ends): nothing holds a pass's events or rows until its end, and a crash still leaves no part of
a pass (SQLite drops an uncommitted transaction). Each chunk goes in under a savepoint, so an
interrupt inside one undoes that chunk only; its rows are written with the next. Something else
asking for a commit while the pass runs (a pause, a breakpoint hit: what came before them is kept
if the run is killed there) takes the pass's rows back out of the transaction: they are read
back, the transaction is rolled back, and that pass keeps its rows in memory until it ends, as
every pass did before.

Which passes get per-node rows (`nodes`, `grads`): every hooked pass by default, every N-th
with `every=N`, or with `flight=K` the last K passes kept in a ring in memory and written only
when a breakpoint hits, the script fails or is quit. The loss and flow of every pass are
always written (`passes`, `flow`).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sqlite3
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gradtui.protocol import events as ev
from gradtui.protocol.lazygraph import node_infos
from gradtui.protocol.stats import Stats
from gradtui.record import schema
from gradtui.wire.codec import to_wire

OUTPUT_BATCH = 1000
"""Output lines kept before they are committed on their own (a script that prints much between passes)."""

TOLD = "INSERT INTO told (pass, kind, body) VALUES (?, ?, ?)"
"""An event a replay tells as it is (schema's `told`: a cell's text, a pass's call-site variables)."""


def check_path(path: str) -> str | None:
    """Why `path` cannot be recorded to (asked before the script runs), or None.

    Creates the folder if it is missing. An existing file must be a gradtui recording this
    version can replace; anything else is never overwritten.
    """
    if path == "":
        return "empty path"
    if os.path.isdir(path):
        return "it is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        return f"cannot create {folder}: {exc.strerror}"
    if os.path.exists(path):
        try:
            connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                schema.check_version(connection)
            finally:
                connection.close()
        except schema.NotARecording as exc:
            return str(exc)
        except sqlite3.DatabaseError as exc:
            return f"not a gradtui recording ({exc})"
        if not os.access(path, os.W_OK):
            return "permission denied"
    elif not os.access(folder, os.W_OK):
        return "permission denied"
    return None


def _f(x: float | None) -> float | str | None:
    """A float for a REAL column: SQLite would store NaN as NULL."""
    return "nan" if x is not None and x != x else x


_texts: dict[tuple, str] = {}
"""JSON text of shapes, labels and `next` tuples: a training loop repeats the same few."""


def _list(items: tuple) -> str:
    text = _texts.get(items)
    if text is None:
        if len(_texts) > 100_000:
            _texts.clear()
        text = _texts[items] = json.dumps(list(items), separators=(",", ":"))
    return text


def _int64(n: int) -> int:
    """An unsigned 64-bit number (a leaf's sequence number is 2**64 - 1) as SQLite's signed INTEGER."""
    return n - (1 << 64) if n >= 1 << 63 else n


def stats_json(stats: Stats | None) -> dict[str, Any] | None:
    """A Stats as a JSON-ready dict (edits' before/after)."""
    return None if stats is None else stats.to_json()


_EMPTY_SLOT = (None,) * len(schema.GRAD_STATS)
"""The statistics columns of an empty slot (shape NULL)."""


def _cells_function() -> Callable[[Stats], tuple]:
    """The function that makes a Stats' `grads` cells, each statistic of schema.GRAD_STATS encoded
    as its column keeps it, written out from that list once, at import (as `dataclasses` writes
    an `__init__`): one expression per cell and no call per cell, since it runs for every slot of
    every node of every recorded pass. The names in it are the schema's own, not input."""
    cells = []
    for column in schema.GRAD_STATS:
        value = f"s.{column.field}"
        match column.kept:
            case schema.Kept.SHAPE:
                cells.append(f"shape_text({value})")
            case schema.Kept.REAL:  # SQLite would store NaN as NULL: the text 'nan'
                cells.append(f'("nan" if (v := {value}) != v else v)')
            case schema.Kept.FLOATS:  # float64s in the machine's byte order
                cells.append(f'(None if (v := {value}) is None else array("d", v).tobytes())')
            case _:
                cells.append(value)
    return eval(f"lambda s: ({', '.join(cells)},)", {"shape_text": _list, "array": array})


_cells = _cells_function()


def _grad_rows(
    index: int, node: int, direction: int, grads: tuple[Stats | None, ...], rows: list[tuple], first: int = 0
) -> None:
    """Append the `grads` rows of one node's slots (`_cells`), numbered from `first`. The hot loop
    of a recording (a row per slot of every node of every pass with per-node data)."""
    append, cells = rows.append, _cells
    for slot, s in enumerate(grads, first):
        if s is None:
            append((index, node, direction, slot, *_EMPTY_SLOT))
            continue
        append((index, node, direction, slot, *cells(s)))


def _print_rows(index: int, prints: tuple[ev.Print, ...]) -> list[tuple]:
    """The `prints` rows of a pass's fingerprints (gradtui.engine.fingerprints.values)."""
    return [
        (
            index,
            p.node,
            p.dir,
            p.slot,
            _f(p.norm),
            int(p.exact),
            array("d", p.sketch).tobytes() if p.sketch else None,
            p.what or None,
        )
        for p in prints
    ]


@dataclass
class _Pass:
    """A pass in flight (or in the flight ring): its start and the per-node events it produced,
    or the rows made of them (see the module doc)."""

    started: ev.PassStarted
    t0: float
    ran: list[ev.NodeRan] | None = field(default_factory=list)
    """Its NodeRan events, where they are kept until it ends (the flight ring's passes); None where
    they are made into rows as they arrive (`rows`) or not wanted."""
    rows: list[tuple] | None = None
    """Its `grads` rows not written yet, where they are made as the events arrive."""
    order: array | None = None
    """With `rows`: per node, the order it ran in (-1: it did not run), for its `nodes` row."""
    holds: bool = False
    """With `rows`: something asked for a commit while it ran, so its rows stay here until it ends."""
    nested: list[dict[str, Any]] = field(default_factory=list)
    prints: tuple[ev.Print, ...] = ()
    """The pass's fingerprints (its PassPrints event), written with its per-node rows."""
    keep_nodes: bool = False
    """Write this pass's per-node rows when it ends (flight mode: a breakpoint hit in it)."""


_INSERT_GRADS = "INSERT INTO grads ({}) VALUES ({})".format(
    ", ".join([*schema.GRAD_KEY, *(c.name for c in schema.GRAD_STATS)]),
    ", ".join("?" * (len(schema.GRAD_KEY) + len(schema.GRAD_STATS))),
)

ROWS_CHUNK = 4096
"""Rows of a pass's `grads` made at a time while they are written, and written at a time while
the pass runs (see the module doc)."""

_READ_BACK = "SELECT {} FROM grads WHERE pass = ?".format(
    ", ".join([*schema.GRAD_KEY, *(c.name for c in schema.GRAD_STATS)])
)
"""A pass's `grads` rows as they were written (a pass taken back out of its transaction)."""


class _Rows:
    """A pass's rows made while SQLite takes them, not held in a list (a list of a 500,000-node
    pass's rows holds as much as the pass's statistics again); iterable again from the start, so
    a write that is interrupted and retried writes them all."""

    def __init__(self, make: Callable[[], Iterator[tuple]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[tuple]:
        return self._make()


class Recorder:
    """Writes a run's events into the SQLite database at `path` (see the module doc)."""

    def __init__(
        self,
        path: str,
        *,
        every: int | None = None,
        flight: int | None = None,
        argv: list[str] | None = None,
        torch_version: str | None = None,
    ) -> None:
        """`torch_version`: the torch the run uses (None: the installed one's, read from its
        package metadata: gradtui.record never imports torch)."""
        if every is not None and every < 1:
            raise ValueError("every must be at least 1")
        if flight is not None and flight < 1:
            raise ValueError("flight must be at least 1")
        self.path = path
        self.every = every
        self.flight = flight
        self.failed: str | None = None
        """The first write error, as one line; nothing more is written after it."""
        self._argv = argv
        self._torch = torch_version if torch_version is not None else _installed("torch")
        self._pass: _Pass | None = None
        self._uncommitted: _Pass | None = None
        """The pass whose rows are in the open transaction (not committed yet), or None: the pass in
        flight, or one that ended and whose last write was interrupted (the next write commits it)."""
        self._ring: deque[_Pass] = deque(maxlen=(flight or 1) - 1)  # with the pass a hit is in: K
        self._pending: list[tuple[str, Iterable[tuple]]] = []
        """Rows (statement, rows) waiting for the next commit: output, hits, edits."""
        self._output_rows: list[tuple] = []
        self._last_pass: int | None = None
        self._t0 = time.time()
        self._lock = threading.Lock()
        self._db = self._open(path)

    # ---- the database ---------------------------------------------------------------------

    @staticmethod
    def _open(path: str) -> sqlite3.Connection | None:
        for suffix in ("", "-wal", "-shm", "-journal"):  # check_path said it is ours to replace
            try:
                os.remove(path + suffix)
            except FileNotFoundError:
                pass
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: a committed pass survives a crash of the process
        db.execute("PRAGMA cache_size=-16384")  # 16 MB: a pass's rows go in without re-reading B-tree pages
        db.executescript(schema.SCHEMA)
        db.execute("INSERT INTO schema_version VALUES (?, ?)", (schema.APP, schema.VERSION))
        db.execute("INSERT INTO sketch VALUES (?)", (schema.SKETCH_VERSION,))
        return db

    def _mode_text(self) -> str:
        if self.flight:
            return f"flight {self.flight}"
        return f"every {self.every}" if self.every else "hooked"

    def _write(self, work: list[tuple[str, Iterable[tuple]]]) -> None:
        """Run statements with their rows in one transaction, with whatever is pending; it commits
        too the rows of a pass that ended in the open transaction. A pass still in flight there is
        taken out of it first (`_take_back`): no commit holds part of a pass."""
        if self._db is None:
            return
        if self._uncommitted is not None and self._uncommitted is self._pass:
            self._take_back(self._uncommitted)
            if self._db is None:
                return
        if self._output_rows:
            self._pending.append(("INSERT INTO output (pass, stream, text) VALUES (?, ?, ?)", self._output_rows))
            self._output_rows = []
        work = self._pending + work
        self._pending = []
        began = False
        nested = self._uncommitted is not None  # a pass's chunks are in it: a savepoint keeps them on an interrupt
        try:
            self._db.execute("SAVEPOINT write" if nested else "BEGIN")
            began = True
            for statement, rows in work:
                self._db.executemany(statement, rows)
            self._db.execute("COMMIT")
            self._uncommitted = None
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
        except BaseException:
            # A KeyboardInterrupt from a script's own SIGINT handler (gradtui.engine.process.deferral leaves
            # it in place) or in an in-process run: nothing half-committed, the rows wait for the
            # next commit (a rollback that fails stops the recording at that next commit).
            if self._db.in_transaction or not began:
                if nested and began:  # the pass's chunks before it stay in the transaction
                    self._undo_savepoint("write")
                else:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.rollback()
                self._pending = work + self._pending
            else:  # it committed
                self._uncommitted = None
            raise

    def _write_chunk(self, flight: _Pass) -> None:
        """Write the rows `flight` made so far into its transaction (begun here at its first chunk,
        after committing what is pending: that is kept whatever becomes of the pass)."""
        if self._uncommitted is not flight:
            if self._uncommitted is not None or self._pending or self._output_rows:
                self._write([])
            if self._db is None:
                return
            self._db.execute("BEGIN")
            self._uncommitted = flight
        rows, db = flight.rows, self._db
        assert rows is not None and db is not None  # a pass that makes rows; an open recording
        try:
            db.execute("SAVEPOINT chunk")
            db.executemany(_INSERT_GRADS, rows)
            db.execute("RELEASE chunk")
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
            return
        except BaseException:  # an interrupt (see `_write`): the chunk's rows stay to be written with the next
            self._undo_savepoint("chunk")
            raise
        flight.rows = []

    def _undo_savepoint(self, name: str) -> None:
        """Undo what was written since savepoint `name` (an interrupt inside it), keeping the rest
        of the transaction; a rollback that fails stops the recording."""
        assert self._db is not None
        try:
            self._db.execute(f"ROLLBACK TO {name}")
            self._db.execute(f"RELEASE {name}")
        except sqlite3.Error as exc:
            self._fail(exc)

    def _take_back(self, flight: _Pass) -> None:
        """Take pass `flight`'s rows out of the open transaction (something else asks for a commit
        while it runs): read them back, roll the transaction back; the pass keeps its rows until it
        ends."""
        assert self._db is not None
        try:
            written = self._db.execute(_READ_BACK, (flight.started.pass_index,)).fetchall()
            self._db.rollback()
        except sqlite3.Error as exc:
            self._fail(exc)
            return
        self._uncommitted = None
        flight.rows = written + (flight.rows or [])
        flight.holds = True

    def _drop_uncommitted(self, flight: _Pass | None) -> None:
        """Roll back the rows of pass `flight` if they are in the open transaction: it never ends
        as itself (the recording closes, another pass starts, or it ends as another), and a pass
        in flight is not written."""
        if flight is None or self._uncommitted is not flight or self._db is None:
            return
        self._uncommitted = None
        try:
            self._db.rollback()
        except sqlite3.Error as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = f"{type(exc).__name__}: {exc}" if not isinstance(exc, sqlite3.Error) else str(exc)
        db, self._db = self._db, None
        self._uncommitted = None
        if db is None:
            return
        for finish in (db.rollback, db.close):
            try:
                finish()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        """Commit what is pending and close the database (idempotent)."""
        with self._lock:
            self._drop_uncommitted(self._pass)
            if self._db is not None:
                self._write([])
            if self._db is not None:
                self._db.close()
                self._db = None

    # ---- events -----------------------------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        """Listener entry point: never raises into the session (a failure stops the recording).
        Thread-safe: `--listen` tees the script's output into Output events from reader threads."""
        if self._db is None:
            return
        with self._lock:
            try:
                self._on(event)
            except Exception as exc:  # noqa: BLE001 - the recording must never break the user's run
                self._fail(exc)

    def _on(self, event: ev.Event) -> None:
        match event:
            case ev.NodeRan():
                flight = self._pass
                if flight is None:
                    return
                if (rows := flight.rows) is not None:
                    index, node = flight.started.pass_index, event.node
                    flight.order[node] = event.order  # type: ignore[index]  # made with `rows`
                    _grad_rows(index, node, schema.GRAD_OUTPUTS_DIR, event.grad_outputs, rows)
                    if len(event.grad_inputs) > ROWS_CHUNK:  # a node that sends many (a stack's)
                        self._many_rows(flight, node, event.grad_inputs)
                        return
                    _grad_rows(index, node, schema.GRAD_INPUTS_DIR, event.grad_inputs, rows)
                    if len(rows) >= ROWS_CHUNK and not flight.holds:
                        self._write_chunk(flight)
                elif flight.ran is not None:
                    flight.ran.append(event)
            case ev.PassStarted():
                self._drop_uncommitted(self._pass)
                self._pass = self._started(event)
                self._last_pass = event.pass_index
            case ev.PassPrints():
                if self._pass is not None and self._pass.started.pass_index == event.pass_index:
                    self._pass.prints = event.prints
            case ev.PassFinished():
                self._pass_finished(event)
            case ev.Output():
                self._output_rows.append((self._last_pass, event.stream, event.text))
                if len(self._output_rows) >= OUTPUT_BATCH and self._uncommitted is None:  # else with the pass
                    self._write([])
            case ev.NestedPass():
                if self._pass is not None:
                    self._pass.nested.append(
                        {"call": event.call, "call_site": event.call_site, "nodes": event.nodes, "thread": event.thread}
                    )
            case ev.BreakpointHit():
                self._pending.append(
                    (
                        "INSERT INTO hits (pass, node, breakpoint, spec) VALUES (?, ?, ?, ?)",
                        [(event.pass_index, event.node, event.number, event.spec)],
                    )
                )
                if self.flight:
                    if self._pass is not None:
                        self._pass.keep_nodes = True
                    self._dump_ring()
                else:
                    self._write([])
            case ev.GradEdited():
                self._pending.append(
                    (
                        "INSERT INTO edits (pass, node, command, before, after) VALUES (?, ?, ?, ?, ?)",
                        [
                            (
                                event.pass_index,
                                event.node,
                                event.command,
                                json.dumps([stats_json(s) for s in event.before]),
                                json.dumps([stats_json(s) for s in event.after]),
                            )
                        ],
                    )
                )
            case ev.SourceText():
                self._pending.append((TOLD, [(None, "SourceText", json.dumps(to_wire(event)))]))
            case ev.CallSiteVariables():
                self._pending.append((TOLD, [(event.pass_index, "CallSiteVariables", json.dumps(to_wire(event)))]))
            case ev.Paused():
                self._write([])  # the user may stay here, or kill the run: what came before is kept
            case ev.ScriptStarted():
                self._write(
                    [
                        (
                            "INSERT INTO run (id, script, argv, torch, python, started, per_node) "
                            "VALUES (1, ?, ?, ?, ?, ?, ?)",
                            [
                                (
                                    event.path,
                                    json.dumps(self._argv if self._argv is not None else list(event.argv)),
                                    self._torch,
                                    platform.python_version(),
                                    self._t0,
                                    self._mode_text(),
                                )
                            ],
                        )
                    ]
                )
            case ev.ScriptFinished():
                if self.flight and (event.exit_status != 0 or event.quit or event.traceback):
                    self._dump_ring()
                self._write(
                    [
                        (
                            "UPDATE run SET finished = ?, exit_status = ?, error = ?, quit = ?, how = ? WHERE id = 1",
                            [(time.time(), event.exit_status, event.traceback, int(event.quit), event.how)],
                        )
                    ]
                )
            case _:
                pass

    def _many_rows(self, flight: _Pass, node: int, grads: tuple[Stats | None, ...]) -> None:
        """The rows of what node `node` sent, `ROWS_CHUNK` slots at a time, each written as it is
        made (a stack of 100,000 gradients' rows made at once took ~30 MB)."""
        index, chunk = flight.started.pass_index, ROWS_CHUNK
        for first in range(0, len(grads), chunk):
            rows = flight.rows
            assert rows is not None  # a pass that makes rows
            _grad_rows(index, node, schema.GRAD_INPUTS_DIR, grads[first : first + chunk], rows, first)
            if len(rows) >= chunk and not flight.holds and self._db is not None:
                self._write_chunk(flight)

    def _started(self, started: ev.PassStarted) -> _Pass:
        """The record of a pass starting: its events kept (the flight ring), made into rows as they
        arrive (a pass whose per-node rows are written), or neither (a pass `every` skips, an
        unrecorded one)."""
        if self.flight:
            return _Pass(started, time.time())
        if not self._wants_nodes(started):
            return _Pass(started, time.time(), ran=None)
        order = array("q", [-1]) * len(node_infos(started.graph))
        return _Pass(started, time.time(), ran=None, rows=[], order=order)

    def _wants_nodes(self, started: ev.PassStarted) -> bool:
        if not started.recorded:
            return False
        return self.every is None or started.pass_index % self.every == 0

    def _pass_finished(self, event: ev.PassFinished) -> None:
        flight = self._pass
        self._pass = None
        if flight is None or flight.started.pass_index != event.pass_index:
            self._drop_uncommitted(flight)
            return
        started = flight.started
        wall = time.time() - flight.t0
        norms = [r.grad_norm for r in event.flow if r.grad_norm is not None]
        total_norm = sum(n * n for n in norms) ** 0.5 if norms else None
        nonfinite = sum(r.nonfinite for r in event.flow)
        per_node = False
        work: list[tuple[str, Iterable[tuple]]] = []
        if self.flight:
            if started.recorded:
                if flight.keep_nodes:
                    per_node = True
                    work += self._node_work(flight)
                else:
                    self._ring.append(flight)
        elif self._wants_nodes(started):
            per_node = True
            work += self._node_work(flight)
        work.insert(
            0,
            (
                "INSERT OR REPLACE INTO passes (idx, call, call_text, call_site, losses, hooked, per_node, nodes, done, "
                "error, failed_node, started, wall, grad_norm, nonfinite, nested) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        event.pass_index,
                        started.call,
                        started.call_text,
                        started.call_site,
                        json.dumps([_f(v) for v in started.losses]),
                        int(started.recorded),
                        int(per_node),
                        event.total,
                        event.done,
                        event.error,
                        event.node,
                        flight.t0 - self._t0,
                        wall,
                        _f(total_norm),
                        nonfinite,
                        json.dumps(flight.nested) if flight.nested else None,
                    )
                ],
            ),
        )
        index, flow = event.pass_index, event.flow

        def flow_rows() -> Iterator[tuple]:  # made as they are written: a row per parameter
            for rank, r in enumerate(flow):
                yield (
                    index,
                    rank,
                    r.name,
                    r.node,
                    _list(tuple(r.shape)),
                    _f(r.grad_norm),
                    _f(r.weight_norm),
                    _f(r.ratio),
                    r.nonfinite,
                )

        work.append(
            (
                "INSERT INTO flow (pass, rank, name, node, shape, grad_norm, weight_norm, ratio, nonfinite) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _Rows(flow_rows),
            )
        )
        self._write(work)

    def _node_work(self, flight: _Pass) -> list[tuple[str, Iterable[tuple]]]:
        """The `nodes` rows of a pass and the `grads` rows not written yet, made as they are
        written (`_Rows`): from its rows made as its events arrived, or from its events."""
        index = flight.started.pass_index
        infos = node_infos(flight.started.graph)
        grads: Iterable[tuple]
        if flight.rows is not None and flight.order is not None:
            order, grads = flight.order, flight.rows
        else:
            ran_events = flight.ran or []
            order = array("q", [-1]) * len(infos)  # per node, its order (-1: it did not run), not a dict of them
            for ran in ran_events:
                order[ran.node] = ran.order

            def made() -> Iterator[tuple]:
                rows: list[tuple] = []
                for ran in ran_events:
                    _grad_rows(index, ran.node, schema.GRAD_OUTPUTS_DIR, ran.grad_outputs, rows)
                    _grad_rows(index, ran.node, schema.GRAD_INPUTS_DIR, ran.grad_inputs, rows)
                    if len(rows) >= ROWS_CHUNK:
                        yield from rows
                        rows.clear()
                yield from rows

            grads = _Rows(made)

        def nodes() -> Iterator[tuple]:
            for i, d in enumerate(infos):
                yield (
                    index,
                    i,
                    d.name,
                    d.kind,
                    _list(d.labels) if d.labels else None,
                    d.param,
                    d.source,
                    d.module,
                    None if (ran := order[i]) < 0 else ran,
                    _list(d.next),
                    _int64(d.seq),
                )

        work: list[tuple[str, Iterable[tuple]]] = [
            ("INSERT INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _Rows(nodes)),
            (_INSERT_GRADS, grads),
        ]
        if flight.prints:
            work.append(
                ("INSERT OR REPLACE INTO prints VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _print_rows(index, flight.prints))
            )
        return work

    def _dump_ring(self) -> None:
        """Write the flight ring's passes node by node (a breakpoint hit, the script failed or quit)."""
        work: list[tuple[str, Iterable[tuple]]] = []
        indexes = []
        while self._ring:
            kept = self._ring.popleft()
            work += self._node_work(kept)
            indexes.append((kept.started.pass_index,))
        if indexes:
            work.append(("UPDATE passes SET per_node = 1 WHERE idx = ?", indexes))
        self._write(work)


def _installed(package: str) -> str | None:
    """The installed version of `package` from its metadata (no import), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
