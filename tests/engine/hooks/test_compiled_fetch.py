"""The compiled library's `fetch` (gradtui/engine/hooks/native/fetch.h) reads exactly the floats that
torch's Python calls read (gradtui.engine.stats.window.fetch_in_python), and declines what it does not
read (then Python's read runs, with its own errors)."""

from __future__ import annotations

import math

import pytest
import torch

from gradtui.engine.hooks import native
from gradtui.engine.stats.measures import ONE_PASS
from gradtui.engine.stats.window import _fetch, fetch_in_python

compiled = native.load().module
pytestmark = pytest.mark.skipif(compiled is None, reason=f"compiled library not built: {native.load().reason}")


def _entries(tensors: list[torch.Tensor]) -> list[tuple[int, torch.Tensor, int]]:
    return [(i, t, t.numel()) for i, t in enumerate(tensors)]


def _same(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    """The same statistics by name, equal float by float, NaN and the sign of zero included."""
    return a.keys() == b.keys() and all(
        len(a[name]) == len(b[name]) and all(repr(x) == repr(y) for x, y in zip(a[name], b[name])) for name in a
    )


def _kinds(generator: torch.Generator) -> list[torch.Tensor]:
    """Tensors of the kinds a pass's end reads: float32 and float64, contiguous or not, past
    ONE_PASS, holding zeros of both signs, an infinity, a NaN."""

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=generator, dtype=dtype)

    zeros = torch.zeros(300)
    zeros[::3] = -0.0
    odd = randn(200)
    odd[7] = math.inf
    nan = randn(90, dtype=torch.float64)
    nan[3] = math.nan
    return [
        randn(64, 64),
        randn(64, 64).t(),
        randn(300, dtype=torch.float64),
        randn(ONE_PASS + 5),
        zeros,
        odd,
        nan,
        randn(8, 12)[:, ::2],
        randn(129).requires_grad_(),
    ]


def test_fetch_reads_the_floats_torch_reads():
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        tensors = _kinds(generator)
        big, wide = _entries(tensors), _entries(tensors[::2])
        small = _entries([torch.randn(n, generator=generator) for n in (1, 7, 64)] + [torch.randn(4, 4).t()])
        others = [torch.randn(64, generator=generator), torch.zeros(0), torch.randn(3, 3, dtype=torch.float64)]
        want = fetch_in_python(big, small, wide, others)
        got = compiled.fetch(
            [*others, *(t for _, t, _ in big)], [t for _, t, _ in wide], [t for _, t, _ in small], ONE_PASS
        )
        assert got is not None and _same(got, want)
        assert _same(_fetch(big, small, wide, others), want)
        # by name, each as torch reads it on its own
        assert [repr(v) for v in want["min"]] == [repr(t.min().item()) for _, t, _ in wide]
        assert [repr(v) for v in want["max"]] == [repr(t.max().item()) for _, t, _ in wide]
        assert [repr(v) for v in want["mean"]] == [repr(t.sum().item() / t.numel()) for _, t, _ in wide]
        assert len(want["norm"]) == len(others) + len(big)
        assert want["values"] == [v for _, t, _ in small for v in t.reshape(-1).tolist()]


def test_fetch_declines_what_is_not_a_plain_cpu_float_tensor():
    for odd in (
        torch.ones(3, dtype=torch.float16),
        torch.ones(3, dtype=torch.int64),
        torch.ones(3).to_sparse(),
        torch.empty(3, device="meta"),
    ):
        assert compiled.fetch([torch.ones(3), odd], [], [], ONE_PASS) is None
    assert compiled.fetch([], [torch.zeros(0)], [], ONE_PASS) is None  # no min of nothing: Python's read says so
    assert compiled.fetch([], [], [], ONE_PASS) == {"norm": [], "min": [], "max": [], "mean": [], "values": []}


def test_a_declined_read_falls_back_to_torch():
    half = torch.randn(70).half()
    entries = _entries([torch.randn(80), half])
    assert _same(_fetch(entries, [], entries, []), fetch_in_python(entries, [], entries, []))


def _extremes_cases(generator: torch.Generator) -> list[torch.Tensor]:
    """Tensors whose min and max the compiled read finds in one pass of its own (contiguous
    float32), split over threads past torch's grain (32768 elements) or not, the extreme in the
    head, the tail (past the last whole 16) or the middle, ties, infinities; and those it leaves to
    torch's kernels: a NaN anywhere, a zero min or max (which zero: torch's way says), float64."""
    cases = []
    for n in (65, 1000, ONE_PASS - 3, ONE_PASS + 5, 40_000, 200_001):
        for where in (0, n // 2, n - 1):
            t = torch.randn(n, generator=generator)
            t[where] = 9.5
            t[(where + 1) % n] = -9.5
            cases.append(t)
        tied = torch.randn(n, generator=generator).clamp(-1.0, 1.0)
        cases.append(tied)
        inf = torch.randn(n, generator=generator)
        inf[n // 3] = -math.inf
        cases.append(inf)
        for where in (0, n - 1, n // 2):
            nan = torch.randn(n, generator=generator)
            nan[where] = math.nan
            cases.append(nan)
        signed = torch.rand(n, generator=generator)
        signed[n // 4], signed[n // 2] = 0.0, -0.0  # min a zero of either sign
        cases.append(signed)
        cases.append(-signed)  # max a zero
        cases.append(torch.randn(n, generator=generator, dtype=torch.float64))
    return cases


@pytest.mark.parametrize("threads", [1, 2])
def test_the_one_pass_min_and_max_are_torchs(threads):
    """The compiled read's min and max (one pass of its own where it can answer for torch) are the
    floats the Python read takes with torch's kernels, NaN and the sign of zero included, on one
    thread or two."""
    generator = torch.Generator().manual_seed(1)
    was = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cases = _extremes_cases(generator)
        wide = _entries(cases)
        got = compiled.fetch([], [t for t in cases], [], ONE_PASS)
        want = fetch_in_python([], [], wide, [])
    finally:
        torch.set_num_threads(was)
    assert got is not None and _same(got, want)  # the Python read's (torch's kernels, as `extremes` calls them)
    for t, lo, hi in zip(cases, got["min"], got["max"]):  # and torch's min() and max() (which zero aside)
        assert repr(lo) == repr(t.min().item()) or lo == t.min().item() == 0.0
        assert repr(hi) == repr(t.max().item()) or hi == t.max().item() == 0.0
