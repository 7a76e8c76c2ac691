"""What a default recording costs per pass, counted: `gradtui --headless -c continue --record`
(and `--flight K`) keeps no per-node data for most passes, but every pass keeps its row, its
gradient flow (one row per parameter) and the lines it printed, so a recording grows with the
run without limit (docs/recording.md gives the measured figures of a 100,000-pass run).

Two runs of the same small training loop, N and 2N passes: the rows the second N passes added,
table by table, are exactly one pass row, one flow row per parameter and one output row (the
line each pass prints), and nothing else grows; the bytes they added per pass stay under a
ceiling a little above what a pass costs now. More rows or more bytes per pass fail here.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.timeout(300)

SCRIPT = REPO / "tests" / "fixtures" / "agent" / "many_passes.py"
"""A Linear(8, 8), Tanh, Linear(8, 1) loop: four parameters; each pass prints `pass I`."""
PARAMETERS = 4
PASSES = 300
BYTES_PER_PASS = 540
"""The ceiling on what a pass adds to the file. Measured: ~480 bytes (its row, four flow rows
and their index entries, one output row), +-15 from where SQLite's 4 KiB pages end."""
GROWING = {"passes": 1, "flow": PARAMETERS, "output": 1}
"""Rows a pass adds, by table; every other table stays as it is."""


def _record(folder: Path, passes: int, *flags: str) -> tuple[int, dict[str, int]]:
    """`gradtui --headless -c continue --record` of `passes` passes: the file's size in bytes
    once the run has ended (its write-ahead log checkpointed), and each table's rows."""
    db = folder / f"run-{passes}.db"
    done = subprocess.run(
        [sys.executable, "-m", "gradtui", "--headless", "-c", "continue", "--record", str(db), *flags]
        + [str(SCRIPT), str(passes)],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert f"pass {passes - 1}\n" in done.stdout
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables = [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = {name: con.execute(f"SELECT count(*) FROM {name}").fetchone()[0] for name in tables}
    con.close()
    return db.stat().st_size, rows


@pytest.mark.parametrize("flags", [(), ("--flight", "5")], ids=["default", "flight"])
def test_a_recording_grows_by_one_pass_row_its_flow_and_its_output_per_pass(tmp_path, flags):
    small_size, small = _record(tmp_path, PASSES, *flags)
    large_size, large = _record(tmp_path, 2 * PASSES, *flags)
    assert small.keys() == large.keys()
    added = {table: (large[table] - small[table]) / PASSES for table in large}
    assert added == {table: GROWING.get(table, 0) for table in large}, added
    per_pass = (large_size - small_size) / PASSES
    assert 0 < per_pass <= BYTES_PER_PASS, f"{per_pass:.0f} bytes per pass"
