"""A pass's end reads its leaves' gradient statistics and the gradient flow's norms together
(gradtui.engine.stats.leaves): the rows and Stats are exactly those of the two separate reads
(`gradient_flow`'s own fused norm, a `StatsWindow` read of every `.grad`), torch the oracle."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine.hooks import native
from gradtui.engine.stats.flow import gradient_flow
from gradtui.engine.stats.leaves import LeafRead
from gradtui.engine.stats.window import StatsWindow, resolve
from tests.helpers import compiled_off

pytestmark = pytest.mark.timeout(60)


def _leaves() -> list[tuple[int, torch.Tensor]]:
    torch.manual_seed(0)
    out = []
    for grad in (
        torch.randn(40, 30),
        torch.randn(64),
        torch.randn(300).double(),
        torch.randn(20, 30).t(),
        torch.full((100,), 3e38),
        torch.tensor([1.0, float("nan"), 2.0] * 30),
        torch.randn(100).half(),
        None,
        torch.randn(5),
    ):
        leaf = torch.randn(
            grad.shape if grad is not None else (7,), dtype=grad.dtype if grad is not None else None, requires_grad=True
        )
        leaf.grad = grad
        out.append((len(out) * 2 + 1, leaf))
    return out


def _separate(leaves, light):
    """What a pass's end read before: the window's read, then the flow's own norms."""
    window = StatsWindow()
    handles = [window.add(leaf.grad, light) for _, leaf in leaves]
    stats = resolve(handles, window.read())
    rows = gradient_flow([(f"p{i}", i, leaf) for i, leaf in leaves])
    return tuple((i, s) for (i, _), s in zip(leaves, stats)), rows


@pytest.mark.parametrize("light", [False, True])
def test_one_read_gives_what_the_two_reads_gave(light):
    leaves = _leaves()
    read = LeafRead(leaves, light)
    rows = gradient_flow([(f"p{i}", i, leaf) for i, leaf in leaves], read.norms)
    stats = read.stats()
    old_stats, old_rows = _separate(leaves, light)
    assert repr(stats) == repr(old_stats) and repr(rows) == repr(old_rows)  # repr: NaN-aware, exact
    by = {r.node: r for r in rows}
    for i, leaf in leaves:
        if leaf.grad is not None:  # a half-precision one's norm is taken in half precision, as torch takes it
            assert repr(by[i].grad_norm) == repr(torch.linalg.vector_norm(leaf.grad).item())
        assert by[i].weight_norm == torch.linalg.vector_norm(leaf.detach()).item()


@pytest.fixture(params=["python", "compiled"])
def normed(request, monkeypatch) -> list[list[torch.Tensor]]:
    """The lists of tensors each host read takes the norms of, as they are read: torch's fused call
    (the compiled library off), or the compiled library's `fetch`."""
    passed: list[list[torch.Tensor]] = []
    if request.param == "python":
        compiled_off(monkeypatch, "off in this test")
        fused = torch._foreach_norm

        def counted(tensors, *args, **kwargs):
            passed.append(list(tensors))
            return fused(tensors, *args, **kwargs)

        monkeypatch.setattr(torch, "_foreach_norm", counted)
    else:
        module = native.load().module
        if module is None:
            pytest.skip(f"compiled library not built: {native.load().reason}")
        fetch = module.fetch

        def fetched(tensors, *rest):
            passed.append(list(tensors))
            return fetch(tensors, *rest)

        monkeypatch.setattr(module, "fetch", fetched)
    return passed


def test_a_big_gradient_is_normed_once(normed):
    """One read for the statistics and the flow, not one each, and in it each weight and each
    gradient normed once (two big gradients, one small one: a big one sent twice would be normed twice)."""
    leaves = _leaves()[:3]
    read = LeafRead(leaves, False)
    gradient_flow([(f"p{i}", i, leaf) for i, leaf in leaves], read.norms)
    read.stats()
    (tensors,) = normed
    grads = [leaf.grad for _, leaf in leaves]
    assert len(tensors) == 6 and len({id(t) for t in tensors}) == 6
    assert all(any(t is g for t in tensors) for g in grads)


def test_a_fused_read_torch_refuses_falls_back_to_separate_reads(monkeypatch):
    leaves = _leaves()
    old_stats, old_rows = _separate(leaves, False)
    read = LeafRead(leaves, False)
    original = torch._foreach_norm
    refused = [0]

    def refusing(tensors, *args, **kwargs):
        if len(tensors) > 6 and not refused[0]:  # the fused one (weights and gradients)
            refused[0] = 1
            raise RuntimeError("mixed devices")
        return original(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_norm", refusing)
    rows = gradient_flow([(f"p{i}", i, leaf) for i, leaf in leaves], read.norms)
    assert refused[0] and repr(read.stats()) == repr(old_stats) and repr(rows) == repr(old_rows)
