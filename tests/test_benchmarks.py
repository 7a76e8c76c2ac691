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


def test_another_bookkeeping_records_its_own_kind_of_pass_in_the_same_rounds(monkeypatch):
    """`bench_diff.py --other`: a second copy of the fingerprints' bookkeeping (here the
    package's own values.py, loaded apart) gathers the prints of the `other` passes, and only
    those; the package's PassPrints is back in place afterwards."""
    from gradtui.engine.fingerprints import values

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_diff

    try:
        other = bench_diff.load_values(values.__file__)
        assert other.PassPrints is not values.PassPrints
        events = []
        event = other.PassPrints.event
        monkeypatch.setattr(
            other.PassPrints, "event", lambda self, index: (events.append(index), event(self, index))[1]
        )
        mine = values.PassPrints
        times = bench_diff.measure(
            layers=1, rounds=1, width=16, kinds=("recorded", "fingerprints", "other"), other=other
        )
    finally:
        sys.modules.pop("bench_diff", None)
    assert values.PassPrints is mine
    assert set(times) == {"recorded", "fingerprints", "other"} and all(len(t) == 1 for t in times.values())
    assert len(events) == 2  # the warm-up round's other pass and the timed one's
