"""The recording: what a run leaves in its database, read back and exported.

In-process runs (Session + ScriptRunner + Recorder) for the store's content, checked against
torch's own numbers and against the live report of the same run; subprocess runs of the CLI
for the flight recorder's acceptance test."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from gradtui.clients.headless import HeadlessDriver
from gradtui.engine.process.runner import ScriptRunner
from gradtui.engine.session import Session
from gradtui.protocol.report import Report
from gradtui.record import schema
from gradtui.record.export import to_json
from gradtui.record.reader import Recording
from gradtui.record.store import Recorder, check_path
from tests.helpers import script
from tests.processes import flight_recording, gradtui

pytestmark = pytest.mark.timeout(120)

CULPRIT = """
SELECT g.pass, n.id, n.op, n.source
FROM grads g JOIN nodes n ON n.pass = g.pass AND n.id = g.node
WHERE g.dir = 1 AND g.nonfinite > 0
  AND NOT EXISTS (SELECT 1 FROM grads i
                  WHERE i.pass = g.pass AND i.node = g.node AND i.dir = 0 AND i.nonfinite > 0)
ORDER BY g.pass, n.ord LIMIT 1
"""
"""docs/recording.md's query: the first node that sent on a non-finite gradient it did not receive."""


def record(
    path: str, db: str, commands=("continue",), args=(), report: Report | None = None, **recorder
) -> tuple[int, Recorder]:
    """Run `path` under a session with a Recorder (and a report), in a thread with a timeout."""
    session = Session(full_stats=True)
    rec = Recorder(db, **recorder)
    session.add_listener(rec)
    if report is not None:
        session.add_listener(report)
    import io

    session.add_listener(HeadlessDriver(session, list(commands), io.StringIO(), io.StringIO()))
    runner = ScriptRunner(path, list(args), session)
    thread = runner.start()
    thread.join(60)
    if thread.is_alive():
        runner.stop(5.0)
        pytest.fail(f"{path} did not end")
    rec.close()
    return runner.exit_status, rec


def script_norms(lines) -> dict[int, list[float]]:
    """The per-step gradient norms nan_at_30.py printed, as torch computed them."""
    out = {}
    for line in "".join(lines).splitlines():
        if line.startswith("step "):
            words = line.split()
            out[int(words[1])] = [float(w) for w in words[3:]]
    return out


def same(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (
        a is not None and b is not None and (a == b or math.isnan(a) and math.isnan(b))
    )


def test_every_pass_loss_and_flow_match_torch(tmp_path):
    db = str(tmp_path / "run.db")
    status, rec = record(script("nan_at_30.py"), db, args=["35"])
    assert status == 0 and rec.failed is None
    with Recording(db) as recording:
        passes = recording.passes()
        assert [p.index for p in passes] == list(range(35))
        printed = script_norms(line.text for line in recording.output())
        names = ["0.weight", "0.bias", "2.weight", "2.bias"]
        for p in passes:
            by_name = {r.name: r.grad_norm for r in recording.flow(p.index)}
            assert sorted(by_name) == sorted(names)
            for name, expected in zip(names, printed[p.index]):
                assert same(by_name[name], expected), (p.index, name, by_name[name], expected)
            assert (p.nonfinite > 0) == (p.index == 30)
        run = recording.run()
        assert run.exit_status == 0 and run.script.endswith("nan_at_30.py") and run.argv[1:] == ("35",)


def test_the_export_is_the_live_report(tmp_path):
    """Every hooked pass recorded node by node: the export of the database equals the report
    the same run built from its events (NaN-aware, via strict JSON)."""
    db, out = str(tmp_path / "run.db"), str(tmp_path / "export.json")
    report = Report()
    status, rec = record(
        script("nan_at_30.py"),
        db,
        commands=["break nan", "continue", "step", "zero", "continue"],
        args=["32"],
        report=report,
    )
    assert status == 0 and rec.failed is None
    assert to_json(db, out) is None
    exported = json.loads(open(out, encoding="utf-8").read())
    live = json.loads(json.dumps(report.to_json()))
    assert exported == live
    assert exported["breakpoint_hits"] and exported["edits"]  # the run hit and edited something
    assert sum(1 for p in exported["passes"] if p["nodes"]) >= 1


def test_record_every_n_keeps_nodes_of_every_nth_pass_and_flow_of_all(tmp_path):
    db = str(tmp_path / "run.db")
    session_passes = 12
    status, rec = record(script("nan_at_30.py"), db, args=[str(session_passes)], every=4)
    assert status == 0
    with Recording(db) as recording:
        passes = recording.passes()
        assert [p.index for p in passes if p.per_node] == [0, 4, 8]
        assert all(recording.flow(p.index) for p in passes)
        assert recording.graph(4).number_of_nodes() == passes[4].nodes
        assert not recording.graph(5)


def test_flight_recorder_acceptance():
    """The flight recorder's reference run: `--flight 5 -c 'break nan' -c continue --record run.db` leaves
    per-node statistics of passes 26-30, loss and flow of every pass, and docs/recording.md's query
    names the culprit node (the sqrt whose backward divides by zero)."""
    made = flight_recording()
    db, done = made.path, made.run
    assert done.returncode == 0, done.stderr[-2000:]
    connection = sqlite3.connect(db)
    try:
        assert [r[0] for r in connection.execute("SELECT DISTINCT pass FROM nodes ORDER BY pass")] == [
            26,
            27,
            28,
            29,
            30,
        ]
        assert [r[0] for r in connection.execute("SELECT DISTINCT pass FROM grads ORDER BY pass")] == [
            26,
            27,
            28,
            29,
            30,
        ]
        assert connection.execute("SELECT count(*) FROM passes").fetchone()[0] == 40
        assert connection.execute("SELECT count(DISTINCT pass) FROM flow").fetchone()[0] == 40
        assert connection.execute("SELECT min(pass) FROM flow WHERE nonfinite > 0").fetchone()[0] == 30
        pass_, node, op, source = connection.execute(CULPRIT).fetchone()
        assert (pass_, op, source) == (30, "SqrtBackward0", "nan_at_30.py:17")
        assert connection.execute("SELECT pass, node FROM hits").fetchall() == [(30, node)]
    finally:
        connection.close()


def test_flight_ring_is_written_when_the_script_fails(tmp_path):
    db = str(tmp_path / "run.db")
    path = tmp_path / "fails.py"
    path.write_text(
        "import torch\nw = torch.ones(3, requires_grad=True)\n"
        "for i in range(10):\n    (w * i).sum().backward()\nraise ValueError('late')\n",
        encoding="utf-8",
    )
    status, _ = record(str(path), db, flight=3)
    assert status == 1
    with Recording(db) as recording:
        assert [p.index for p in recording.passes() if p.per_node] == [
            8,
            9,
        ]  # the ring: the last K-1 passes (no pass in flight)
        assert "ValueError: late" in recording.run().error


@pytest.mark.timeout(300)  # five CLI runs in a row: past 120 s when the 2 cores are shared by five suites
def test_bad_recording_paths_are_refused_before_the_script_runs(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("my notes\n", encoding="utf-8")
    newer = tmp_path / "newer.db"
    connection = sqlite3.connect(newer)
    connection.executescript(
        f"CREATE TABLE schema_version (app TEXT, version INTEGER);"
        f"INSERT INTO schema_version VALUES ('gradtui', {schema.VERSION + 1});"
    )
    connection.commit()
    connection.close()
    other = tmp_path / "other.db"
    sqlite3.connect(other).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    for bad, why in [
        (text, "not a gradtui recording"),
        (newer, "newer gradtui"),
        (other, "not a gradtui recording"),
        (text / "run.db", "cannot create"),
        (tmp_path, "it is a directory"),
    ]:
        assert why in (check_path(str(bad)) or ""), bad
        done = gradtui("--headless", "--record", str(bad), script("chain.py"))
        assert done.returncode == 2
        ours = [line for line in done.stderr.splitlines() if line.startswith("gradtui:")]
        assert len(ours) == 1 and "cannot record to" in ours[0] and why in ours[0], done.stderr
        assert "pass 0" not in done.stdout  # the script never ran
    assert text.read_text(encoding="utf-8") == "my notes\n"
    assert sqlite3.connect(other).execute("SELECT x FROM t").fetchall() == [(1,)]


def test_a_full_disk_stops_the_recording_and_keeps_what_was_written(tmp_path):
    db = str(tmp_path / "run.db")
    session = Session(full_stats=True)
    rec = Recorder(db)
    pages = rec._db.execute("PRAGMA page_count").fetchone()[0]  # noqa: SLF001 - a disk that fills after a few passes
    rec._db.execute(f"PRAGMA max_page_count = {pages + 8}")  # noqa: SLF001
    session.add_listener(rec)
    import io

    session.add_listener(HeadlessDriver(session, ["continue"], io.StringIO(), io.StringIO()))
    runner = ScriptRunner(script("nan_at_30.py"), ["20"], session)
    thread = runner.start()
    thread.join(60)
    assert not thread.is_alive()
    assert runner.exit_status == 0  # the script ran to its end
    assert rec.failed and "full" in rec.failed
    rec.close()
    with Recording(db) as recording:
        kept = recording.passes()
        assert 0 < len(kept) < 20
        assert [p.index for p in kept] == list(range(len(kept)))


def test_a_recording_that_cannot_grow_mid_run_is_one_line_and_the_run_ends_with_its_status(tmp_path):
    """Through the command line: the file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the
    database's writes fail a few passes in, as a full disk does; the script runs to its end, one
    line says the recording stopped, the status is OUTPUT_FAILED (2), and what was written opens."""
    import resource
    import signal

    db = tmp_path / "run.db"
    limit = 256 * 1024  # the schema and a few passes of nan_at_30.py's per-node data

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = gradtui(
        "--headless",
        "--record",
        str(db),
        "--record-every",
        "1",
        "-c",
        "continue",
        script("nan_at_30.py"),
        "40",
        preexec_fn=small_files,
    )
    assert done.stdout.count("step ") == 40  # the script ran to its end
    ours = [line for line in done.stderr.splitlines() if line.startswith("gradtui:")]
    assert len(ours) == 1 and ours[0].startswith(f"gradtui: the recording {db} stopped: "), done.stderr
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    with Recording(str(db)) as recording:
        kept = recording.passes()
        assert 0 < len(kept) < 40
        assert [p.index for p in kept] == list(range(len(kept)))
        assert all(p.per_node and recording.stats(p.index) for p in kept)


def test_a_recorded_graph_holds_the_node_infos_the_live_run_had(tmp_path):
    """The reader makes the very NodeInfo the capture made (its path and line from the source,
    relative to the script's folder), less the saved values a recording does not keep; the
    recorded `order` is each node's place in its pass, beside it."""
    import dataclasses
    import os

    from gradtui.protocol import events as ev
    from gradtui.protocol.nodes import NodeInfo, node_info

    db = str(tmp_path / "run.db")
    seen: list[ev.Event] = []
    session = Session(full_stats=True)
    session.add_listener(lambda e: seen.append(e) if isinstance(e, (ev.PassStarted, ev.NodeRan)) else None)
    rec = Recorder(db)
    session.add_listener(rec)
    import io

    session.add_listener(HeadlessDriver(session, ["continue"], io.StringIO(), io.StringIO()))
    path = script("twofile/train.py")
    runner = ScriptRunner(path, [], session)
    thread = runner.start()
    thread.join(60)
    assert not thread.is_alive() and runner.exit_status == 0
    rec.close()
    live = next(e for e in seen if isinstance(e, ev.PassStarted)).graph
    order = {e.node: e.order for e in seen if isinstance(e, ev.NodeRan) and e.pass_index == 0}
    with Recording(db) as recording:
        recorded = recording.graph(0, os.path.dirname(path))
        bare = recording.graph(0)
    assert sorted(recorded) == sorted(live) and len(live) > 5
    for n in live:
        info = node_info(recorded, n)
        assert type(info) is NodeInfo and info == dataclasses.replace(node_info(live, n), saved=())
        assert node_info(bare, n).path is None and node_info(bare, n).source == info.source
        assert recorded.nodes[n]["order"] == order.get(n)
    assert any(node_info(live, n).path for n in live) and any(node_info(live, n).saved for n in live)
