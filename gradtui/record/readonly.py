"""Open a recording for reading only, leaving its folder as it was found.

A recording is a SQLite database in WAL mode (gradtui.record.store), and WAL mode is a property
of the file: a plain read-only open (`mode=ro`) of such a file still creates `-wal` and `-shm`
files beside it, to share the WAL index with writers. `gradtui diff` and a replay only read, so
they must not write beside the files they are given (a read-only folder, a checksummed
artefact, a recording someone else owns).

Where no `-wal` file is beside the database, everything the writer committed is in the file
itself and nobody is writing it (a writer keeps its `-wal` while it has the file open), so the
file is opened `immutable`: no locks, no WAL index, nothing created. Where a `-wal` is there (a
run still recording, or one killed before it checkpointed) its committed pages are only in
that file, so it is opened `mode=ro` and read through the WAL as SQLite does; that case already
has the files beside it.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote


def uri(path: str) -> str:
    """The SQLite URI that opens `path` read-only (immutable where no writer can be behind it)."""
    flags = "mode=ro" if os.path.exists(path + "-wal") else "mode=ro&immutable=1"
    return f"file:{quote(os.path.abspath(path))}?{flags}"


def connect(path: str) -> sqlite3.Connection:
    """`path` opened read-only (see the module doc), usable from any one thread at a time."""
    return sqlite3.connect(uri(path), uri=True, check_same_thread=False)
