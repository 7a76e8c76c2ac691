"""PyTorch's own OpInfo samples through a Session: every op whose backward
can send a ZeroTensor, and 100 others picked evenly from op_db, each sample's gradients in
`continue`, in `step` mode and at double backward exactly a plain run's (NaN-aware), or the same
exception where the plain run raises one."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves

from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import graph_nodes

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]  # ops' own deprecations

ZERO_TENSOR_OPS = [
    "sgn",
    "abs",
    "nn.functional.normalize",
    "nn.functional.softsign",
    "nn.functional.l1_loss",
    "nn.functional.smooth_l1_loss",
    "nn.functional.pairwise_distance",
    "norm",
    "linalg.norm",
    "linalg.vector_norm",
    "linalg.matrix_norm",
    "linalg.eigh",
    "linalg.svd",
    "special.i0e",
    "special.i1e",
    "nn.functional.huber_loss",
]
"""Ops whose backward (first or second) sends a ZeroTensor."""
OTHERS = 100
SAMPLES = 2
"""Samples per op: the first ones op_db gives (the small, plain cases)."""
DTYPE = torch.float64


@pytest.fixture(scope="module")
def op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db as ops

    return [op for op in ops if op.supports_autograd and DTYPE in op.supported_dtypes("cpu")]


def _fresh(sample: Any) -> Any:
    """The sample with new leaf tensors (same values), so every run starts from scratch."""
    return sample.transform(
        lambda t: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
    )


def _leaves(sample: Any) -> list[torch.Tensor]:
    return [
        t
        for t in tree_leaves((sample.input, sample.args, sample.kwargs))
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]


def _loss(op: Any, sample: Any) -> torch.Tensor | None:
    """A weighted sum of every differentiable output (weights break symmetries a plain sum has)."""
    torch.manual_seed(0)  # ops that draw random numbers draw the same ones in every run
    out = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    total = None
    for t in tree_leaves(out):
        if not (isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())):
            continue
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj()).sum(-1)
        weight = torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype).reshape(t.shape)
        term = (t * weight).sum()
        total = term if total is None else total + term
    return total


Outcome = tuple[str, Any]
"""("grads", tensors) or ("raised", the exception's class name)."""


def _first_order(op: Any, sample: Any) -> Outcome:
    sample = _fresh(sample)
    leaves = _leaves(sample)
    try:
        loss = _loss(op, sample)
        if loss is None:
            return ("grads", None)
        loss.backward()
    except Exception as exc:  # noqa: BLE001 - the plain run's failure is what gradtui must repeat
        return ("raised", type(exc).__name__)
    return ("grads", [leaf.grad for leaf in leaves])


def _double(op: Any, sample: Any, zero_tensors: list[int] | None = None) -> Outcome:
    """First-order gradients with create_graph, then the backward of their sum."""
    sample = _fresh(sample)
    leaves = _leaves(sample)
    try:
        loss = _loss(op, sample)
        if loss is None:
            return ("grads", None)
        firsts = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
        second = [g.sum() for g in firsts if g is not None and g.requires_grad]
        if not second:
            return ("grads", [None if g is None else g.detach() for g in firsts])
        total = torch.stack(second).sum()
        if zero_tensors is not None:  # count the ZeroTensors the second backward sends
            for node in graph_nodes(total.grad_fn):
                node.register_hook(
                    lambda gi, go: zero_tensors.extend(
                        1 for g in gi if isinstance(g, torch.Tensor) and g._is_zerotensor()
                    )
                )
        total.backward()
    except Exception as exc:  # noqa: BLE001
        return ("raised", type(exc).__name__)
    return ("grads", [None if g is None else g.detach() for g in firsts] + [leaf.grad for leaf in leaves])


def _debugged(run: Callable[[], Outcome], answer: str) -> tuple[Outcome, list[ev.Event]]:
    """`run()` under a Session that answers every pause with `answer` (in the pausing thread)."""
    events: list[ev.Event] = []
    session = Session(events.append)
    session.add_listener(lambda e: isinstance(e, ev.Paused) and session.submit(parse(answer)))
    with session:
        outcome = run()
    return outcome, events


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a.layout != torch.strided or b.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.isnan(), b.isnan())
        and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
    )


def _check(name: str, plain: Outcome, debugged: Outcome, events: list[ev.Event]) -> None:
    assert plain[0] == debugged[0], f"{name}: plain {plain}, under gradtui {debugged}"
    if plain[0] == "raised":
        assert plain[1] == debugged[1], name
        return
    assert (plain[1] is None) == (debugged[1] is None), name
    for i, (want, got) in enumerate(zip(plain[1] or (), debugged[1] or (), strict=True)):
        assert _same(want, got), f"{name}: gradient {i} differs"
    for e in events:
        if isinstance(e, ev.PassFinished):
            assert e.error is None, f"{name}: pass {e.pass_index} failed under gradtui only: {e.error}"


def _run_ops(ops: list[Any]) -> tuple[int, int]:
    """Check every sample of `ops`; returns (samples compared, ZeroTensors the plain runs sent)."""
    compared = zeros = 0
    for op in ops:
        for k, sample in enumerate(itertools.islice(op.sample_inputs("cpu", DTYPE, requires_grad=True), SAMPLES)):
            name = f"{op.name}.{op.variant_test_name or ''}[{k}]"
            plain = _first_order(op, sample)
            for answer in ("continue", "step"):
                _check(f"{name} {answer}", plain, *_debugged(lambda: _first_order(op, sample), answer))
            counted: list[int] = []
            plain_double = _double(op, sample, counted)
            _check(f"{name} double", plain_double, *_debugged(lambda: _double(op, sample), "continue"))
            zeros += len(counted)
            compared += 1
    return compared, zeros


def test_every_op_that_sends_zero_tensors(op_db):
    ops = [op for op in op_db if op.name in ZERO_TENSOR_OPS]
    assert {op.name for op in ops} == set(ZERO_TENSOR_OPS)  # none renamed away
    compared, zeros = _run_ops(ops)
    assert compared >= len(ZERO_TENSOR_OPS)
    assert zeros > len(ZERO_TENSOR_OPS)  # the samples do send ZeroTensors: the case is covered


def test_a_hundred_other_ops(op_db):
    others = sorted(
        (op for op in op_db if op.name not in ZERO_TENSOR_OPS), key=lambda op: (op.name, op.variant_test_name)
    )
    step = len(others) / OTHERS
    ops = [others[int(i * step)] for i in range(OTHERS)]
    compared, _ = _run_ops(ops)
    assert compared >= OTHERS
