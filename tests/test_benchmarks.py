"""The benchmarks run: a benchmark is not in the suite's timing, but it calls gradtui's own API,
and one left behind by an API change fails only in the next full bench run (the fingerprints'
rows once stopped a whole run that way). Each check runs a benchmark's measuring code at the
smallest size, once: what it asserts is that every mode ran and timed a pass, never how fast."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_the_fingerprint_rows_measure_every_kind_of_pass(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_diff

    try:
        times = bench_diff.measure(layers=1, rounds=1, width=16)
    finally:
        sys.modules.pop("bench_diff", None)
    assert set(times) == set(bench_diff.KINDS)
    for kind, took in times.items():
        assert len(took) == 1, kind  # the warm-up round is not kept
        assert took[0].wall > 0 and took[0].cpu >= 0, kind
