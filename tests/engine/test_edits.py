"""Gradient edits (gradtui.engine.edits) as pure functions: exact against the same torch
arithmetic, never modifying their input, refusing bad replacements with a clear message."""

from __future__ import annotations

import pytest
import torch

from gradtui.engine import edits
from gradtui.engine.edits import EditError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def grads():
    torch.manual_seed(0)
    return (torch.randn(3, 4), None, torch.randn(5, dtype=torch.float64))


def copies(grads):
    return tuple(None if g is None else g.clone() for g in grads)


def assert_unchanged(grads, before):
    for g, b in zip(grads, before):
        assert (g is None and b is None) or torch.equal(g, b)


def test_scale_is_exact(grads):
    before = copies(grads)
    out = edits.scale(grads, 0.37)
    assert out[1] is None
    assert torch.equal(out[0], grads[0] * 0.37)
    assert torch.equal(out[2], grads[2] * 0.37)
    assert out[0].dtype == torch.float32 and out[2].dtype == torch.float64
    assert_unchanged(grads, before)


def test_zero(grads):
    before = copies(grads)
    out = edits.zero(grads)
    assert out[1] is None
    for new, old in ((out[0], grads[0]), (out[2], grads[2])):
        assert torch.equal(new, torch.zeros_like(old))
        assert new.dtype == old.dtype and new.shape == old.shape
    assert_unchanged(grads, before)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_clip_bounds_the_norm_and_keeps_the_direction(seed, dtype):
    torch.manual_seed(seed)
    g = (torch.randn(int(torch.randint(1, 500, ()))) * 10).to(dtype)
    limit = float(torch.rand(())) * 3 + 0.01
    before = g.clone()
    (out,) = edits.clip((g,), limit)
    assert torch.linalg.vector_norm(out.double()) <= limit
    assert torch.linalg.vector_norm(out.float()) <= limit  # as the stats measure it
    assert torch.linalg.vector_norm(out.double()) >= limit * (1 - 2 * torch.finfo(dtype).eps - 1e-6)
    # the direction is kept: out is g times one positive number
    ratio = (out.double() / g.double())[g != 0]
    assert (ratio > 0).all()
    assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=2 * torch.finfo(dtype).eps)
    assert out.dtype == dtype
    assert torch.equal(g, before)


def test_clip_is_joint_over_every_gradient(grads):
    total = torch.linalg.vector_norm(torch.cat([grads[0].double().flatten(), grads[2].flatten()]))
    out = edits.clip(grads, 1.0)
    joint = torch.linalg.vector_norm(torch.cat([out[0].double().flatten(), out[2].flatten()]))
    assert joint <= 1.0 and joint > 1.0 - 1e-5
    assert out[1] is None
    factor = out[2] / grads[2]
    assert torch.allclose(factor, torch.full_like(factor, 1.0 / float(total)))
    # clip_grad_norm_ agrees (it adds 1e-6 to the norm)
    expected = [grads[0].clone(), grads[2].clone()]
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in expected]
    for p, t in zip(params, expected):
        p.grad = t
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    assert torch.allclose(out[0], params[0].grad, rtol=1e-5)
    assert torch.allclose(out[2], params[1].grad, rtol=1e-5)


def test_clip_below_the_limit_changes_nothing(grads):
    out = edits.clip(grads, 1e9)
    assert all(a is b for a, b in zip(out, grads))


def test_clip_to_zero():
    (out,) = edits.clip((torch.tensor([3.0, 4.0]),), 0.0)
    assert torch.equal(out, torch.zeros(2))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_clip_refuses_a_nonfinite_norm(bad):
    g = torch.tensor([1.0, bad])
    with pytest.raises(EditError, match="cannot clip: the gradient's norm is"):
        edits.clip((g,), 1.0)


@pytest.mark.parametrize(
    "edit",
    [
        lambda gs: edits.scale(gs, 2.0),
        lambda gs: edits.zero(gs),
        lambda gs: edits.clip(gs, 1.0),
        lambda gs: edits.replace(gs, "g"),
    ],
)
def test_no_gradient_to_edit(edit):
    with pytest.raises(EditError, match="this node receives no gradient to edit"):
        edit((None, None))


def test_replace_by_expression():
    g = torch.tensor([1.0, -2.0, 3.0])
    (out,) = edits.replace((g,), "g * 3")
    assert torch.equal(out, g * 3)
    (out,) = edits.replace((g,), "g.clamp(-1, 1)")
    assert torch.equal(out, torch.tensor([1.0, -1.0, 1.0]))
    (out,) = edits.replace((g,), "torch.ones_like(g) * k", {"k": 5.0})
    assert torch.equal(out, torch.full((3,), 5.0))
    (same,) = edits.replace((g,), "g")
    assert same is g
    assert torch.equal(g, torch.tensor([1.0, -2.0, 3.0]))


def test_replace_detaches():
    w = torch.ones(3, requires_grad=True)
    (out,) = edits.replace((torch.zeros(3),), "w * 2", {"w": w})
    assert not out.requires_grad and out.grad_fn is None
    assert torch.equal(out, torch.full((3,), 2.0))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("torch.zeros(4)", "'torch.zeros(4)' gave a tensor with shape [4] instead of [3]"),
        ("g.double()", "'g.double()' gave a tensor with dtype torch.float64 instead of torch.float32"),
        ("torch.zeros(3, device='meta')", "device meta instead of cpu"),
        (
            "torch.zeros(2, dtype=torch.float64)",
            "shape [2] instead of [3], dtype torch.float64 instead of torch.float32",
        ),
        ("3.0", "'3.0' gave float, not a tensor"),
        ("None", "'None' gave NoneType, not a tensor"),
        ("g / undefined_name", "'g / undefined_name' failed: NameError"),
        ("g @ torch.ones(2, 2)", "'g @ torch.ones(2, 2)' failed: RuntimeError"),
    ],
)
def test_replace_refusals(expr, message):
    g = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(EditError) as info:
        edits.replace((g,), expr)
    assert message in str(info.value)
    assert torch.equal(g, torch.tensor([1.0, 2.0, 3.0]))


def test_replace_with_several_gradients():
    a, b = torch.ones(2), torch.zeros(3)
    assert edits.single((a, b)) == (a, b)
    new = edits.replace((a, None, b), "(g[0] * 2, None, g[2] + 1)")
    assert torch.equal(new[0], a * 2) and new[1] is None and torch.equal(new[2], b + 1)
    with pytest.raises(EditError, match="must give a tuple of 3 gradients"):
        edits.replace((a, None, b), "g[0]")
    with pytest.raises(EditError, match="shape \\[2\\] instead of \\[3\\]"):
        edits.replace((a, None, b), "(a, None, a)", {"a": a})


def test_single_gradient_among_nones_is_still_a_tuple():
    """`g` is the tensor only when the node has exactly one gradient slot."""
    a = torch.ones(2)
    assert edits.single((a,)) is a
    assert edits.single((a, None)) == (a, None)
    assert edits.single((None,)) == (None,)


def test_evaluate_runs_without_grad():
    w = torch.ones(2, requires_grad=True)
    value = edits.evaluate("w * 2", (torch.zeros(2),), {"w": w})
    assert not value.requires_grad
    assert edits.evaluate("g.shape[0] + 1", (torch.zeros(4),)) == 5
    with pytest.raises(EditError, match="'1 / 0' failed: ZeroDivisionError: division by zero"):
        edits.evaluate("1 / 0", (torch.zeros(1),))


def test_g_and_torch_are_the_gradient_and_torch_even_if_the_script_has_its_own():
    grad = torch.full((2,), 3.0)
    scope = {"g": torch.full((2,), 100.0), "torch": "not torch", "w": torch.ones(2)}
    assert torch.equal(edits.evaluate("g + w", (grad,), scope), torch.full((2,), 4.0))
    (new,) = edits.replace((grad,), "torch.ones_like(g) * 2", scope)
    assert torch.equal(new, torch.full((2,), 2.0))


def test_clip_of_a_sparse_gradient():
    """nn.Embedding(sparse=True) sends an uncoalesced sparse gradient (row 2 twice here)."""
    grad = torch.sparse_coo_tensor(torch.tensor([[1, 2, 2]]), torch.ones(3, 3), (10, 3), check_invariants=True)
    dense = grad.to_dense()
    (clipped,) = edits.clip((grad,), 1.0)
    assert clipped.layout == torch.sparse_coo
    assert torch.linalg.vector_norm(clipped.to_dense()) <= 1.0
    assert torch.allclose(clipped.to_dense(), dense / torch.linalg.vector_norm(dense), atol=1e-6)
