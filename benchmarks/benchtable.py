"""The bench's one table: rows of a figure, its sizes, gradtui's figure, the baseline measured
in the same run, the ratio and the target; printed as Markdown at the end of a run.

A module of its own so that bench.py and the groups in its helper modules (bench_agent.py)
add rows to the same table.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


def median(times: list[float]) -> float:
    """The median of some timings (every time in the bench is one)."""
    return statistics.median(times)


def alternate(
    runs: dict[str, list[str]],
    args: list[str],
    env: dict[str, str],
    rounds: int,
    after: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Wall seconds of each command of `runs` (`args` appended) in a fresh process, `rounds`
    times, alternated so that each sees the machine's changing load, in ABBA order (every other
    round backwards: on a host whose speed drifts, the command that always ran second would see
    the drift alone); a failed run raises with its output. `after(name)` is called after each run
    (to look at what it wrote)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        for name, command in reversed(runs.items()) if round_ % 2 else runs.items():
            start = time.perf_counter()
            done = subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=600)
            times[name].append(time.perf_counter() - start)
            if done.returncode:
                raise RuntimeError(f"{name} run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr}")
            if after is not None:
                after(name)
    return times


@dataclass
class Row:
    """One line of the table."""

    figure: str
    sizes: str
    measured: str
    baseline: str
    ratio: float | None
    target: str
    ok: bool | None  # None: informational, no target

    @property
    def verdict(self) -> str:
        return "info" if self.ok is None else ("ok" if self.ok else "MISSED")


ROWS: list[Row] = []


def add(row: Row) -> None:
    """Keep a row for the table and show progress on stderr as it is measured."""
    ROWS.append(row)
    ratio = "" if row.ratio is None else f"{row.ratio:.2f}x  "
    print(
        f"  {row.figure} [{row.sizes}]: {row.measured} vs {row.baseline}  {ratio}{row.target} {row.verdict}",
        file=sys.stderr,
        flush=True,
    )


def ms(seconds: float) -> str:
    """Seconds as `12.3 ms`, or `12.3 s` from ten seconds on."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ratio_row(figure: str, sizes: str, ours: float, base: float, target: float | None, base_name: str) -> float:
    """A row comparing our time to a baseline's; target None makes it informational."""
    return _ratio(figure, sizes, ours, base, ours / base, target, base_name)


def paired_row(
    figure: str, sizes: str, ours: list[float], base: list[float], target: float | None, base_name: str
) -> float:
    """`ratio_row` for runs alternated with their baseline's, pair by pair (`ours[k]` ran beside
    `base[k]`): the ratio is the median of the pairs' ratios, the times shown their medians. On a
    host whose speed drifts between runs (these VMs swing by half between minutes), a pair sees one
    speed; two separate medians can each come from another."""
    ratio = median([a / b for a, b in zip(ours, base, strict=True)])
    return _ratio(figure, sizes, median(ours), median(base), ratio, target, base_name)


def _ratio(
    figure: str, sizes: str, ours: float, base: float, ratio: float, target: float | None, base_name: str
) -> float:
    """Add the row of a ratio against its target (None: informational); the ratio back."""
    add(
        Row(
            figure,
            sizes,
            ms(ours),
            f"{ms(base)} {base_name}",
            ratio,
            "-" if target is None else f"<= {target:.2f}x",
            None if target is None else ratio <= target,
        )
    )
    return ratio


def print_table(header: str) -> None:
    """The one table of the run, as Markdown (docs/performance.md shows the current one)."""
    print(header)
    print()
    print("| figure | sizes | gradtui | baseline | ratio | target | |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in ROWS:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        print(f"| {r.figure} | {r.sizes} | {r.measured} | {r.baseline} | {ratio} | {r.target} | {r.verdict} |")
    missed = [r.figure for r in ROWS if r.ok is False]
    print()
    print("every target holds" if not missed else f"MISSED: {len(missed)} target(s)")
