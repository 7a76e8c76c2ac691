"""Command feeding's rate: `gradtui --headless -x FILE` with FILE N `print` lines, answered per second.

    python benchmarks/bench_feed.py              # 20,000 and 200,000 commands (~1 min on 2 cores)
    python benchmarks/bench_feed.py --counts 20000,50000

Each row is a whole `python -m gradtui --headless -x FILE chain.py` process, its baseline the
same process with an empty FILE, run interleaved in the same run (the median of `--repeats`):
the rate is N / (time - baseline), and `per 10k` the seconds 10,000 more commands add. Linear
feeding keeps the rate flat as N grows (before it did: 200,000 lines answered 63,000 in 150 s, with a
list's pop(0) shifting every later command; target >= 10,000 answered commands per second).
Timing thresholds are never asserted in the unit tests (tests/cli/test_feeding.py counts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHAIN = os.path.join(REPO, "benchmarks", "examples", "chain.py")


def _run(commands_file: str) -> tuple[float, int]:
    """Seconds one headless process takes on `commands_file`, and how many answers it printed."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gradtui", "--headless", "-x", commands_file, CHAIN],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the run failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, done.stdout.count("(gradtui) print")


def main() -> None:
    """Print one row per command count: answered, seconds over the baseline, commands per second."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="20000,200000", help="comma-separated command counts")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    counts = [int(c) for c in options.counts.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        files = {0: os.path.join(folder, "empty.txt")}
        for n in counts:
            files[n] = os.path.join(folder, f"print{n}.txt")
        for n, path in files.items():
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("print\n" * n)
        times: dict[int, list[float]] = {n: [] for n in files}
        answered: dict[int, int] = {}
        for _ in range(options.repeats):  # interleaved: every count sees the same noise
            for n, path in files.items():
                took, answers = _run(path)
                times[n].append(took)
                answered[n] = answers
    base = statistics.median(times[0])
    print(
        f"{'commands':>10} {'answered':>10} {'process s':>10} {'over base s':>12} {'per second':>12} {'per 10k s':>10}"
    )
    print(f"{0:>10} {answered[0]:>10} {base:>10.2f} {'(baseline)':>12}")
    for n in counts:
        took = statistics.median(times[n])
        extra = max(took - base, 1e-9)
        print(f"{n:>10} {answered[n]:>10} {took:>10.2f} {extra:>12.2f} {n / extra:>12,.0f} {extra / n * 1e4:>10.3f}")


if __name__ == "__main__":
    main()
