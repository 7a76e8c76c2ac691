"""Issue 23's cost: a recorded pass with fingerprints against one without, in one run.

    python scripts/bench_diff.py [--layers L] [--rounds R]

A 4-layer d=256 encoder (bench.py's), batch 8x32: each round times one backward under a
Session with a Recorder attached (every pass recorded node by node, full statistics), with
`fingerprints=False` and `=True` alternately, and prints the medians and their ratio (target
≤ 1.15x).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gradtui.engine.session import Session  # noqa: E402
from gradtui.record.store import Recorder  # noqa: E402
from gradtui.model import events as ev  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import transformer  # noqa: E402


class Took(NamedTuple):
    """One timed backward: wall-clock seconds and this process's CPU seconds (steadier on a
    loaded machine: time spent waiting for a core is not counted)."""

    wall: float
    cpu: float


def one_pass(model: torch.nn.Module, x: torch.Tensor, fingerprints: bool, db: str) -> Took:
    """One recorded backward timed (forward not timed)."""
    recorder = Recorder(db)
    session = Session(full_stats=True, fingerprints=fingerprints)
    session.add_listener(recorder)
    session.run_on()
    session.install()
    try:
        recorder(ev.ScriptStarted("bench", ()))  # the run row
        loss = model(x).pow(2).mean()
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        loss.backward()
        took = Took(time.perf_counter() - start, time.process_time() - cpu)
    finally:
        session.uninstall()
        recorder.close()
    model.zero_grad(set_to_none=True)
    return took


def report(label: str, times: dict[bool, list[Took]], target: float) -> None:
    """Medians of both, their ratio and the median of the paired (same round) ratios, wall and CPU."""
    for kind in ("wall", "cpu"):
        base = [getattr(t, kind) for t in times[False]]
        other = [getattr(t, kind) for t in times[True]]
        paired = statistics.median(o / b for o, b in zip(other, base))
        print(f"  {label} {kind:4}: without {statistics.median(base) * 1e3:8.1f} ms, with "
              f"{statistics.median(other) * 1e3:8.1f} ms: {statistics.median(other) / statistics.median(base):.2f}x,"
              f" paired {paired:.2f}x (target <= {target}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    torch.set_num_threads(1)  # the machines are small and noisy; one thread is steadier
    model = transformer(options.layers)
    x = torch.randn(8, 32, 256, generator=torch.Generator().manual_seed(1))
    times: dict[bool, list[Took]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(options.rounds + 1):
            for fingerprints in ((False, True) if r % 2 else (True, False)):
                took = one_pass(model, x, fingerprints, os.path.join(folder, f"{r}-{fingerprints}.db"))
                if r:  # the first round warms up
                    times[fingerprints].append(took)
    print(f"recorded backward, {options.layers}-layer encoder d=256, batch 8x32, {options.rounds} rounds, "
          f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    report("fingerprints", times, 1.15)


if __name__ == "__main__":
    main()
