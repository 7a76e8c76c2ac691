"""How a recorded run ended, when the run's own process could not write it.

A recording's writer lives in the script's process: a run that ends by `os._exit`, a signal or
a crash dies before its `run` row gets its end, which is left empty. The process that started
the run (the UI's supervisor of its child agent) sees the status and writes it in (`note_ending`),
only where the row has none. Where nobody could (a headless or --listen run is the script's own
process), the row stays empty and readers say the end is unknown (`UNKNOWN_END`), never a status
nobody saw.
"""

from __future__ import annotations

import sqlite3
import time

UNKNOWN_END = (
    "ended without its recording saying how (its process died before writing it: os._exit, "
    "a signal, a crash; or it is still running)"
)
"""What a reader says of a run whose `run` row has no end."""

WRITE_TIMEOUT = 5.0
"""Seconds to wait for the database's lock (the dead writer holds none; a reader may)."""


def note_ending(path: str, status: int, how: str) -> None:
    """Write into recording `path` that its run ended with `status`, as `how` says ("was killed
    by SIGSEGV (Segmentation fault)"), unless its row already holds an end. A recording that
    cannot be written is left as it is (its end then reads as unknown)."""
    try:
        db = sqlite3.connect(path, timeout=WRITE_TIMEOUT)
    except sqlite3.Error:
        return
    try:
        with db:
            db.execute(
                "UPDATE run SET finished = ?, exit_status = ?, how = ? WHERE id = 1 AND finished IS NULL",
                (time.time(), status, how),
            )
    except sqlite3.Error:
        pass
    finally:
        db.close()
