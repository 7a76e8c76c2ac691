"""`summary.extremes`, every reading's min and max: torch's own, and the same way everywhere (the
window's bulk read, the planned hooks' read, `summarize`), so the three agree even on which zero
is a min or max."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine.stats.immediate import now_stats
from gradtui.engine.stats.measures import extremes
from gradtui.engine.stats.summary import summarize
from gradtui.engine.stats.window import StatsWindow

pytestmark = pytest.mark.timeout(60)


def _cases() -> list[torch.Tensor]:
    torch.manual_seed(0)
    nan, inf = torch.randn(300), torch.randn(40000)
    nan[5], inf[7], inf[9] = float("nan"), float("inf"), -float("inf")
    zeros = torch.tensor([0.0, -0.0] * 150).reshape(30, 10).t()  # non-contiguous: amin / amax
    return [
        torch.randn(192),
        torch.randn(256, 64),
        torch.randn(256, 128),
        torch.randn(64, 192).t(),
        torch.randn(8, 32, 4, 16).permute(0, 2, 1, 3),
        torch.randn(500).double(),
        nan,
        inf,
        zeros,
        torch.tensor([-0.0, 0.0] * 150),
        -torch.rand(30000).clamp(max=0),
    ]


@pytest.mark.parametrize("case", range(len(_cases())))
def test_extremes_are_torchs_min_and_max(case):
    t = _cases()[case]
    lo, hi = extremes(t)
    assert repr(lo.item()) == repr(t.min().item()) or lo.item() == t.min().item() == 0.0  # a zero's sign may differ
    assert repr(hi.item()) == repr(t.max().item()) or hi.item() == t.max().item() == 0.0


@pytest.mark.parametrize("case", range(len(_cases())))
def test_every_reading_gives_the_same_min_and_max(case):
    t = _cases()[case]
    window = StatsWindow()
    window.add(t, light=False)
    (bulk,) = window.read()
    now, alone = now_stats(t, True), summarize(t)
    assert repr((bulk.min, bulk.max)) == repr((now.min, now.max)) == repr((alone.min, alone.max))
    assert repr((bulk.norm, bulk.mean, bulk.nonfinite)) == repr((now.norm, now.mean, now.nonfinite))
