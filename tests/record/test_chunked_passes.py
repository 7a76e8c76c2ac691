"""A long pass's rows are written in chunks while it runs, inside the pass's transaction: the
recording reads back exactly as one written when the pass ended; a pause in the pass (a `nan`
breakpoint hit) commits the hit but no part of the pass; a run killed in the middle of a pass
leaves a recording without that pass.

Chunks are made small here (`ROWS_CHUNK`) so that a pass of a few hundred nodes writes several;
SQLite's own trace of the statements it runs shows that they were written."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys

import msgspec
import pytest
import torch

from gradtui.clients.headless import HeadlessDriver
from gradtui.engine.process.runner import ScriptRunner
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.record import store
from gradtui.record.reader import Recording
from gradtui.record.store import Recorder
from tests.helpers import REPO, interrupting

pytestmark = pytest.mark.timeout(180)

LEAVES = 300
"""Leaves summed per pass: 602 nodes, about 1,200 `grads` rows."""

SCRIPT = f"""
import torch
torch.manual_seed(0)
for step in range(3):
    leaves = [torch.randn(4, requires_grad=True) for _ in range({LEAVES})]
    parts = [p.sum() for p in leaves]
    if step == 1:  # a NaN made half-way through the pass: the `nan` breakpoint pauses there
        parts[{LEAVES // 2}] = parts[{LEAVES // 2}] * float("nan")
    loss = torch.stack(parts).sum()
    loss.backward()
    print("step", step, float(leaves[0].grad.sum()))
"""

TABLES = {
    "passes": "idx, call, call_text, call_site, losses, hooked, per_node, nodes, done, error, failed_node, "
    "grad_norm, nonfinite, nested",  # not `started` or `wall`: times
    "nodes": "*",
    "grads": "*",
    "flow": "*",
    "hits": "seq, pass, node, breakpoint, spec",
    "output": "seq, pass, stream, text",
}


def _tables(db: str) -> dict[str, list[tuple]]:
    """Every row of the recording's tables that a run writes (less its times), in key order (the
    first two columns are each table's key, or begin it)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return {
            table: connection.execute(f"SELECT {columns} FROM {table} ORDER BY 1, 2").fetchall()
            for table, columns in TABLES.items()
        }


def _record(script: str, db: str, watch=None) -> None:
    """Run `script` as `--headless -c 'break nan' -c continue -c continue --record db` runs it, in
    this process; `watch` (a listener after the recording's) sees every event."""
    session = Session(full_stats=True)
    recorder = Recorder(db)
    session.add_listener(recorder)
    if watch is not None:
        session.add_listener(watch, graph=False)
    session.add_listener(HeadlessDriver(session, ["break nan", "continue", "continue"], io.StringIO(), io.StringIO()))
    runner = ScriptRunner(script, [], session)
    thread = runner.start()
    thread.join(120)
    if thread.is_alive():
        runner.stop(5.0)
        pytest.fail(f"{script} did not end")
    recorder.close()
    assert runner.exit_status == 0 and recorder.failed is None


@pytest.fixture
def traced(monkeypatch) -> list[str]:
    """The statements run on every SQLite connection opened from now on (sqlite3's trace)."""
    statements: list[str] = []
    connect = sqlite3.connect

    def tracing(*args, **kwargs):
        connection = connect(*args, **kwargs)
        connection.set_trace_callback(statements.append)
        return connection

    monkeypatch.setattr(sqlite3, "connect", tracing)
    return statements


def test_a_pass_written_in_chunks_reads_back_as_one_written_when_it_ended(tmp_path, monkeypatch, traced):
    script = tmp_path / "leaves.py"
    script.write_text(SCRIPT, encoding="utf-8")
    monkeypatch.setattr(store, "ROWS_CHUNK", 10**9)  # every pass written when it ends
    _record(str(script), str(tmp_path / "whole.db"))
    assert not any("SAVEPOINT chunk" in s for s in traced)
    traced.clear()

    seen: dict[str, object] = {}

    def at_the_hit(event: ev.Event) -> None:
        """At the `nan` pause of pass 1: the chunks written so far, and what is committed, read from
        another connection (asserted after the run: a listener's exception would end the script)."""
        if not isinstance(event, ev.Paused) or event.pass_index != 1 or seen:
            return
        seen["chunks"] = sum("RELEASE chunk" in s for s in traced)
        seen["taken back"] = any(s.startswith("SELECT") and "FROM grads WHERE pass = 1" in s for s in traced)
        with sqlite3.connect(f"file:{tmp_path / 'chunks.db'}?mode=ro", uri=True) as other:
            for what, sql in (
                ("hits", "SELECT pass, spec FROM hits"),
                ("passes", "SELECT idx FROM passes"),
                ("grads 1", "SELECT COUNT(*) FROM grads WHERE pass = 1"),
                ("nodes 1", "SELECT COUNT(*) FROM nodes WHERE pass = 1"),
                ("grads 0", "SELECT COUNT(*) FROM grads WHERE pass = 0"),
            ):
                seen[what] = other.execute(sql).fetchall()

    monkeypatch.setattr(store, "ROWS_CHUNK", 64)
    _record(str(script), str(tmp_path / "chunks.db"), at_the_hit)
    assert seen.pop("chunks") >= 2  # pass 1 wrote chunks before the pause (a NaN half-way: ~600 rows)
    assert seen.pop("taken back")  # and the hit's commit took them back out
    grads_0 = seen.pop("grads 0")
    assert seen == {"hits": [(1, "nan")], "passes": [(0,)], "grads 1": [(0,)], "nodes 1": [(0,)]}
    chunked = sum("RELEASE chunk" in s for s in traced)

    whole, chunks = _tables(str(tmp_path / "whole.db")), _tables(str(tmp_path / "chunks.db"))
    assert [len(whole["passes"]), len(whole["hits"])] == [3, 1]
    rows = [sum(row[0] == index for row in whole["grads"]) for index in range(3)]
    assert min(rows) >= 4 * LEAVES and len(whole["nodes"]) >= 3 * 2 * LEAVES and whole["flow"]
    assert chunks == whole
    assert grads_0 == [(rows[0],)]  # pass 0 was whole at the pause
    assert chunked >= (rows[0] + rows[2]) // (64 + LEAVES)  # passes 0 and 2 in chunks (a node: up to 301 rows)
    with Recording(str(tmp_path / "chunks.db")) as recording:
        assert recording.damage == []
        assert [p.index for p in recording.passes() if p.per_node] == [0, 1, 2]


CUT = f"""
import os, signal, sqlite3, sys
import torch
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.record import store

store.ROWS_CHUNK = 64
traced = []
connect = sqlite3.connect

def tracing(*args, **kwargs):
    connection = connect(*args, **kwargs)
    connection.set_trace_callback(traced.append)
    return connection

sqlite3.connect = tracing
recorder = store.Recorder(sys.argv[1], torch_version=torch.__version__)
recorder(ev.ScriptStarted("cut.py", ("cut.py",)))
session = Session(None, provenance=False, full_stats=False)
session.add_listener(recorder)

def cut(event):  # after the recording's listener: pass 1 has written chunks, not ended
    if isinstance(event, ev.PassStarted):
        traced.clear()
    elif isinstance(event, ev.NodeRan) and event.pass_index == 1 and sum("RELEASE chunk" in s for s in traced) >= 3:
        print("cut", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

session.add_listener(cut, graph=False)
session.submit(parse("break nan"))
session.run_on()
torch.manual_seed(0)
for step in range(2):
    leaves = [torch.randn(4, requires_grad=True) for _ in range({LEAVES})]
    loss = torch.stack([p.sum() for p in leaves]).sum()
    with session:
        loss.backward()
    print("step", step, flush=True)
"""


def test_a_recording_cut_mid_pass_reads_back_without_that_pass(tmp_path):
    db = str(tmp_path / "run.db")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", CUT, db], capture_output=True, text=True, timeout=120, cwd=REPO, env=env
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.splitlines() == ["step 0", "cut"]
    with Recording(db) as recording:
        assert recording.damage == []
        assert [(p.index, p.per_node, p.done) for p in recording.passes()] == [(0, True, 602)]
        assert len(recording.stats(0)) == 602
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        for table in ("grads", "nodes", "flow"):
            assert connection.execute(f"SELECT COUNT(*) FROM {table} WHERE pass = 1").fetchone() == (0,), table
        # pass 0 whole: the loss's sum (in, out), the stack (in, a slot per part), each part's sum
        # (in, out) and each accumulator (in)
        assert connection.execute("SELECT COUNT(*) FROM grads WHERE pass = 0").fetchone() == (4 * LEAVES + 3,)


@pytest.mark.parametrize("where", ["a chunk", "the pass's last write"])
def test_an_interrupt_inside_a_chunk_loses_and_repeats_no_row(tmp_path, monkeypatch, where):
    """The chunk (or the pass's last write, when its last node's rows are cut) is undone to its
    savepoint, the pass's earlier chunks stay in its transaction, and the rows undone are
    written with the next write: the recording equals one never interrupted."""
    events: list[ev.Event] = []
    session = Session(None, provenance=False, full_stats=True)
    session.add_listener(events.append)
    session.run_on()
    torch.manual_seed(0)
    leaves = [torch.randn(4, requires_grad=True) for _ in range(LEAVES)]
    loss = torch.stack([p.sum() for p in leaves]).sum()
    with session:
        loss.backward()
    ran = [k for k, e in enumerate(events) if isinstance(e, ev.NodeRan)]
    assert len(ran) == 2 * LEAVES + 2
    middle = ran[len(ran) // 2] if where == "a chunk" else ran[-1]
    first = events[middle].grad_outputs[0]  # type: ignore[union-attr]
    dtype = interrupting(first.dtype)
    cut = msgspec.structs.replace(
        events[middle],  # type: ignore[type-var]
        grad_outputs=(msgspec.structs.replace(first, dtype=dtype),),
    )
    monkeypatch.setattr(store, "ROWS_CHUNK", 64)
    for name, feed in (("clean", events), ("interrupted", [*events[:middle], cut, *events[middle + 1 :]])):
        recorder = Recorder(str(tmp_path / f"{name}.db"))
        recorder(ev.ScriptStarted("leaves.py", ("leaves.py",)))
        interrupted: list[type] = []
        for event in feed:
            try:
                recorder(event)
            except KeyboardInterrupt:
                interrupted.append(type(event))
        recorder(ev.ScriptFinished(0))
        recorder.close()
        assert recorder.failed is None
        if name == "interrupted":  # a node's rows fill a chunk; the pass's end writes the rest
            assert interrupted == [ev.NodeRan if where == "a chunk" else ev.PassFinished]
        else:
            assert interrupted == []
    assert not dtype.armed
    clean, interrupted = _tables(str(tmp_path / "clean.db")), _tables(str(tmp_path / "interrupted.db"))
    assert len(clean["grads"]) == 4 * LEAVES + 3
    assert interrupted == clean
