"""The recording database's schema (version 3) and how a file is recognized as a recording.

Shared by the writer (`store`) and the reader (`reader`). Floats are REAL columns, except that
SQLite stores NaN as NULL, so a NaN is written as the text 'nan' (`nonfinite > 0` finds it);
lists (shapes, labels, losses) are JSON text. Gradient statistics are rows of `grads`, one per
node, direction and slot: `dir` 0 is what flowed into the node (its `grad_outputs`), 1 what
it sent on (`grad_inputs`); an empty slot is a row whose `shape` is NULL. `vals` (the values of a
tensor of at most 64 elements) is a BLOB of float64s in the machine's byte order.

Version 2 added the `prints` table (gradtui.engine.fingerprints.values: per node, direction and slot,
a value's norm and its K projections, or its values when `exact`; `dir` 0 received, 1 sent, 2
the node's forward output, 3 a saved leaf value, slot -1 its saved arguments as `what`). A
version-1 file opens as before and simply has no fingerprints (`has_prints`).

Version 3 added the `sketch` table: which sketch its fingerprints were made with
(`SKETCH_VERSION`; a version-2 file's are sketch 1, the row-major one; sketch 3 came later in
version 3 files: a row of the table, no change to the schema). Fingerprints of two sketch
versions are never compared (`gradtui diff`, `--against` refuse them in one line).

The three indexes at the end came after the first version-1 recordings and are still version 1:
an index changes no row, so a file with or without them opens in either gradtui, the same
queries answer the same; without them a replay's open scans the `passes` and `output` tables
in SQLite instead of looking rows up (still well under a second for a 1 GB file).

The `told` table came after version 3's first recordings and is still version 3: events a
replay tells as the run told them and no other table holds, in their wire form
(gradtui.wire.codec, JSON): a notebook cell's `SourceText` (pass NULL) and each pass's
`CallSiteVariables`. A table added changes no row, so an older gradtui reads a file with it as
before, and a file without it replays as before, with no call-site variables or cell texts.
"""

from __future__ import annotations

import enum
import sqlite3
from typing import NamedTuple

from gradtui.protocol import events

APP = "gradtui"
VERSION = 3

SKETCH_VERSION = events.SKETCH_VERSION
"""The sketch this gradtui's fingerprints are made with (gradtui.protocol.events.SKETCH_VERSION)."""

GRAD_OUTPUTS_DIR = 0
"""`grads.dir` of what arrived at a node (its `grad_outputs`)."""
GRAD_INPUTS_DIR = 1
"""`grads.dir` of what a node sent on (its `grad_inputs`)."""


class Kept(enum.Enum):
    """How a statistic is kept in its `grads` cell."""

    SHAPE = "shape"
    """A JSON list of sizes (TEXT)."""
    TEXT = "text"
    """Text as it is."""
    REAL = "real"
    """A float; NaN written as the text 'nan' (SQLite would store it as NULL)."""
    COUNT = "count"
    """A whole number (INTEGER)."""
    FLOATS = "floats"
    """A tuple of floats as float64s in the machine's byte order (BLOB)."""

    @property
    def sql(self) -> str:
        """The column's SQL type."""
        match self:
            case Kept.REAL:
                return "REAL"
            case Kept.COUNT:
                return "INTEGER"
            case Kept.FLOATS:
                return "BLOB"
            case _:
                return "TEXT"


class Column(NamedTuple):
    """One statistic's column of `grads`: its name, how it is kept, the `Stats` field it holds
    (when named otherwise) and whether a gradient's row must have it (NULL is damage)."""

    name: str
    kept: Kept
    attr: str = ""
    required: bool = False

    @property
    def field(self) -> str:
        """The `Stats` field (gradtui.protocol.stats) this column holds."""
        return self.attr or self.name


GRAD_STATS = (
    Column("shape", Kept.SHAPE, required=True),
    Column("dtype", Kept.TEXT, required=True),
    Column("device", Kept.TEXT, required=True),
    Column("norm", Kept.REAL, required=True),
    Column("min", Kept.REAL),
    Column("max", Kept.REAL),
    Column("mean", Kept.REAL),
    Column("nonfinite", Kept.COUNT, required=True),
    Column("vals", Kept.FLOATS, "values"),
)
"""The statistics a recording keeps of a gradient, one `grads` column each, in the table's order:
the one description the table, the writer (gradtui.record.store) and the readers (`rows.stats`,
the reader, compare) follow. A statistic added here (nullable, after these) is a column added:
a file made before it reads as before, its rows NULL there (`grad_columns`), and an older gradtui
reads a newer file as before (it names the columns it reads)."""

NOT_RECORDED = {
    "preview": "the first values, taken again from `vals`",
    "histogram": "a pause's, shown then; a replay shows the values' own",
    "unreadable": "a gradient without values is kept as its shape, dtype and device with a NaN norm",
    "finite_range": "a pause's, shown then; a replay takes it from the values where kept",
}
"""The `Stats` fields a recording does not keep, each with why."""

GRAD_KEY = ("pass", "node", "dir", "slot")
"""The columns of `grads` before the statistics: which gradient a row is."""


SCHEMA = """
CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL);
CREATE TABLE run (
    id INTEGER PRIMARY KEY CHECK (id = 1), script TEXT, argv TEXT, torch TEXT, python TEXT,
    started REAL, finished REAL, exit_status INTEGER, error TEXT, quit INTEGER, how TEXT,
    per_node TEXT
);
CREATE TABLE passes (
    idx INTEGER PRIMARY KEY, call TEXT, call_text TEXT, call_site TEXT, losses TEXT,
    hooked INTEGER, per_node INTEGER, nodes INTEGER, done INTEGER, error TEXT, failed_node INTEGER,
    started REAL, wall REAL, grad_norm REAL, nonfinite INTEGER, nested TEXT
);
CREATE TABLE nodes (
    pass INTEGER NOT NULL, id INTEGER NOT NULL, op TEXT, kind TEXT, labels TEXT, param TEXT,
    source TEXT, module TEXT, ord INTEGER, next TEXT, seq INTEGER,
    PRIMARY KEY (pass, id)
) WITHOUT ROWID;
CREATE TABLE grads (
    pass INTEGER NOT NULL, node INTEGER NOT NULL, dir INTEGER NOT NULL, slot INTEGER NOT NULL,
    {grad_stats},
    PRIMARY KEY (pass, node, dir, slot)
) WITHOUT ROWID;
CREATE INDEX grads_nonfinite ON grads (pass, node) WHERE nonfinite > 0;
CREATE TABLE flow (
    pass INTEGER NOT NULL, rank INTEGER NOT NULL, name TEXT, node INTEGER, shape TEXT,
    grad_norm REAL, weight_norm REAL, ratio REAL, nonfinite INTEGER,
    PRIMARY KEY (pass, rank)
) WITHOUT ROWID;
CREATE INDEX flow_by_name ON flow (name, pass);
CREATE INDEX flow_nonfinite ON flow (pass) WHERE nonfinite > 0;
CREATE TABLE hits (seq INTEGER PRIMARY KEY, pass INTEGER, node INTEGER, breakpoint INTEGER, spec TEXT);
CREATE TABLE edits (seq INTEGER PRIMARY KEY, pass INTEGER, node INTEGER, command TEXT, before TEXT, after TEXT);
CREATE TABLE output (seq INTEGER PRIMARY KEY, pass INTEGER, stream TEXT, text TEXT);
-- for the replay's open: the passes it can walk, the first non-finite ones, the output of the
-- passes it lists (see the module doc: files made before these indexes read the same)
CREATE INDEX passes_per_node ON passes (idx) WHERE per_node = 1;
CREATE INDEX passes_nonfinite ON passes (idx) WHERE nonfinite > 0;
CREATE INDEX output_by_pass ON output (pass);
CREATE TABLE sketch (version INTEGER NOT NULL);
CREATE TABLE told (seq INTEGER PRIMARY KEY, pass INTEGER, kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE INDEX told_by_pass ON told (pass);
CREATE TABLE prints (
    pass INTEGER NOT NULL, node INTEGER NOT NULL, dir INTEGER NOT NULL, slot INTEGER NOT NULL,
    norm REAL, exact INTEGER, sketch BLOB, what TEXT,
    PRIMARY KEY (pass, node, dir, slot)
) WITHOUT ROWID;
""".replace("{grad_stats}", ", ".join(f"{c.name} {c.kept.sql}" for c in GRAD_STATS))


def grad_columns(connection: sqlite3.Connection, prefix: str = "") -> str:
    """The select list of `GRAD_STATS` on an open recording's `grads` (each with `prefix`, a
    table alias and a dot): NULL for a column the file was made without."""
    present = {row[1] for row in connection.execute("PRAGMA table_info(grads)")}
    return ", ".join(f"{prefix}{c.name}" if c.name in present else "NULL" for c in GRAD_STATS)


class NotARecording(Exception):
    """The file exists but cannot be read as a gradtui recording of a version this gradtui knows."""


def unreadable(exc: sqlite3.Error) -> str:
    """Why SQLite cannot open a file, in a few words: a file SQLite knows but cannot read is
    damaged; any other is not a recording."""
    if "malformed" in str(exc):
        return f"damaged: SQLite cannot read it ({exc})"
    return f"not a gradtui recording ({exc})"


def version_of(connection: sqlite3.Connection) -> int:
    """The schema version of an open database, or raise NotARecording (with a one-line reason)."""
    try:
        row = connection.execute("SELECT app, version FROM schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        if "no such table" in str(exc):
            raise NotARecording("not a gradtui recording (no schema_version table)") from None
        raise NotARecording(unreadable(exc)) from None
    if row is None or row[0] != APP:
        raise NotARecording("not a gradtui recording (another program's schema_version)")
    if type(row[1]) is not int:
        raise NotARecording(f"damaged: its schema_version is {row[1]!r}, not a version number")
    return row[1]


def check_version(connection: sqlite3.Connection) -> int:
    """`version_of`, refusing a recording made by a newer gradtui."""
    version = version_of(connection)
    if version > VERSION:
        raise NotARecording(f"recorded by a newer gradtui (schema {version}; this one reads up to {VERSION})")
    return version


def require_tables(connection: sqlite3.Connection, names: tuple[str, ...]) -> None:
    """Raise NotARecording (damaged, naming it) if the open recording lacks one of the tables `names`."""
    tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [name for name in names if name not in tables]
    if missing:
        raise NotARecording(f"damaged: its {', '.join(missing)} table{'s are' if len(missing) > 1 else ' is'} missing")


def has_prints(connection: sqlite3.Connection) -> bool:
    """Does an open recording have a `prints` table (version 2 and later)?"""
    return (
        connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'prints'").fetchone()
        is not None
    )


def sketch_version(connection: sqlite3.Connection) -> int | None:
    """Which sketch an open recording's fingerprints were made with (None: it has no `prints`
    table): its `sketch` row (version 3 and later), else 1."""
    if not has_prints(connection):
        return None
    found = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sketch'").fetchone()
    row = connection.execute("SELECT version FROM sketch").fetchone() if found else None
    return row[0] if row is not None else 1
