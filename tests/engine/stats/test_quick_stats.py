"""`quick_stats`, the planned posthook's read of each gradient: its fast path (a plain CPU float
gradient too big to list, light statistics) checks nothing it need not, and every other
gradient gives what `now_stats` gives (the every-node hooks' numbers)."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine.stats.immediate import Normed, now_stats, quick_stats, resolved
from tests.helpers import count_calls, count_reads

pytestmark = pytest.mark.timeout(60)


def _cases() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    big = torch.randn(300)
    nan, inf = big.clone(), big.clone()
    nan[7], inf[9] = float("nan"), float("inf")
    return {
        "float32": big,
        "float64": big.double(),
        "strided view": torch.randn(20, 30).t(),
        "overflowing float32 norm": torch.full((100,), 3e38),
        "nan": nan,
        "inf": inf,
        "dense zeros": torch.zeros(100),
        "ZeroTensor": torch._efficientzerotensor(100),
        "requires_grad": torch.randn(100, requires_grad=True),
        "small": torch.randn(64),
        "small nan": torch.tensor([1.0, float("nan")]),
        "small 2-d": torch.randn(4, 5).t(),
        "small ZeroTensor": torch._efficientzerotensor(10),
        "small requires_grad": torch.randn(10, requires_grad=True),
        "float16": torch.randn(100).half(),
        "bfloat16": torch.randn(100).bfloat16(),
        "sparse": torch.randn(100).to_sparse(),
        "meta": torch.empty(100, device="meta"),
        "over a chunk": torch.ones((1 << 20) + 1),
        "empty": torch.empty(0),
    }


CASES = _cases()


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_each_kind_gives_what_now_stats_gives(name, full):
    """Fast or not, the Stats a batch makes of `quick_stats` equal `now_stats`' (repr: NaN-aware)."""
    grad = CASES[name]
    (got,) = resolved((quick_stats(grad, full),))
    assert repr(got) == repr(now_stats(grad, full))


def test_a_big_finite_gradient_is_normed_without_the_rare_checks(monkeypatch):
    """The fast path asks neither `_is_zerotensor` nor `is_meta` (main's asked both of each one)."""
    zero_checks = count_calls(monkeypatch, torch.Tensor, "_is_zerotensor")
    meta_checks = count_reads(monkeypatch, torch.Tensor, "is_meta")
    grad = torch.randn(300)
    got = quick_stats(grad, False)
    assert type(got) is Normed and got.norm == torch.linalg.vector_norm(grad).item()
    assert zero_checks[0] == meta_checks[0] == 0
    # a norm of 0 is confirmed: a ZeroTensor's is
    assert repr(resolved((quick_stats(torch._efficientzerotensor(100), False),))[0]) == repr(
        now_stats(torch._efficientzerotensor(100), False)
    )
    assert zero_checks[0] >= 1


def test_an_overflowing_norm_is_decided_by_the_exact_path():
    """A float32 norm of finite values can overflow: the values are counted finite, the norm redone."""
    got = quick_stats(torch.full((100,), 3e38), False)
    assert got.nonfinite == 0 and got.norm == pytest.approx(3e38 * 10, rel=1e-6)


def test_a_big_finite_gradient_full_is_read_by_four_reductions_as_torch_gives_them(monkeypatch):
    """Full statistics of a plain big gradient: torch's min, max, sum and norm, exactly, with no
    `is_meta` check (the fast path)."""
    meta_checks = count_reads(monkeypatch, torch.Tensor, "is_meta")
    torch.manual_seed(1)
    for grad in (torch.randn(300), torch.randn(20, 30).double().t() * 1e150):
        got = quick_stats(grad, True)
        assert (got.norm, got.min, got.max, got.mean, got.nonfinite) == (
            torch.linalg.vector_norm(grad).item(),
            grad.min().item(),
            grad.max().item(),
            grad.sum().item() / grad.numel(),
            0,
        )
        assert got.shape == tuple(grad.shape)
    assert meta_checks[0] == 0
