"""Gradient flow rows (gradtui.engine.stats.flow): torch's own norms are the oracle."""

from __future__ import annotations

import math

import pytest
import torch

from gradtui.engine.stats.flow import LeafNames, gradient_flow
from gradtui.protocol.flowtext import format_flow

pytestmark = pytest.mark.timeout(60)


def _leaf(values, grad=None):
    t = torch.tensor(values, requires_grad=True)
    if grad is not None:
        t.grad = torch.tensor(grad)
    return t


def test_norms_ratios_and_order():
    small = _leaf([3.0, 4.0], [0.0, 1e-3])
    big = _leaf([1.0], [50.0])
    none = _leaf([1.0])
    rows = gradient_flow([("big", 1, big), ("small", 2, small), ("none", None, none)])
    assert [r.name for r in rows] == ["none", "small", "big"]
    by = {r.name: r for r in rows}
    assert by["small"].weight_norm == pytest.approx(5.0) and by["small"].grad_norm == pytest.approx(1e-3)
    assert by["small"].ratio == pytest.approx(2e-4) and by["small"].node == 2 and by["small"].shape == (2,)
    assert by["big"].ratio == pytest.approx(50.0)
    assert by["none"].grad_norm is None and by["none"].ratio is None


def test_non_finite_gradients_sort_last_with_their_count():
    bad = _leaf([0.0, 0.0, 0.0], [float("nan"), 1.0, float("inf")])
    zero_weight = _leaf([0.0], [2.0])
    fine = _leaf([2.0], [1.0])
    rows = gradient_flow([("bad", None, bad), ("zero_weight", None, zero_weight), ("fine", None, fine)])
    # a zero weight apart (it has no ratio), non-finite last
    assert [r.name for r in rows] == ["zero_weight", "fine", "bad"]
    by = {r.name: r for r in rows}
    assert by["bad"].nonfinite == 2 and math.isnan(by["bad"].ratio)  # nan over a zero weight is still nan
    assert by["zero_weight"].ratio == math.inf and by["zero_weight"].nonfinite == 0


def test_sparse_and_complex_leaves():
    emb = torch.nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([1, 2, 2])).sum().backward()
    z = _leaf([1 + 1j, 2 - 2j], [3 + 4j, 0j])
    rows = {r.name: r for r in gradient_flow([("emb", None, emb.weight), ("z", None, z)])}
    assert rows["emb"].grad_norm == pytest.approx(emb.weight.grad.to_dense().norm().item())
    assert rows["z"].grad_norm == pytest.approx(5.0) and rows["z"].weight_norm == pytest.approx(math.sqrt(10))


def test_format_flow_shows_both_ends_when_cut():
    leaves = [(f"p{i}", None, _leaf([1.0], [float(i + 1)])) for i in range(10)]
    lines = format_flow(gradient_flow(leaves), limit=4)
    assert lines[0].split()[0] == "param"
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["p0", "p1", "...", "p8", "p9"]
    assert "(6 more)" in lines[3]


def test_leaf_names_are_weak():
    names = LeafNames()
    t = torch.ones(2, requires_grad=True)
    names.remember(t, "w")
    assert names.get(t) == "w" and names.get(torch.ones(2)) is None
    del t
    assert names._names == {}


def test_a_zero_weight_has_no_ratio_in_the_table_and_sorts_apart_from_the_exploding_end():
    bias = _leaf([0.0, 0.0], [3.0, 4.0])  # a zero-initialised bias at pass 0
    weight = _leaf([1.0, 1.0], [1e-3, 0.0])
    huge = _leaf([1e-6], [10.0])
    rows = gradient_flow([("huge", None, huge), ("bias", None, bias), ("weight", None, weight)])
    assert [r.name for r in rows] == ["bias", "weight", "huge"]
    lines = format_flow(rows)
    bias_line = next(line for line in lines if line.startswith("bias"))
    assert bias_line.split()[3] == "w=0" and "inf" not in bias_line
    assert lines[-1].startswith("w=0: a zero weight")
