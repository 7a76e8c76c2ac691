"""Recording figures: opening a 1 GB recording in `gradtui replay` and drawing its
passes view (<= 1 s), and what the recorder costs per node it writes.

    python benchmarks/bench_record.py              # both (makes a 1 GB file in a temp folder, deletes it)
    python benchmarks/bench_record.py --size-mb 200 --only replay

The 1 GB recording is a real one (a 2-layer d=64 encoder loop under `gradtui --headless --record
--record-every 1`) whose passes are copied in SQL, under new pass numbers, until the file is
that big: the shape of a long run's recording without a long run. bench.py's `record` group
calls `bench_replay_open` and `bench_recorder` too.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import ENCODER_LOOP  # noqa: E402
from benchtable import Row, add, median, ms, print_table  # noqa: E402

LOOP = ENCODER_LOOP + '    print("step", step, float(loss), flush=True)\n'


def record_loop(folder: str, steps: int, layers: int, *extra: str) -> tuple[str, float]:
    """Record LOOP under `gradtui --headless --record` (per-node data of every pass); its path and run time."""
    script = os.path.join(folder, "loop.py")
    Path(script).write_text(LOOP, encoding="utf-8")
    db = os.path.join(folder, "seed.db")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradtui",
            "--headless",
            "--record",
            db,
            "--record-every",
            "1",
            *extra,
            "-c",
            "continue",
            script,
            str(steps),
            str(layers),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(f"the recording run failed:\n{done.stderr[-2000:]}")
    return db, time.perf_counter() - start


def grow(db: str, size: int) -> int:
    """Copy the recording's passes (their nodes, statistics, flow and output lines) under new
    numbers until the file is at least `size` bytes; its pass count."""
    connection = sqlite3.connect(db, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    try:
        while True:
            count = connection.execute("SELECT count(*) FROM passes").fetchone()[0]
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if os.path.getsize(db) >= size:
                return count
            connection.execute("BEGIN")
            connection.execute(
                "INSERT INTO passes SELECT idx + ?, call, call_text, call_site, losses, hooked, per_node, "
                "nodes, done, error, failed_node, started, wall, grad_norm, nonfinite, nested FROM passes",
                (count,),
            )
            for table in ("nodes", "grads", "flow"):
                columns = [r[1] for r in connection.execute(f"PRAGMA table_info({table})")]
                shifted = ", ".join("pass + ?" if c == "pass" else c for c in columns)
                connection.execute(f"INSERT INTO {table} SELECT {shifted} FROM {table}", (count,))
            # the script's lines too (a line a step), after the others: an output line's seq is its rowid
            connection.execute(
                "INSERT INTO output (pass, stream, text) SELECT pass + ?, stream, text FROM output "
                "WHERE pass IS NOT NULL ORDER BY seq",
                (count,),
            )
            connection.execute("COMMIT")
    finally:
        connection.close()


async def open_and_draw(db: str) -> tuple[float, float, int]:
    """Seconds from starting the replay UI to its passes view drawn with its plots (the replay
    opens on it), and to the debugger drawn at the run's stop after escape (Pilot, 120x40); the
    points plotted."""
    from gradtui.cli.replay import settle_heap, ui_target
    from gradtui.ui.app import GradtuiApp
    from gradtui.ui.screens.passes import PassesScreen
    from gradtui.ui.widgets.plots import SeriesPlot

    gc.collect()  # the rounds before this one's garbage: `gradtui replay` starts without any
    settle_heap()  # as `gradtui replay` does once its imports are done
    start = time.perf_counter()
    app = GradtuiApp(target=ui_target(db), passes_first=True)  # as `gradtui replay DB` makes it
    async with app.run_test(size=(120, 40)) as pilot:

        async def until(predicate, what: str, timeout: float = 300) -> None:
            deadline = time.perf_counter() + timeout
            while not predicate():
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"timed out waiting for {what}")
                await pilot.pause(0.005)

        await until(
            lambda: (
                isinstance(app.screen, PassesScreen)
                and app.screen.query(SeriesPlot)
                and all(p.drawn_version == app.state.series.version for p in app.screen.query(SeriesPlot))
            ),
            "the passes view's plots",
        )
        await pilot.pause()
        drawn = time.perf_counter() - start
        points = len(app.state.series.points)
        await pilot.press("escape")
        await until(
            lambda: not isinstance(app.screen, PassesScreen) and app.state.paused is not None, "the replay's pause"
        )
        await pilot.pause()
        paused = time.perf_counter() - start
        await pilot.press("q")
    return drawn, paused, points


def bench_replay_open(size_mb: int = 1024, rounds: int = 3) -> None:
    """The row: a `size_mb` recording opened in replay, its passes view drawn (<= 1 s)."""
    with tempfile.TemporaryDirectory(prefix="gradtui-bench-") as folder:
        db, _ = record_loop(folder, 5, 2)
        passes = grow(db, size_mb * 2**20)
        size = os.path.getsize(db)
        results = [asyncio.run(open_and_draw(db)) for _ in range(rounds)]
    drawn, paused = median([r[0] for r in results]), median([r[1] for r in results])
    add(
        Row(
            "replay: a recording opened and its passes view drawn (plots)",
            f"{size / 2**30:.2f} GB, {passes:,} passes with per-node data (2-layer encoder d=64), 120x40",
            ms(drawn),
            f"{ms(paused)} to the debugger drawn after escape; {results[0][2]} points plotted",
            None,
            "<= 1 s",
            drawn <= 1.0,
        )
    )


def bench_recorder(steps: int = 20, layers: int = 4, rounds: int = 3) -> None:
    """What the recorder itself costs: the events of a real `--record-every 1` run fed to a fresh
    Recorder, its time per NodeRan written, beside the run's own time per node."""
    import torch

    from gradtui.engine.process.runner import ScriptRunner
    from gradtui.engine.session import Session
    from gradtui.protocol import events as ev
    from gradtui.record.store import Recorder

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="gradtui-bench-") as folder:
        script = os.path.join(folder, "loop.py")
        Path(script).write_text(LOOP, encoding="utf-8")
        session = Session(full_stats=False, hook_all_passes=True, flow_unhooked=True)
        events: list[ev.Event] = []
        session.add_listener(events.append)
        session.run_on()
        start = time.perf_counter()
        ScriptRunner(script, [str(steps), str(layers)], session).run()
        run = time.perf_counter() - start
        nodes = sum(isinstance(e, ev.NodeRan) for e in events)
        times = []
        for i in range(rounds):
            recorder = Recorder(os.path.join(folder, f"r{i}.db"), every=1)
            start = time.perf_counter()
            for event in events:
                recorder(event)
            recorder.close()
            times.append(time.perf_counter() - start)
            if recorder.failed:
                raise RuntimeError(recorder.failed)
    cost = median(times)
    add(
        Row(
            "recorder: per-node data of every pass written (events of a real run fed to a Recorder)",
            f"{steps} steps, {layers}-layer encoder d=64, {nodes:,} NodeRan",
            f"{cost / nodes * 1e6:.1f} us/node ({ms(cost)})",
            f"{run / nodes * 1e6:.1f} us/node the hooked run itself",
            cost / run,
            "-",
            None,
        )
    )


def main() -> None:
    """Run the recording figures, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the replayed recording (default 1024)")
    parser.add_argument("--only", default="replay,recorder", help="replay, recorder or both (comma-separated)")
    options = parser.parse_args()
    only = set(options.only.split(","))
    began = time.perf_counter()
    if "recorder" in only:
        bench_recorder()
    if "replay" in only:
        bench_replay_open(options.size_mb)
    print_table(f"gradtui bench_record: took {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
