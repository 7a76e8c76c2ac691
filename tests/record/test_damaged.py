"""Damaged recordings: `gradtui replay --headless` and `gradtui export` over
a corpus of damaged copies of one small recording give no traceback, exit 0 or 2, and a line
naming the damage; what is still readable is replayed and exported.

The recording (tests/fixtures/nanmlp.py with an edit, `break nan` hitting at pass 5, every table
written) is made once for the module; each case is a copy damaged in-process: every table
dropped, every column of one row given a value of the wrong type (and every JSON column a text
that does not parse), every non-key column of every row overwritten, and 16 bytes flipped at each of 20
seeded offsets past SQLite's header. Both commands run in this process (their `main`), so an
exception that escapes fails the case.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3

import pytest

from gradtui.cli import export as export_cli
from gradtui.cli import replay as replay_cli
from gradtui.record import schema
from gradtui.record.reader import TABLES
from tests.helpers import script
from tests.processes import gradtui

pytestmark = pytest.mark.timeout(120)

JSON_COLUMNS = {
    ("run", "argv"),
    ("passes", "losses"),
    ("passes", "nested"),
    ("nodes", "labels"),
    ("nodes", "next"),
    ("grads", "shape"),
    ("flow", "shape"),
    ("edits", "before"),
    ("edits", "after"),
}
COMMANDS = ("pass 3", "print", "flow", "step", "breakpoints", "pass 5", "print", "continue")


def _columns() -> list[tuple[str, str, str, bool]]:
    """(table, column, declared type, part of the key) of every column of the schema."""
    db = sqlite3.connect(":memory:")
    db.executescript(schema.SCHEMA)
    found = []
    for table in ("schema_version", *TABLES):
        for _, name, kind, _, _, key in db.execute(f"PRAGMA table_info({table})"):
            found.append((table, name, kind, bool(key)))
    db.close()
    return found


COLUMNS = _columns()


def _wrong(kind: str) -> object:
    """A value of another type than the column's."""
    return b"\xff\x00\xfe" if kind == "TEXT" else "garbage"


ROWIDS = {("run", "id"), ("passes", "idx"), ("hits", "seq"), ("edits", "seq"), ("output", "seq")}
"""Columns SQLite keeps integers itself (a rowid; the run's id is checked to be 1)."""

CASES = (
    [("drop", table, "", None) for table in ("schema_version", *TABLES)]
    + [("cell", table, column, _wrong(kind)) for table, column, kind, _ in COLUMNS if (table, column) not in ROWIDS]
    + [("cell", table, column, "{not json") for table, column in sorted(JSON_COLUMNS)]
    + [("column", table, column, _wrong(kind)) for table, column, kind, key in COLUMNS if not key]
    + [("flip", "", str(seed), None) for seed in range(20)]
)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("damaged") / "run.db")
    run = gradtui(
        "--headless", "--record", path, "-c", "scale 2", "-c", "break nan", "-c", "continue", script("nanmlp.py")
    )
    assert run.returncode == 0, run.stderr[-2000:]
    db = sqlite3.connect(path)
    try:
        for table in TABLES:  # every table has rows to damage
            assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
        db.execute("PRAGMA journal_mode = DELETE")  # one file: a copy is the whole recording
        db.execute("VACUUM")  # no free pages: a flipped byte lands in the recording's rows
    finally:
        db.close()
    return path


def damage(path: str, kind: str, table: str, column: str, value: object) -> None:
    """Damage the copy at `path` as the case says."""
    if kind == "flip":
        size = os.path.getsize(path)
        rng = random.Random(int(column))
        at = rng.randrange(100, size - 16)
        with open(path, "r+b") as f:
            f.seek(at)
            data = bytearray(f.read(16))
            f.seek(at)
            f.write(bytes(b ^ rng.randrange(1, 256) for b in data))
        return
    db = sqlite3.connect(path, isolation_level=None)
    try:
        if kind == "drop":
            db.execute(f"DROP TABLE {table}")
        elif kind == "column":
            db.execute(f"UPDATE {table} SET {column} = ?", (value,))
        else:  # one row, from the middle of the table
            count = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            keys = [name for t, name, _, key in COLUMNS if t == table and key] or [
                c for t, c, _, _ in COLUMNS if t == table
            ]
            row = db.execute(f"SELECT {', '.join(keys)} FROM {table} LIMIT 1 OFFSET ?", (count // 2,)).fetchone()
            where = " AND ".join(f"{k} IS ?" for k in keys)
            db.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (value, *row))
    finally:
        db.close()


def run_both(db: str, out: str, capsys) -> dict[str, tuple[int, str, str]]:
    """`gradtui replay --headless` and `gradtui export` on `db`: per command its status, stdout, stderr."""
    done = {}
    argv = [db, "--headless", *[a for c in COMMANDS for a in ("-c", c)]]
    done["replay"] = (replay_cli.main(argv), *capsys.readouterr())
    done["export"] = (export_cli.main([db, "--json", out]), *capsys.readouterr())
    return done


@pytest.mark.parametrize(
    "kind,table,column,value", CASES, ids=[f"{k}-{t}-{c}-{type(v).__name__}" for k, t, c, v in CASES]
)
def test_a_damaged_recording_is_named_in_one_line_and_the_rest_is_read(
    made, tmp_path, capsys, monkeypatch, kind, table, column, value
):
    monkeypatch.setattr(replay_cli, "settle_heap", lambda: None)  # gc.freeze, once per process, not per case
    db = str(tmp_path / "damaged.db")
    shutil.copy(made, db)
    damage(db, kind, table, column, value)
    out = str(tmp_path / "out.json")
    done = run_both(db, out, capsys)
    for prog, (status, stdout, stderr) in done.items():
        assert "Traceback" not in stdout + stderr, (prog, stderr)
        assert status in (0, 2), (prog, status, stderr)
        if status == 2:
            [line] = stderr.splitlines()[-1:]
            assert line.startswith(f"gradtui {prog}: ") and ("damaged" in line or "not a gradtui recording" in line)
            assert len([x for x in stderr.splitlines() if x.startswith(f"gradtui {prog}: ")]) == 1, stderr
        if status == 0:
            assert "damaged" not in stderr
        if os.path.exists(out):
            json.loads(open(out, encoding="utf-8").read())  # what was exported is a valid document
    lines = {prog: err.splitlines()[-1] if err.strip() else "" for prog, (_, _, err) in done.items()}
    either = " ".join(lines.values())
    if kind == "drop":
        assert all(status == 2 for status, _, _ in done.values()), lines
        assert f"{table} table" in either or "schema_version" in either, lines
    elif kind in ("cell", "column") and not any(key for t, c, _, key in COLUMNS if (t, c) == (table, column)):
        free_text = isinstance(value, str) and value == "{not json" and (table, column) not in JSON_COLUMNS
        if not free_text:  # a wrong value in a column that is read is named by one of the two
            assert any(status == 2 for status, _, _ in done.values()), (lines, done["replay"][1][-800:])
            assert column in either or "schema_version" in either, lines
