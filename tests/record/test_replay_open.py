"""Opening a long recording (a 1 GB recording opens and draws its passes view in a
second): the replay reads what its story and plots show, through indexes, so its SQLite work
does not grow with the run. Counts, not timings: SQLite's virtual-machine steps (a progress
handler), the rows of EXPLAIN QUERY PLAN, the events told.

The recordings here are written row by row with the recording schema (a run of thousands of
passes in a fraction of a second): passes with losses and flow, a few with per-node data, some
non-finite, output lines. What the reader answers is checked against the rows written."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.record import reader, replay, schema
from gradtui.record import story as stories
from gradtui.record.reader import Recording
from gradtui.record.replay import ReplayTarget

pytestmark = pytest.mark.timeout(120)

STEP = 5.0
"""Seconds a replay may take to queue a batch (it queues at once: a bound, not a timing)."""

LEAVES = ("enc.weight", "enc.bias", "head.weight")


def bad(i: int) -> bool:
    """The passes whose gradient is non-finite."""
    return i % 1000 == 7


def with_nodes(count: int) -> list[int]:
    """The passes with per-node data: two early ones and the last three."""
    return [3, 4, count - 3, count - 2, count - 1]


def norm(i: int, rank: int) -> float:
    return (i + 1) * (rank + 1) / 100


def make(path: str, count: int, per_pass_lines: int = 1) -> str:
    """A recording of `count` passes (see module doc)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(schema.SCHEMA)
    db.execute("INSERT INTO schema_version VALUES (?, ?)", (schema.APP, schema.VERSION))
    db.execute(
        "INSERT INTO run (id, script, argv, started, exit_status, per_node) VALUES (1, ?, ?, 0, 0, 'hooked')",
        ("/tmp/train.py", json.dumps(["train.py"])),
    )
    nodes = set(with_nodes(count))
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO passes (idx, call, call_text, call_site, losses, hooked, per_node, nodes, done, "
        "started, wall, grad_norm, nonfinite) VALUES (?, 'backward', 'loss.backward()', 'train.py:9', ?, "
        "?, ?, 3, 3, ?, 0.01, ?, ?)",
        [
            (
                i,
                json.dumps(["nan" if bad(i) else i / 10]),
                int(i in nodes),
                int(i in nodes),
                float(i),
                "nan" if bad(i) else float(i),
                int(bad(i)),
            )
            for i in range(count)
        ],
    )
    db.executemany(
        "INSERT INTO flow (pass, rank, name, node, shape, grad_norm, weight_norm, ratio, nonfinite) "
        "VALUES (?, ?, ?, 0, '[2]', ?, 1.0, 0.1, 0)",
        [(i, rank, name, norm(i, rank)) for i in range(count) for rank, name in enumerate(LEAVES)],
    )
    for i in sorted(nodes):  # a chain of three nodes, run in order 2, 1, 0
        db.executemany(
            "INSERT INTO nodes VALUES (?, ?, ?, 'op', NULL, NULL, 'train.py:5', NULL, ?, ?, ?)",
            [(i, n, f"Op{n}Backward0", 3 - n, json.dumps([n - 1] if n else []), n) for n in range(3)],
        )
        db.executemany(
            "INSERT INTO grads VALUES (?, ?, ?, 0, '[2]', 'float32', 'cpu', ?, 0.0, 1.0, 0.5, 0, NULL)",
            [(i, n, d, float(n + d)) for n in range(3) for d in (0, 1)],
        )
    db.executemany(
        "INSERT INTO output (pass, stream, text) VALUES (?, 'stdout', ?)",
        [(None, "loading\n"), (None, "ready\n")]
        + [(i, f"step {i} line {k}\n") for i in range(count) for k in range(per_pass_lines)],
    )
    db.execute("COMMIT")
    db.close()
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[int, str]:
    """A short run (500 passes) and a long one (20,000), made once for the module."""
    folder = tmp_path_factory.mktemp("long-recordings")
    return {count: make(str(folder / f"run{count}.db"), count) for count in (500, 20_000)}


class Traced:
    """Every statement a Recording runs and the SQLite steps it takes (in thousands of VM steps)."""

    def __init__(self, monkeypatch) -> None:
        self.statements: list[str] = []
        self.steps = 0
        connect = sqlite3.connect

        def traced(*args, **kwargs):
            connection = connect(*args, **kwargs)
            connection.set_trace_callback(self.statements.append)
            connection.set_progress_handler(self._step, 1000)
            return connection

        monkeypatch.setattr(reader.sqlite3, "connect", traced)

    def _step(self) -> int:
        self.steps += 1
        return 0


async def opened(
    path: str, target: ReplayTarget | None = None
) -> tuple[ReplayTarget, list[ev.Event], list[ev.Event], list]:
    """A replay started: the target, its story, its first pause and the figures the UI asks for."""
    target = target or ReplayTarget(path)
    await target.start()
    batches = target.batches().__aiter__()
    story = await asyncio.wait_for(batches.__anext__(), STEP)
    pause = await asyncio.wait_for(batches.__anext__(), STEP)
    return target, story, pause, target.figures()


def test_the_open_does_the_same_sqlite_work_for_a_run_40_times_longer(recordings, monkeypatch):
    monkeypatch.setattr(stories, "STORY_OUTPUT", 50)  # the short run has more earlier lines than told, as the long
    work = {}
    for count, path in recordings.items():
        traced = Traced(monkeypatch)
        target, story, pause, figures = asyncio.run(opened(path))
        work[count] = traced.steps
        asyncio.run(target.quit())
        assert len([e for e in story if isinstance(e, ev.PassStarted)]) == stories.STORY_PASSES
        assert len(figures) <= 2 * replay.FIGURE_POINTS + 1
    # the story and the plots read the same number of rows from both: a scan of the long run's
    # 20,000 passes (or its 60,000 flow rows) would be thousands of steps more
    assert work[20_000] <= 1.3 * work[500] + 50, work


@pytest.mark.parametrize("count", [500, 20_000])
def test_the_open_reads_tables_by_index_or_in_order_with_a_limit(recordings, monkeypatch, count):
    traced = Traced(monkeypatch)
    target, *_ = asyncio.run(opened(recordings[count]))
    asyncio.run(target.quit())
    connection = sqlite3.connect(f"file:{recordings[count]}?mode=ro", uri=True)
    try:
        selects = [s for s in dict.fromkeys(traced.statements) if s.lstrip().upper().startswith("SELECT")]
        assert len(selects) >= 10
        for statement in selects:
            plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + statement)]
            scans = [
                p
                for p in plan
                if p.startswith("SCAN ") and p.split()[1] in ("passes", "nodes", "grads", "flow", "output")
            ]
            # a walk of a table in its own order that stops at a LIMIT is bounded; a scan that
            # sorts, or has no limit, reads the whole table
            unbounded = [p for p in scans if "LIMIT" not in statement.upper() or any("TEMP B-TREE" in q for q in plan)]
            assert not unbounded, (statement, plan)
    finally:
        connection.close()


def test_figures_sample_the_run_evenly_with_its_first_non_finite_passes_and_its_last(recordings):
    count = 20_000
    with Recording(recordings[count]) as recording:
        figures = recording.figures(100)
    stride = count // 100
    expected = set(range(0, count, stride)) | {i for i in range(count) if bad(i)} | {count - 1}
    assert [f.index for f in figures] == sorted(expected)
    for f in figures:
        if bad(f.index):
            assert f.nonfinite == 1 and f.grad_norm != f.grad_norm and f.losses[0] != f.losses[0]  # NaN
        else:
            assert (f.nonfinite, f.grad_norm, f.losses) == (0, float(f.index), (f.index / 10,))
        assert f.norms == tuple((name, norm(f.index, rank)) for rank, name in enumerate(LEAVES))


def test_figures_keep_at_most_limit_non_finite_passes_the_first_ones(tmp_path):
    with Recording(make(str(tmp_path / "run.db"), 5000)) as recording:
        figures = recording.figures(3)
    assert [f.index for f in figures if f.nonfinite] == [7, 1007, 2007]  # of 7, 1007, ..., 4007
    assert [f.index for f in figures if not f.nonfinite] == [0, 1667, 3334, 4999]


async def test_a_long_recording_tells_its_last_passes_and_shows_any_pass_on_demand(recordings):
    count = 20_000
    target, story, pause, _ = await opened(recordings[count])
    started = [e.pass_index for e in story if isinstance(e, ev.PassStarted)]
    assert started == list(range(count - stories.STORY_PASSES, count))
    texts = [e.text for e in story if isinstance(e, ev.Output)]
    first_told = count - stories.STORY_PASSES
    assert texts[:2] == ["loading\n", "ready\n"]  # the lines before the first pass
    earlier = [f"step {i} line 0\n" for i in range(first_told - stories.STORY_OUTPUT, first_told)]
    assert texts[2 : 2 + stories.STORY_OUTPUT] == earlier  # the last lines of the passes not listed
    assert "are not listed" in texts[2 + stories.STORY_OUTPUT]
    told = texts[3 + stories.STORY_OUTPUT :]
    assert told == [f"step {i} line 0\n" for i in range(first_told, count)]
    # each told pass's line comes right after its PassFinished
    at = next(k for k, e in enumerate(story) if isinstance(e, ev.PassFinished) and e.pass_index == count - 1)
    assert story[at + 1] == ev.Output("stdout", f"step {count - 1} line 0\n")
    [paused] = [e for e in pause if isinstance(e, ev.Paused)]
    assert (paused.pass_index, paused.node) == (count - 1, 2)  # the last pass with nodes, its first to run
    # pass 4 is not in the story: its row and nodes are read when asked for
    target.submit(parse("pass 4"))
    batches = target.batches().__aiter__()
    events = await asyncio.wait_for(batches.__anext__(), STEP)
    assert [e.node for e in events if isinstance(e, ev.NodeRan)] == []  # its first node: none ran yet
    assert [(e.pass_index, e.node) for e in events if isinstance(e, ev.Paused)] == [(4, 2)]
    # walking on from pass 4's last node goes into the next pass with nodes, 19,997
    ran = []
    for _ in range(3):
        target.submit(parse("step"))
        events = await asyncio.wait_for(batches.__anext__(), STEP)
        ran += [e.node for e in events if isinstance(e, ev.NodeRan)]
    assert ran == [2, 1, 0]  # each as the walk passed it, in engine order
    assert [(e.pass_index, e.node) for e in events if isinstance(e, ev.Paused)] == [(count - 3, 2)]
    target.submit(parse("pass 5"))  # no per-node data: refused, naming the passes that have it
    [answer] = await asyncio.wait_for(batches.__anext__(), STEP)
    assert not answer.ok and f"3-4, {count - 3}-{count - 1}" in answer.text
    await target.quit()
    ends = await asyncio.wait_for(batches.__anext__(), STEP)
    assert [e.passes for e in ends if isinstance(e, ev.ScriptFinished)] == [count]


async def test_the_ui_story_tells_the_same_lines_in_one_piece_before_the_passes(recordings):
    """`gradtui replay` in the UI: the output pane gets the lines the transcript's story tells,
    in the same order, with no pass between them (the UI draws once, not once a pass)."""
    from gradtui.cli.replay import ui_target

    path = recordings[500]
    transcript, told, *_ = await opened(path)
    ui, grouped, *_ = await opened(path, ui_target(path))
    await transcript.quit()
    await ui.quit()
    lines = [e for e in told if isinstance(e, ev.Output)]
    assert [e for e in grouped if isinstance(e, ev.Output)] == lines and len(lines) > stories.STORY_PASSES
    first_pass = next(k for k, e in enumerate(grouped) if isinstance(e, ev.PassStarted))
    assert all(isinstance(e, ev.Output) for e in grouped[1:first_pass])
    assert not any(isinstance(e, ev.Output) for e in grouped[first_pass:])

    def passes(story):
        return [(type(e).__name__, e.pass_index) for e in story if isinstance(e, (ev.PassStarted, ev.PassFinished))]

    assert passes(grouped) == passes(told)
