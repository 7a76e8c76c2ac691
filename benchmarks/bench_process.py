"""bench.py's whole-process and memory rows: RSS over 200 debugged passes, a 100-million-element
gradient's statistics (in a child process, so its memory high-water is its own), a headless
loop that stops at pass 400, and `--record` / `--flight` against plain python.

    python benchmarks/bench.py --only memory,bigtensor,headless,record
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import ENCODER_LOOP  # noqa: E402
from benchtable import Row, add, alternate, median, ms, paired_row, ratio_row  # noqa: E402

from gradtui.engine.session import Session  # noqa: E402
from gradtui.protocol import events as ev  # noqa: E402
from gradtui.protocol.commands import parse  # noqa: E402

# ---- memory ------------------------------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: the peak


def bench_memory(passes: int) -> None:
    """RSS growth over `passes` training steps debugged in `continue` (hooks on every node,
    full stats, a nan watch), and whether any pass's graph survives it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(64, 256), torch.randint(0, 10, (64,))
    alive: list[weakref.ref] = []
    finished = []
    session = Session(lambda e: finished.append(1) if isinstance(e, ev.PassFinished) else None)
    session.submit(parse("break nan"))
    session.run_on()

    def loop(count: int) -> None:
        with session:
            for _ in range(count):
                optimizer.zero_grad()
                hidden = model[1](model[0](data))  # saved by the next Linear: alive while its graph is
                alive.append(weakref.ref(hidden))
                loss = nn.functional.cross_entropy(model[2:](hidden), target)
                del hidden
                loss.backward()
                optimizer.step()
                del loss

    warm = threading.Thread(target=loop, args=(20,), name="bench-memory-warmup")  # allocator, caches
    warm.start()
    warm.join(600)
    alive.clear()
    gc.collect()
    before = _rss_mb()
    thread = threading.Thread(target=loop, args=(passes,), name="bench-memory")
    thread.start()
    thread.join(600)
    gc.collect()
    grown = _rss_mb() - before
    survivors = sum(ref() is not None for ref in alive)
    assert len(finished) == 20 + passes, "a pass was not debugged"
    add(
        Row(
            f"memory: RSS growth over {passes} training passes in continue",
            "MLP 256-256-256-10, batch 64, SGD; hooks on, full stats, nan watch",
            f"{grown:+.1f} MB",
            f"{survivors} graphs alive after",
            None,
            "< 50 MB, 0 alive",
            grown < 50 and survivors == 0,
        )
    )


# ---- a 100-million-element gradient ------------------------------------------------------


def big_tensor_child(numel: int, repeat: int) -> None:
    """In a fresh process (so the memory high-water is this figure's own): summarize a
    `numel`-element float32 tensor vs `t.norm()`; print the figures as JSON."""
    from gradtui.engine.stats import summary

    torch.set_num_threads(1)
    torch.manual_seed(0)
    t = torch.randn(numel)
    largest_tolist = [0]
    tolist = torch.Tensor.tolist

    def counting_tolist(self):  # a full copy to Python would show here
        largest_tolist[0] = max(largest_tolist[0], self.numel())
        return tolist(self)

    def timed(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return median(times)

    base = timed(lambda: t.norm().item())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.Tensor.tolist = counting_tolist
    try:
        out = {
            "norm": base,
            "stats": timed(lambda: summary.summarize(t)),
            "light": timed(lambda: summary.summarize(t, light=True)),
            "pause": timed(lambda: summary.summarize(t, histogram=True)),
        }
        t[numel // 3] = float("nan")
        t[numel // 2] = float("inf")
        out["nan_pause"] = timed(lambda: summary.summarize(t, histogram=True))
    finally:
        torch.Tensor.tolist = tolist
    out["extra_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    out["tensor_mb"] = t.numel() * t.element_size() / 2**20
    out["tolist"] = largest_tolist[0]
    print(json.dumps(out))


def bench_big_tensor(numel: int, repeat: int) -> None:
    """Statistics of a huge gradient: time against a plain `t.norm()`, memory high-water and
    the largest tensor ever turned into a Python list."""
    result = subprocess.run(
        [sys.executable, __file__, "--child-bigtensor", str(numel), str(repeat)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode:
        raise RuntimeError(f"big-tensor child failed:\n{result.stderr}")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    sizes = f"{numel / 1e6:g}M float32 ({data['tensor_mb']:.0f} MB)"
    # min and max (summary.extremes), sum and norm against one norm; binning costs a bincount pass per chunk
    ratio_row(
        "stats of a huge gradient (norm, min, max, mean, non-finite)",
        sizes,
        data["stats"],
        data["norm"],
        4.0,
        "t.norm()",
    )
    ratio_row("  the same, norms only (UI between pauses)", sizes, data["light"], data["norm"], 1.5, "t.norm()")
    ratio_row("  the same at a pause (+ histogram, preview)", sizes, data["pause"], data["norm"], 25.0, "t.norm()")
    ratio_row("  at a pause, with a NaN and an inf in it", sizes, data["nan_pause"], data["norm"], 40.0, "t.norm()")
    limit = max(64.0, data["tensor_mb"] / 8)
    add(
        Row(
            "  memory high-water above the tensor, largest .tolist()",
            sizes,
            f"{data['extra_mb']:+.0f} MB",
            f"{data['tolist']} elements to Python",
            None,
            f"< {limit:.0f} MB, <= 64 elements",
            data["extra_mb"] < limit and data["tolist"] <= 64,
        )
    )


# ---- a headless loop that stops at pass 400 -----------------------------------------------

TRAIN_LOOP = """\
import json
import sys
import time

import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(0)
steps, out = int(sys.argv[1]), sys.argv[2]
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                      nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data, target = torch.randn(64, 256), torch.randint(0, 10, (64,))
times = []
for step in range(steps):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(data), target)
    start = time.perf_counter()
    loss.backward()
    times.append(time.perf_counter() - start)
    optimizer.step()
with open(out, "w") as f:
    json.dump(times, f)
"""


def bench_headless(steps: int, stop: int, rounds: int = 2) -> None:
    """`gradtui --headless -c 'break pass STOP' -c continue loop.py` vs `python loop.py`: the
    loop times each backward call itself; the median of passes 1..STOP-1 (pass 0 pauses) of
    each run, the lower of `rounds` runs each."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "train_loop.py")
        with open(script, "w") as f:
            f.write(TRAIN_LOOP)
        times = os.path.join(folder, "times.json")
        plain_medians, our_medians = [], []
        for _ in range(rounds):  # alternate the two runs: a machine's load changes between them
            subprocess.run([sys.executable, script, str(steps), times], env=env, check=True, timeout=600)
            with open(times) as f:
                plain_medians.append(median(json.load(f)[1:stop]))
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gradtui",
                    "--headless",
                    "-c",
                    f"break pass {stop}",
                    "-c",
                    "continue",
                    script,
                    str(steps),
                    times,
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if run.returncode:
                raise RuntimeError(f"gradtui --headless failed ({run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr}")
            with open(times) as f:
                our_medians.append(median(json.load(f)[1:stop]))
    stopped = any(line.startswith("paused before") and f"· pass {stop} ·" in line for line in run.stdout.splitlines())
    early = [
        line
        for line in run.stdout.splitlines()
        if line.startswith("paused") and f"· pass {stop} ·" not in line and "· pass 0 ·" not in line
    ]
    base, mine = min(plain_medians), min(our_medians)  # the least disturbed run of each
    ratio = mine / base
    sizes = f"{steps} steps, MLP 256-256-256-256-10, batch 64, SGD"
    add(
        Row(
            f"headless `-c 'break pass {stop}' -c continue`: passes before it",
            sizes,
            f"{mine * 1e3:.3f} ms",
            f"{base * 1e3:.3f} ms plain backward",
            ratio,
            f"<= 1.50x, stops at pass {stop}",
            ratio <= 1.5 and stopped and not early,
        )
    )
    if not stopped or early:
        print(f"  headless run did not stop (only) at pass {stop}:\n{run.stdout[-3000:]}", file=sys.stderr)


TIMED_ENCODER = """\
import sys, time, torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
steps, warm, width, batch, length = (int(a) for a in sys.argv[1:6])
heads, ffn = (4, 2 * width) if width == 64 else (8, 4 * width)
layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, batch_first=True)
model = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(batch, length, width)
spent = 0.0
for step in range(steps):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    start = time.perf_counter()
    loss.backward()
    if step >= warm:
        spent += time.perf_counter() - start
    optimizer.step()
print(f"backward seconds {spent!r}", flush=True)
"""
"""The 12-layer encoder of the engine's rows as a training loop that times its own `backward()`
calls (wall time, the first `warm` steps not counted) and prints their sum last."""

HEADLESS_MODES = {
    "`continue` + `nan`": ["-c", "break nan", "-c", "continue"],
    "`continue`, no watch (passes run unhooked)": ["-c", "continue"],
    "`continue` + `nan`, every statistic (--report)": [
        "--report",
        "{folder}/r.json",
        "-c",
        "break nan",
        "-c",
        "continue",
    ],
}
"""The headless runs of `bench_headless_backward`: gradtui's arguments before the script's."""


def bench_headless_backward(quick: bool, rounds: int) -> None:
    """Whole process, the path a headless user runs: `gradtui --headless ... loop.py` against
    `python loop.py`, the loop timing its own `backward()` (the engine's rows time it in-process
    with a listener that reads nothing; here the headless driver, its printing and the session's
    defaults for a headless run are in it), the 12-layer encoder at d=64 (batch 8x32) and d=256
    (batch 8x128); `rounds` runs of each mode alternated with plain ones (ABBA), the median of the
    pairs' ratios."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    sizes = {64: (80, 10, 8, 32), 256: (12, 3, 8, 128)} if not quick else {64: (25, 5, 8, 32), 256: (5, 2, 4, 64)}
    targets = {(64, "`continue` + `nan`"): 1.30}  # the --report rows also write a JSON pass by pass: info
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "timed_encoder.py")
        with open(script, "w") as f:
            f.write(TIMED_ENCODER)
        for width, (steps, warm, batch, length) in sizes.items():
            args = [str(steps), str(warm), str(width), str(batch), str(length)]
            for mode, flags in HEADLESS_MODES.items():
                ours: list[float] = []
                base: list[float] = []
                command = [sys.executable, "-m", "gradtui", "--headless", *(a.format(folder=folder) for a in flags)]
                for round_ in range(rounds):
                    order = [("plain", [sys.executable]), ("gradtui", command)]
                    for name, head in reversed(order) if round_ % 2 else order:
                        seconds = _backward_seconds([*head, script, *args], env)
                        (base if name == "plain" else ours).append(seconds)
                heads, ffn = (4, 2 * width) if width == 64 else (8, 4 * width)
                paired_row(
                    f"headless process, {mode}, backward() as the script times it",
                    f"12-layer encoder d={width} h={heads} ffn={ffn}, batch {batch}x{length}, {steps - warm} timed steps",
                    [t / (steps - warm) for t in ours],
                    [t / (steps - warm) for t in base],
                    targets.get((width, mode)),
                    "plain backward",
                )


def _backward_seconds(command: list[str], env: dict[str, str]) -> float:
    """Run `command` (a TIMED_ENCODER loop, plain or under gradtui) and read the seconds its
    `backward()` calls took, from the line it prints last."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    said = [line for line in done.stdout.splitlines() if line.startswith("backward seconds ")]
    if done.returncode or not said:
        raise RuntimeError(f"{command[:4]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr}")
    return float(said[-1].split()[-1])


def bench_record(steps: int, layers: int, rounds: int) -> None:
    """Whole process: `python loop.py` vs `gradtui --headless --record run.db` with per-node
    data of every pass (`--record-every 1`), and with `--flight 5` and no hit; the median of
    `rounds` alternated runs each; the database's size."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    sizes = f"{steps} steps, {layers}-layer encoder d=64 h=4 ffn=128, batch 8x32, SGD"
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "encoder_loop.py")
        with open(script, "w") as f:
            f.write(ENCODER_LOOP)
        db = os.path.join(folder, "run.db")
        runs = {
            "plain": [sys.executable, script],
            "record": [
                sys.executable,
                "-m",
                "gradtui",
                "--headless",
                "--record",
                db,
                "--record-every",
                "1",
                "-c",
                "continue",
                script,
            ],
            "flight": [
                sys.executable,
                "-m",
                "gradtui",
                "--headless",
                "--record",
                db,
                "--flight",
                "5",
                "-c",
                "continue",
                script,
            ],
        }
        db_size = {}

        def measure(name: str) -> None:
            if name != "plain":
                db_size[name] = os.path.getsize(db)

        times = alternate(runs, [str(steps), str(layers)], env, rounds, measure)
    base = median(times["plain"])
    for name, label, target in (
        ("record", "per-node data of every pass (--record-every 1)", 1.3),
        ("flight", "--flight 5, no hit", 1.2),
    ):
        ours = median(times[name])
        add(
            Row(
                f"whole process, `--headless --record run.db`, {label}",
                sizes,
                f"{ms(ours)}, db {db_size[name] / 1e6:.2f} MB",
                f"{ms(base)} python",
                ours / base,
                f"<= {target:.2f}x",
                ours / base <= target,
            )
        )


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--child-bigtensor":
    big_tensor_child(int(sys.argv[2]), int(sys.argv[3]))
